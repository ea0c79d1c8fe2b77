package fencedlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v4"
)

// Why a lease was lost: the Reason of its ErrLeaseLost error and OnLost's argument.
const (
	LostNotHeld  = "renew_lease returned NULL: the lease was released or taken over"
	LostDeadline = "no renewal completed before the lease's validity ended"
	LostReleased = "released"
)

// NewOwner returns an owner id no other holder has: host, process and a random part.
func NewOwner() string {
	host, _ := os.Hostname()
	if len(host) > 64 {
		host = host[:64]
	}
	random := make([]byte, 8)
	_, _ = rand.Read(random)
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(random))
}

// leaseClock is a lease's timing on the monotonic clock (time.Now's monotonic reading, never
// the wall clock). The server grants the ttl from the moment it runs the call, which is after
// the call was sent, so the lease is known valid until the send time plus the ttl, less a
// margin (for the clocks' rates and the time a write takes once the holder has checked).
// Renewals are due every third of the ttl; one that fails for a passing reason is tried
// again sooner, while time remains.
type leaseClock struct {
	ttl, margin, retry      time.Duration
	validUntil, nextRenewal time.Time
}

func newLeaseClock(ttl time.Duration, margin *time.Duration) (*leaseClock, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("fencedlock: the ttl must be positive, not %v", ttl)
	}
	c := &leaseClock{ttl: ttl, margin: ttl / 5, retry: ttl / 10}
	if c.margin > 2*time.Second {
		c.margin = 2 * time.Second
	}
	if c.retry > time.Second {
		c.retry = time.Second
	}
	if margin != nil {
		if *margin < 0 || *margin >= ttl/3 {
			return nil, fmt.Errorf("fencedlock: the margin must be at least 0 and below a third of the ttl, not %v", *margin)
		}
		c.margin = *margin
	}
	return c, nil
}

func (c *leaseClock) renewed(sentAt time.Time) {
	c.validUntil = sentAt.Add(c.ttl)
	c.nextRenewal = sentAt.Add(c.ttl / 3)
}

// deadline is when the lease stops being known valid: no renewal may complete after it.
func (c *leaseClock) deadline() time.Time { return c.validUntil.Add(-c.margin) }

// Connect opens a lease's own connection (pgx.Connect by default).
type Connect func(ctx context.Context, connString string) (*pgx.Conn, error)

type leaseOptions struct {
	owner   string
	wait    *time.Duration
	margin  *time.Duration
	onLost  func(reason string)
	connect Connect
}

// LeaseOption changes how a lease is taken and kept.
type LeaseOption func(*leaseOptions)

// WithOwner gives the owner id (by default one made for this call: NewOwner). Give your own
// only when several processes must share one lease.
func WithOwner(owner string) LeaseOption { return func(o *leaseOptions) { o.owner = owner } }

// WithWait waits up to d for a held lease to be released or expire.
func WithWait(d time.Duration) LeaseOption { return func(o *leaseOptions) { o.wait = &d } }

// WithMargin is subtracted from the validity (default: a fifth of the ttl, at most 2 s).
func WithMargin(d time.Duration) LeaseOption { return func(o *leaseOptions) { o.margin = &d } }

// WithOnLost is called once, with the reason, when the lease is lost (not on Release), before
// the lease's context is cancelled.
func WithOnLost(f func(reason string)) LeaseOption { return func(o *leaseOptions) { o.onLost = f } }

// WithConnect opens the lease's connection.
func WithConnect(connect Connect) LeaseOption {
	return func(o *leaseOptions) { o.connect = connect }
}

func defaultConnect(ctx context.Context, connString string) (*pgx.Conn, error) {
	return pgx.Connect(ctx, connString)
}

// Lease is a lease held for its Owner, renewed in the background every third of its ttl on a
// connection of its own until Release.
//
// Its Context is cancelled when the lease ends: released, or lost because a renewal found it
// no longer held, failed, or could not complete before its validity ended (less the margin:
// the renewal's own deadline, so a renewal hung on a dead link ends then). A lease is never
// taken again behind the holder's back: once lost, it stays lost.
type Lease struct {
	NS, ID int32
	Owner  string
	Token  int64

	conn     *pgx.Conn
	clock    *leaseClock
	onLost   func(reason string)
	ctx      context.Context
	cancel   context.CancelFunc
	mu       sync.Mutex // the clock, the reason and the renewal in flight
	reason   string
	calling  context.CancelFunc // the renewal in flight's, nil between renewals
	broken   bool
	stop     chan struct{} // closed by Release, once
	stopOnce sync.Once
	stopped  chan struct{} // closed when the renewer has returned
}

// TryAcquireLease returns the lease on (ns, id), or nil (and no error) when another owner
// holds it (after waiting, WithWait, for it to be released or expire). ctx bounds the call;
// the lease's own Context is not derived from it.
func TryAcquireLease(ctx context.Context, connString string, ns, id int32, ttl time.Duration,
	options ...LeaseOption) (*Lease, error) {
	o := leaseOptions{connect: defaultConnect}
	for _, option := range options {
		option(&o)
	}
	if o.owner == "" {
		o.owner = NewOwner()
	}
	clock, err := newLeaseClock(ttl, o.margin)
	if err != nil {
		return nil, err
	}
	if o.wait != nil && *o.wait < 0 {
		return nil, fmt.Errorf("fencedlock: the wait must be at least 0, not %v", *o.wait)
	}
	conn, err := o.connect(ctx, connString)
	if err != nil {
		return nil, FromDriver(err)
	}
	sentAt := time.Now()
	var token *int64
	if o.wait == nil {
		err = scan(ctx, conn, &token, acquireLeaseSQL, ns, id, o.owner, interval(ttl))
	} else {
		err = scan(ctx, conn, &token, acquireLeaseWaitSQL, ns, id, o.owner, interval(ttl), interval(*o.wait))
		// The wait ran out (55P03): busy, as without a wait.
		if errors.Is(err, ErrLockBusy) {
			err = nil
		}
	}
	if err != nil || token == nil {
		closeConn(conn)
		return nil, err
	}
	clock.renewed(sentAt)
	lease := &Lease{NS: ns, ID: id, Owner: o.owner, Token: *token, conn: conn, clock: clock,
		onLost: o.onLost, stop: make(chan struct{}), stopped: make(chan struct{})}
	lease.ctx, lease.cancel = context.WithCancel(context.Background())
	go lease.renew()
	return lease, nil
}

