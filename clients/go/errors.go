package fencedlock

import (
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgconn"
)

// The kinds of error a caller acts on differently, one per SQLSTATE (the README's error
// table). Test with errors.Is; errors.As with *Error gives the SQLSTATE, the server's detail
// and hint, and for ErrStaleToken both tokens.
var (
	// ErrStaleToken (SF001): a write carried a token lower than one the resource already
	// accepted. Stop the work; acquire again for a new token.
	ErrStaleToken = errors.New("fencedlock: stale fencing token")
	// ErrLockBusy (55P03), or a lease another owner holds after the wait asked for.
	ErrLockBusy = errors.New("fencedlock: lock busy")
	// ErrNotInTransaction (25P01): a transaction-scoped lock asked for outside a transaction.
	ErrNotInTransaction = errors.New("fencedlock: not in a transaction")
	// ErrRetryable (40001, 40P01): roll back and retry the transaction.
	ErrRetryable = errors.New("fencedlock: retryable")
	// ErrReadOnly (25006): a read-only transaction or a hot standby, where no token is drawn.
	ErrReadOnly = errors.New("fencedlock: read-only")
	// ErrConnectionLost (class 08, 57P01-57P03, a connection gone): any lock on it is lost.
	ErrConnectionLost = errors.New("fencedlock: connection lost")
	// ErrLeaseLost: Lease.Check and Lease.Err once the lease is lost.
	ErrLeaseLost = errors.New("fencedlock: lease lost")
)

// Error is every error of this package: its Kind (one of the Err values above), and for one
// the server raised its SQLSTATE, message, detail and hint, and the driver's error.
type Error struct {
	Kind     error
	SQLState string
	Message  string
	Detail   string
	Hint     string
	// For ErrStaleToken: the token offered (nil for NULL), the one accepted, the resource.
	Offered  *int64
	Accepted int64
	Resource string
	// For ErrLeaseLost: how.
	Reason string
	Err    error
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Kind.Error()
	}
	return e.Kind.Error() + ": " + e.Message
}

// Is makes errors.Is(err, ErrStaleToken) (and the others) hold.
func (e *Error) Is(target error) bool { return target == e.Kind }

func (e *Error) Unwrap() error { return e.Err }

var bySQLState = map[string]error{
	"SF001": ErrStaleToken,
	"55P03": ErrLockBusy,
	"25P01": ErrNotInTransaction,
	"40001": ErrRetryable,
	"40P01": ErrRetryable,
	"25006": ErrReadOnly,
	// admin_shutdown, crash_shutdown, cannot_connect_now: the session is gone.
	"57P01": ErrConnectionLost,
	"57P02": ErrConnectionLost,
	"57P03": ErrConnectionLost,
}

var stale = regexp.MustCompile(`stale fencing token (NULL|-?\d+) for (.*): token (-?\d+) was already accepted`)
var namedResource = regexp.MustCompile(`^resource "(.*)"$`)

// FromDriver returns the typed error for an error pgx returned, or the error itself when no
// kind fits.
func FromDriver(err error) error {
	var typed *Error
	if err == nil || errors.As(err, &typed) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		kind := bySQLState[pgErr.Code]
		if kind == nil && strings.HasPrefix(pgErr.Code, "08") {
			kind = ErrConnectionLost
		}
		if kind == nil {
			return err
		}
		typed = &Error{Kind: kind, SQLState: pgErr.Code, Message: pgErr.Message,
			Detail: pgErr.Detail, Hint: pgErr.Hint, Err: err}
		if kind == ErrStaleToken {
			if match := stale.FindStringSubmatch(pgErr.Message); match != nil {
				if match[1] != "NULL" {
					offered, _ := strconv.ParseInt(match[1], 10, 64)
					typed.Offered = &offered
				}
				typed.Resource = match[2]
				if named := namedResource.FindStringSubmatch(match[2]); named != nil {
					typed.Resource = named[1]
				}
				typed.Accepted, _ = strconv.ParseInt(match[3], 10, 64)
			}
		}
		return typed
	}
	if connectionGone(err) {
		return &Error{Kind: ErrConnectionLost, Message: err.Error(), Err: err}
	}
	return err
}

// What pgx returns when the socket is gone, the connection was never made, or was closed:
// network errors, an early EOF, pgconn's own messages. The caller's context ending is not one.
func connectionGone(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	message := err.Error()
	for _, gone := range []string{"conn closed", "failed to connect", "closed network connection",
		"unexpected EOF", "connection reset"} {
		if strings.Contains(message, gone) {
			return true
		}
	}
	return false
}
