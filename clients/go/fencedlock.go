// Package fencedlock takes fenced locks and self-renewing leases on PostgreSQL's fenced_lock
// extension with pgx v4: transaction locks in the caller's transaction, leases renewed in the
// background whose context is cancelled when they are lost, client-go's leader loop, guarded
// writes and typed errors.
//
// Every statement is sent with the simple protocol (pgx.QuerySimpleProtocol): pgx's default
// prepares statements on the server under names, which behind a transaction-mode pooler are
// missing on the next server connection. Each parameter is cast to the type the function takes.
package fencedlock

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

// Querier is what the transaction lock and the guarded writes run on: a pgx.Tx (the caller's
// transaction), a *pgx.Conn or a pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...interface{}) pgx.Row
	Exec(ctx context.Context, sql string, args ...interface{}) (pgconn.CommandTag, error)
}

const key = "$1::int4, $2::int4"

var (
	acquireSQL = map[bool][2]string{
		false: {"SELECT acquire_fenced(" + key + ")", "SELECT acquire_fenced(" + key + ", $3::interval)"},
		true: {"SELECT acquire_fenced(" + key + ", shared => true)",
			"SELECT acquire_fenced(" + key + ", $3::interval, true)"},
	}
	tryAcquireSQL = map[bool]string{
		false: "SELECT try_acquire_fenced(" + key + ")",
		true:  "SELECT try_acquire_fenced(" + key + ", true)",
	}
)

const (
	acquireLeaseSQL     = "SELECT try_acquire_lease(" + key + ", $3::text, $4::interval)"
	acquireLeaseWaitSQL = "SELECT acquire_lease(" + key + ", $3::text, $4::interval, $5::interval)"
	renewLeaseSQL       = "SELECT renew_lease(" + key + ", $3::int8, $4::interval)"
	releaseLeaseSQL     = "SELECT release_lease(" + key + ", $3::int8)"
	// The text forms: the key is read as the key column's type, whatever the Go value's type.
	fencedUpdateSQL = "SELECT fenced_update($1::text, $2::text, $3::int8, $4::jsonb, $5::text, $6::text)"
	fenceCheckSQL   = "SELECT fence_check($1::text, $2::int8)"
)

// scan sends sql with the simple protocol and scans the one value it returns into dest; a
// driver error becomes the typed error.
func scan(ctx context.Context, q Querier, dest interface{}, sql string, args ...interface{}) error {
	return FromDriver(q.QueryRow(ctx, sql, append([]interface{}{pgx.QuerySimpleProtocol(true)}, args...)...).Scan(dest))
}

// exec sends sql, which returns nothing a caller needs, with the simple protocol.
func exec(ctx context.Context, q Querier, sql string, args ...interface{}) error {
	_, err := q.Exec(ctx, sql, append([]interface{}{pgx.QuerySimpleProtocol(true)}, args...)...)
	return FromDriver(err)
}

// interval is a duration as the interval text the server reads (microseconds, its precision).
func interval(d time.Duration) string {
	return fmt.Sprintf("%d microseconds", d.Microseconds())
}

// pgConner is what *pgx.Conn and pgx.Tx (through Conn) offer: the session's transaction status.
type pgConner interface{ PgConn() *pgconn.PgConn }
type conner interface{ Conn() *pgx.Conn }

// requireTransaction refuses before sending when q is a connection outside a transaction ('I',
// idle, from the server's last ReadyForQuery). A pool has no status: the server's 25P01
// refuses then, as the same error.
func requireTransaction(q Querier) error {
	var conn *pgconn.PgConn
	switch q := q.(type) {
	case pgConner:
		conn = q.PgConn()
	case conner:
		conn = q.Conn().PgConn()
	}
	if conn != nil && conn.TxStatus() == 'I' {
		return &Error{Kind: ErrNotInTransaction, SQLState: "25P01",
			Message: "a transaction-scoped lock needs a transaction: use conn.Begin (outside one the lock would end with the statement)"}
	}
	return nil
}

type acquireOptions struct {
	timeout *time.Duration
	shared  bool
}

// AcquireOption changes how Acquire and TryAcquire take the lock.
type AcquireOption func(*acquireOptions)

// WithTimeout bounds the wait: ErrLockBusy after it.
func WithTimeout(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.timeout = &d }
}

// Shared takes the shared form (acquire_fenced_shared): other shared holders may hold it too.
func Shared() AcquireOption {
	return func(o *acquireOptions) { o.shared = true }
}

func acquireOptionsOf(options []AcquireOption) acquireOptions {
	var o acquireOptions
	for _, option := range options {
		option(&o)
	}
	return o
}

// Acquire takes the transaction-scoped lock on (ns, id) inside the caller's transaction,
// waiting (WithTimeout: at most that long, then ErrLockBusy), and returns its fencing token.
func Acquire(ctx context.Context, q Querier, ns, id int32, options ...AcquireOption) (int64, error) {
	if err := requireTransaction(q); err != nil {
		return 0, err
	}
	o := acquireOptionsOf(options)
	var token int64
	if o.timeout == nil {
		return token, scan(ctx, q, &token, acquireSQL[o.shared][0], ns, id)
	}
	return token, scan(ctx, q, &token, acquireSQL[o.shared][1], ns, id, interval(*o.timeout))
}

// TryAcquire returns the token and true, or false at once when another session holds (ns, id).
func TryAcquire(ctx context.Context, q Querier, ns, id int32, options ...AcquireOption) (int64, bool, error) {
	if err := requireTransaction(q); err != nil {
		return 0, false, err
	}
	var token *int64
	if err := scan(ctx, q, &token, tryAcquireSQL[acquireOptionsOf(options).shared], ns, id); err != nil || token == nil {
		return 0, false, err
	}
	return *token, true, nil
}

type updateOptions struct{ keyColumn, fenceColumn string }

// UpdateOption names FencedUpdate's columns.
type UpdateOption func(*updateOptions)

// KeyColumn is the column the key is looked up in ("id" by default).
func KeyColumn(name string) UpdateOption { return func(o *updateOptions) { o.keyColumn = name } }

// FenceColumn is the column holding the row's highest token ("fence" by default).
func FenceColumn(name string) UpdateOption { return func(o *updateOptions) { o.fenceColumn = name } }

// FencedUpdate writes changes to the row key of table and its fence to token, unless the row
// accepted a larger token: then ErrStaleToken, and nothing is written.
func FencedUpdate(ctx context.Context, q Querier, table string, key interface{}, token int64,
	changes map[string]interface{}, options ...UpdateOption) error {
	o := updateOptions{keyColumn: "id", fenceColumn: "fence"}
	for _, option := range options {
		option(&o)
	}
	document, err := json.Marshal(changes)
	if err != nil {
		return err
	}
	return exec(ctx, q, fencedUpdateSQL, table, fmt.Sprint(key), token, string(document),
		o.keyColumn, o.fenceColumn)
}

// FenceCheck records token as the highest resource accepted, or returns ErrStaleToken.
func FenceCheck(ctx context.Context, q Querier, resource string, token int64) error {
	return exec(ctx, q, fenceCheckSQL, resource, token)
}
