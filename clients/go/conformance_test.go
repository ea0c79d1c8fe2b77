package fencedlock_test

// The conformance scenarios (clients/conformance.md), directly and through PgBouncer.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"

	fencedlock "github.com/fenced-lock/fenced_lock/clients/go"
)

func inTx(t *testing.T, conn *pgx.Conn, work func(tx pgx.Tx)) {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	work(tx)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func mustLease(t *testing.T, dsn string, id int32, ttl time.Duration, options ...fencedlock.LeaseOption) *fencedlock.Lease {
	t.Helper()
	lease, err := fencedlock.AcquireLease(ctx, dsn, ns, id, ttl, options...)
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

func release(t *testing.T, lease *fencedlock.Lease) bool {
	t.Helper()
	released, err := lease.Release(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return released
}

func kindOf(t *testing.T, err error, kind error, sqlstate string) *fencedlock.Error {
	t.Helper()
	var typed *fencedlock.Error
	if !errors.Is(err, kind) || !errors.As(err, &typed) || typed.SQLState != sqlstate {
		t.Fatalf("want %v (%q), got %#v", kind, sqlstate, err)
	}
	return typed
}

func TestConformance(t *testing.T) {
	for _, route := range routes {
		dsn := route.dsn
		t.Run(route.name, func(t *testing.T) {
			t.Run("transaction_lock_take", func(t *testing.T) { transactionLockTake(t, dsn) })
			t.Run("transaction_lock_outside_a_transaction", func(t *testing.T) { outsideATransaction(t, dsn) })
			t.Run("busy", func(t *testing.T) { busy(t, dsn) })
			t.Run("lease_take_renew_release", func(t *testing.T) { leaseTakeRenewRelease(t, dsn) })
			t.Run("lease_wait_with_timeout", func(t *testing.T) { leaseWaitWithTimeout(t, dsn) })
			t.Run("stale_write_refused", func(t *testing.T) { staleWriteRefused(t, dsn) })
			t.Run("owner_rule", func(t *testing.T) { ownerRule(t, dsn) })
			t.Run("leader_handover", func(t *testing.T) { leaderHandover(t, dsn) })
			t.Run("lost_when_no_longer_held", func(t *testing.T) { lostWhenNoLongerHeld(t, dsn) })
		})
	}
}

func transactionLockTake(t *testing.T, dsn string) {
	id := newID()
	a, b := connect(t, dsn), connect(t, dsn)
	var token int64
	inTx(t, a, func(tx pgx.Tx) {
		var err error
		if token, err = fencedlock.Acquire(ctx, tx, ns, id); err != nil || token <= 0 {
			t.Fatal(token, err)
		}
		var current int64
		if err := tx.QueryRow(ctx, "SELECT current_fence($1::int4, $2::int4)", pgx.QuerySimpleProtocol(true), ns, id).Scan(&current); err != nil || current != token {
			t.Fatal(current, err)
		}
		inTx(t, b, func(other pgx.Tx) {
			if _, held, err := fencedlock.TryAcquire(ctx, other, ns, id); held || err != nil {
				t.Fatal("busy expected", held, err)
			}
		})
	})
	inTx(t, b, func(tx pgx.Tx) {
		later, err := fencedlock.Acquire(ctx, tx, ns, id, fencedlock.WithTimeout(time.Second))
		if err != nil || later <= token {
			t.Fatal(later, token, err)
		}
	})
}

func outsideATransaction(t *testing.T, dsn string) {
	id := newID()
	conn := connect(t, dsn)
	_, err := fencedlock.Acquire(ctx, conn, ns, id)
	kindOf(t, err, fencedlock.ErrNotInTransaction, "25P01")
	_, _, err = fencedlock.TryAcquire(ctx, conn, ns, id)
	kindOf(t, err, fencedlock.ErrNotInTransaction, "25P01")
	// The server's own refusal maps to the same kind.
	var token *int64
	err = conn.QueryRow(ctx, "SELECT acquire_fenced($1::int4, $2::int4)", ns, id).Scan(&token)
	kindOf(t, fencedlock.FromDriver(err), fencedlock.ErrNotInTransaction, "25P01")
}

func busy(t *testing.T, dsn string) {
	id := newID()
	a, b := connect(t, dsn), connect(t, dsn)
	inTx(t, a, func(tx pgx.Tx) {
		if _, err := fencedlock.Acquire(ctx, tx, ns, id); err != nil {
			t.Fatal(err)
		}
		other, err := b.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fencedlock.Acquire(ctx, other, ns, id, fencedlock.WithTimeout(200*time.Millisecond))
		_ = other.Rollback(ctx)
		kindOf(t, err, fencedlock.ErrLockBusy, "55P03")
	})
	lease := mustLease(t, dsn, id, 5*time.Second)
	defer release(t, lease)
	if other, err := fencedlock.TryAcquireLease(ctx, dsn, ns, id, 5*time.Second); other != nil || err != nil {
		t.Fatal("busy expected", other, err)
	}
	if _, err := fencedlock.AcquireLease(ctx, dsn, ns, id, 5*time.Second); !errors.Is(err, fencedlock.ErrLockBusy) {
		t.Fatal("ErrLockBusy expected", err)
	}
}

func leaseTakeRenewRelease(t *testing.T, dsn string) {
	id := newID()
	lease := mustLease(t, dsn, id, 1200*time.Millisecond)
	if lease.Token <= 0 || lease.Err() != nil {
		t.Fatal(lease.Token, lease.Err())
	}
	// Three times its ttl: only the renewer keeps it.
	time.Sleep(3600 * time.Millisecond)
	if err := lease.Check(); err != nil {
		t.Fatal(err)
	}
	if row := leaseOf(t, id); row == nil || *row != (leaseRow{lease.Token, lease.Owner, true}) {
		t.Fatalf("%+v", row)
	}
	if valid := lease.ValidFor(); valid <= 0 || valid > 1200*time.Millisecond {
		t.Fatal(valid)
	}
	if !release(t, lease) {
		t.Fatal("not released")
	}
	var lost *fencedlock.Error
	if !doneWithin(lease.Done(), 0) || !errors.As(lease.Err(), &lost) || lost.Reason != fencedlock.LostReleased {
		t.Fatal(lease.Err())
	}
	if leaseOf(t, id) != nil {
		t.Fatal("still held")
	}
	if !errors.Is(lease.Check(), fencedlock.ErrLeaseLost) {
		t.Fatal(lease.Check())
	}
}

func leaseWaitWithTimeout(t *testing.T, dsn string) {
	id := newID()
	held := mustLease(t, dsn, id, 10*time.Second)
	started := time.Now()
	if lease, err := fencedlock.TryAcquireLease(ctx, dsn, ns, id, 5*time.Second, fencedlock.WithWait(500*time.Millisecond)); lease != nil || err != nil {
		t.Fatal(lease, err)
	}
	if waited := time.Since(started); waited < 450*time.Millisecond || waited > 3*time.Second {
		t.Fatal(waited)
	}
	time.AfterFunc(300*time.Millisecond, func() { _, _ = held.Release(ctx) })
	started = time.Now()
	next := mustLease(t, dsn, id, 5*time.Second, fencedlock.WithWait(5*time.Second))
	defer release(t, next)
	// Woken at the release's commit, not at the end of the wait or the ttl.
	if waited := time.Since(started); waited > 2*time.Second || next.Token <= held.Token {
		t.Fatal(waited, next.Token, held.Token)
	}
}

func staleWriteRefused(t *testing.T, dsn string) {
	id, row := newID(), docID(t)
	first := mustLease(t, dsn, id, 5*time.Second)
	release(t, first)
	second := mustLease(t, dsn, id, 5*time.Second)
	defer release(t, second)
	conn := connect(t, dsn)
	if err := fencedlock.FencedUpdate(ctx, conn, "documents", row, second.Token, map[string]interface{}{"body": "second"}); err != nil {
		t.Fatal(err)
	}
	err := fencedlock.FencedUpdate(ctx, conn, "documents", row, first.Token, map[string]interface{}{"body": "first"})
	stale := kindOf(t, err, fencedlock.ErrStaleToken, "SF001")
	if stale.Offered == nil || *stale.Offered != first.Token || stale.Accepted != second.Token {
		t.Fatalf("%+v", stale)
	}
	if text := body(t, row); text == nil || *text != "second" {
		t.Fatal(text)
	}
	resource := fmt.Sprintf("go-resource-%d", id)
	if err := fencedlock.FenceCheck(ctx, conn, resource, second.Token); err != nil {
		t.Fatal(err)
	}
	stale = kindOf(t, fencedlock.FenceCheck(ctx, conn, resource, first.Token), fencedlock.ErrStaleToken, "SF001")
	if stale.Accepted != second.Token || stale.Resource != resource {
		t.Fatalf("%+v", stale)
	}
}

func ownerRule(t *testing.T, dsn string) {
	id := newID()
	lease := mustLease(t, dsn, id, 1500*time.Millisecond, fencedlock.WithOwner("worker-a"))
	if other, err := fencedlock.TryAcquireLease(ctx, dsn, ns, id, 5*time.Second, fencedlock.WithOwner("worker-b")); other != nil || err != nil {
		t.Fatal(other, err)
	}
	// The same owner again (another process of it, behind a pooler): the same lease and token,
	// not a new one; its release ends the lease for both handles.
	again := mustLease(t, dsn, id, 5*time.Second, fencedlock.WithOwner("worker-a"))
	if again.Token != lease.Token || !release(t, again) {
		t.Fatal(again.Token, lease.Token)
	}
	var lost *fencedlock.Error
	if !doneWithin(lease.Done(), 1500*time.Millisecond) || !errors.As(lease.Err(), &lost) || lost.Reason != fencedlock.LostNotHeld {
		t.Fatal(lease.Err())
	}
	release(t, lease)
	other := mustLease(t, dsn, id, 5*time.Second, fencedlock.WithOwner("worker-b"))
	defer release(t, other)
	if other.Token <= lease.Token {
		t.Fatal(other.Token, lease.Token)
	}
	// Owners the library makes differ from call to call.
	if third, err := fencedlock.TryAcquireLease(ctx, dsn, ns, id, 5*time.Second); third != nil || err != nil {
		t.Fatal(third, err)
	}
}

func leaderHandover(t *testing.T, dsn string) {
	id := newID()
	type term struct {
		candidate int
		term      int64
		at        time.Time
	}
	var mu sync.Mutex
	var terms []term
	var stopped []int
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(terms) }
	stops := make([]func(), 2)
	var running sync.WaitGroup
	for candidate := range stops {
		candidate := candidate
		election, stop := context.WithCancel(ctx)
		t.Cleanup(stop)
		stops[candidate] = stop
		running.Add(1)
		go func() {
			defer running.Done()
			_ = fencedlock.RunLeaderElection(election, fencedlock.LeaderElectionConfig{
				ConnString: dsn, NS: ns, ID: id, TTL: 2 * time.Second, RetryPeriod: time.Second,
				Callbacks: fencedlock.LeaderCallbacks{OnStartedLeading: func(termCtx context.Context, won int64) {
					mu.Lock()
					terms = append(terms, term{candidate, won, time.Now()})
					mu.Unlock()
					<-termCtx.Done()
				}, OnStoppedLeading: func() {
					mu.Lock()
					stopped = append(stopped, candidate)
					mu.Unlock()
				}},
			})
		}()
	}
	if !waitUntil(5*time.Second, func() bool { return count() == 1 }) {
		t.Fatal("no leader")
	}
	time.Sleep(500 * time.Millisecond)
	if count() != 1 {
		t.Fatal("two leaders at a time")
	}
	leader := terms[0]
	stoppedAt := time.Now()
	stops[leader.candidate]()
	if !waitUntil(5*time.Second, func() bool { return count() == 2 }) {
		t.Fatal("no second leader")
	}
	follower := terms[1]
	// Handed over at the release, well within the ttl, with a larger term.
	if follower.candidate == leader.candidate || follower.term <= leader.term || follower.at.Sub(stoppedAt) > 1500*time.Millisecond {
		t.Fatalf("%+v after %+v", follower, leader)
	}
	// The stopped leader is told its term ended (after its release); the follower leads on.
	told := waitUntil(2*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(stopped) == 1 })
	mu.Lock()
	if !told || len(stopped) != 1 || stopped[0] != leader.candidate {
		t.Fatal(stopped)
	}
	mu.Unlock()
	stops[follower.candidate]()
	running.Wait()
	if len(stopped) != 2 || stopped[1] != follower.candidate {
		t.Fatal(stopped)
	}
}

func lostWhenNoLongerHeld(t *testing.T, dsn string) {
	id := newID()
	var reasons []string
	var mu sync.Mutex
	lease := mustLease(t, dsn, id, 1500*time.Millisecond, fencedlock.WithOnLost(func(reason string) {
		mu.Lock()
		reasons = append(reasons, reason)
		mu.Unlock()
	}))
	var released bool
	queryRow(t, []interface{}{&released}, "SELECT release_lease($1::int4, $2::int4, $3::int8)", ns, id, lease.Token)
	if !released {
		t.Fatal("not released")
	}
	successor := mustLease(t, dsn, id, 5*time.Second)
	// Told at its next renewal, within a third of the ttl.
	if !doneWithin(lease.Done(), 1500*time.Millisecond) {
		t.Fatal("not told")
	}
	mu.Lock()
	if len(reasons) != 1 || reasons[0] != fencedlock.LostNotHeld {
		t.Fatal(reasons)
	}
	mu.Unlock()
	if !errors.Is(lease.Check(), fencedlock.ErrLeaseLost) || release(t, lease) {
		t.Fatal("lost, and not released by the old holder")
	}
	if row := leaseOf(t, id); row == nil || row.token != successor.Token {
		t.Fatalf("%+v", row)
	}
	release(t, successor)
	if !waitUntil(time.Second, func() bool { return leaseOf(t, id) == nil }) {
		t.Fatal("still held")
	}
}

func TestNoPreparedStatements(t *testing.T) {
	// Behind a transaction-mode pooler a named statement may be missing on the next server
	// connection: the library prepares none, on a connection with pgx's defaults (which
	// prepare every statement they send).
	id, row := newID(), docID(t)
	conn := connect(t, direct)
	for i := 0; i < 8; i++ {
		inTx(t, conn, func(tx pgx.Tx) {
			token, err := fencedlock.Acquire(ctx, tx, ns, id)
			if err == nil {
				err = fencedlock.FencedUpdate(ctx, tx, "documents", row, token, map[string]interface{}{"body": "x"})
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
	var prepared int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements", pgx.QuerySimpleProtocol(true)).Scan(&prepared); err != nil || prepared != 0 {
		t.Fatal(prepared, err)
	}
}