// AcquireLease is TryAcquireLease, but ErrLockBusy instead of nil.
func AcquireLease(ctx context.Context, connString string, ns, id int32, ttl time.Duration,
	options ...LeaseOption) (*Lease, error) {
	lease, err := TryAcquireLease(ctx, connString, ns, id, ttl, options...)
	if err == nil && lease == nil {
		err = &Error{Kind: ErrLockBusy, Message: fmt.Sprintf("the lease on (%d, %d) is held by another owner", ns, id)}
	}
	return lease, err
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// Context is cancelled when the lease ends (lost or released).
func (l *Lease) Context() context.Context { return l.ctx }

// Done is Context().Done().
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err is nil while the lease is held, then an ErrLeaseLost error whose Reason says how.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reason == "" {
		return nil
	}
	return &Error{Kind: ErrLeaseLost, Message: l.reason, Reason: l.reason}
}

// ValidFor is how long the lease is still known to be valid (0 once lost).
func (l *Lease) ValidFor() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reason != "" {
		return 0
	}
	if left := time.Until(l.clock.deadline()); left > 0 {
		return left
	}
	return 0
}

// Check returns an ErrLeaseLost error unless the lease is still known to be valid: call it
// before each step of the work (the clock is read here, so a holder paused past its validity
// finds out at once).
func (l *Lease) Check() error {
	l.mu.Lock()
	past := !time.Now().Before(l.clock.deadline())
	l.mu.Unlock()
	if past {
		l.lose(LostDeadline, true)
	}
	return l.Err()
}

func (l *Lease) lose(reason string, notify bool) {
	l.mu.Lock()
	if l.reason != "" {
		l.mu.Unlock()
		return
	}
	l.reason = reason
	l.mu.Unlock()
	// The callback first: whoever the context wakes finds it has run.
	if notify && l.onLost != nil {
		l.onLost(reason)
	}
	l.cancel()
}

func (l *Lease) renew() {
	defer close(l.stopped)
	for {
		l.mu.Lock()
		next, deadline := l.clock.nextRenewal, l.clock.deadline()
		l.mu.Unlock()
		timer := time.NewTimer(time.Until(next))
		select {
		case <-l.stop:
			timer.Stop()
			return
		case <-l.ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		sentAt := time.Now()
		// After a pause (SIGSTOP, a stalled VM) the lease is past its validity: lost, and
		// nothing is sent.
		if !sentAt.Before(deadline) {
			l.lose(LostDeadline, true)
			return
		}
		// The renewal must complete before the validity ends: pgx cancels it then (a renewal
		// hung on a dead link included).
		call, cancel := context.WithDeadline(context.Background(), deadline)
		l.mu.Lock()
		l.calling = cancel
		l.mu.Unlock()
		var expires *time.Time
		err := scan(call, l.conn, &expires, renewLeaseSQL, l.NS, l.ID, l.Token, interval(l.clock.ttl))
		cutOff := call.Err() != nil
		cancel()
		l.mu.Lock()
		l.calling = nil
		l.mu.Unlock()
		switch {
		case errors.Is(err, ErrLockBusy) || errors.Is(err, ErrRetryable):
			// Another transaction writing the row for a moment: again while time remains.
			l.mu.Lock()
			l.clock.nextRenewal = time.Now().Add(l.clock.retry)
			l.mu.Unlock()
		case err != nil && cutOff:
			// Cut off at the deadline (or by Release): the connection is unusable now.
			l.broken = true
			l.lose(LostDeadline, true)
			return
		case errors.Is(err, ErrConnectionLost):
			l.broken = true
			l.lose("the connection was lost: "+err.Error(), true)
			return
		case err != nil:
			l.lose("renewal failed: "+err.Error(), true)
			return
		case expires == nil:
			l.lose(LostNotHeld, true)
			return
		default:
			l.mu.Lock()
			l.clock.renewed(sentAt)
			l.mu.Unlock()
		}
	}
}

// Release ends the lease: true when the server released it (it was still this holder's). The
// Context is cancelled (reason LostReleased, no OnLost). After a loss it tries too, since a
// lease only known to be past its validity may still be this holder's; then its error is not
// returned. A renewal in flight is waited for, at most a third of the ttl (at least a second).
func (l *Lease) Release(ctx context.Context) (bool, error) {
	wasLost := l.Err() != nil
	l.stopOnce.Do(func() { close(l.stop) })
	bound := l.clock.ttl / 3
	if bound < time.Second {
		bound = time.Second
	}
	timer := time.NewTimer(bound)
	select {
	case <-l.stopped:
		timer.Stop()
	case <-timer.C:
		l.mu.Lock()
		if l.calling != nil {
			l.calling()
		}
		l.mu.Unlock()
		<-l.stopped
	}
	l.lose(LostReleased, false)
	defer closeConn(l.conn)
	if l.broken || l.conn.IsClosed() {
		return false, nil
	}
	var released bool
	err := scan(ctx, l.conn, &released, releaseLeaseSQL, l.NS, l.ID, l.Token)
	if err != nil && wasLost {
		return false, nil
	}
	return released, err
}
