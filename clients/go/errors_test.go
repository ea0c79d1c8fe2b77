package fencedlock_test

// Typed errors from the SQLSTATEs the server raises, and the library's own refusals.

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"

	fencedlock "github.com/fenced-lock/fenced_lock/clients/go"
)

func TestReadOnlyTransaction(t *testing.T) {
	conn := connect(t, direct)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = fencedlock.Acquire(ctx, tx, ns, newID())
	kindOf(t, err, fencedlock.ErrReadOnly, "25006")
}

func TestDeadlockIsRetryable(t *testing.T) {
	id := newID()
	a, b := connect(t, direct), connect(t, direct)
	txA, _ := a.Begin(ctx)
	txB, _ := b.Begin(ctx)
	defer func() { _ = txA.Rollback(ctx); _ = txB.Rollback(ctx) }()
	if _, err := fencedlock.Acquire(ctx, txA, ns, id); err != nil {
		t.Fatal(err)
	}
	if _, err := fencedlock.Acquire(ctx, txB, ns, id+1); err != nil {
		t.Fatal(err)
	}
	outcomes := make([]error, 2)
	var both sync.WaitGroup
	for i, take := range []struct {
		tx pgx.Tx
		id int32
	}{{txA, id + 1}, {txB, id}} {
		i, take := i, take
		both.Add(1)
		go func() {
			defer both.Done()
			_, outcomes[i] = fencedlock.Acquire(ctx, take.tx, ns, take.id)
		}()
	}
	both.Wait()
	if (outcomes[0] == nil) == (outcomes[1] == nil) {
		t.Fatal("one of the two must fail", outcomes)
	}
	failed := outcomes[0]
	if failed == nil {
		failed = outcomes[1]
	}
	kindOf(t, failed, fencedlock.ErrRetryable, "40P01")
}

func TestTerminatedBackendIsConnectionLost(t *testing.T) {
	id := newID()
	conn := connect(t, direct)
	tx, _ := conn.Begin(ctx)
	if _, err := fencedlock.Acquire(ctx, tx, ns, id); err != nil {
		t.Fatal(err)
	}
	var terminated bool
	queryRow(t, []interface{}{&terminated}, "SELECT pg_terminate_backend($1)", conn.PgConn().PID())
	_, err := fencedlock.Acquire(ctx, tx, ns, id+1)
	if !errors.Is(err, fencedlock.ErrConnectionLost) {
		t.Fatalf("%#v", err)
	}
}

func TestStaleTokenAndUnmappedErrors(t *testing.T) {
	conn := connect(t, direct)
	if err := fencedlock.FenceCheck(ctx, conn, "go-errors-resource", 10); err != nil {
		t.Fatal(err)
	}
	stale := kindOf(t, fencedlock.FenceCheck(ctx, conn, "go-errors-resource", 5), fencedlock.ErrStaleToken, "SF001")
	if stale.Offered == nil || *stale.Offered != 5 || stale.Accepted != 10 || stale.Hint == "" || stale.Detail == "" {
		t.Fatalf("%+v", stale)
	}
	var pgErr *pgconn.PgError
	if !errors.As(stale, &pgErr) || pgErr.Code != "SF001" {
		t.Fatal("the driver's error is wrapped", stale.Err)
	}
	// An error of no kind is the driver's own.
	var nothing interface{}
	err := conn.QueryRow(ctx, "SELECT no_such_function()").Scan(&nothing)
	if !errors.As(err, &pgErr) || pgErr.Code != "42883" || fencedlock.FromDriver(err) != err {
		t.Fatalf("%#v", err)
	}
}

func TestLockTimeoutIsBusy(t *testing.T) {
	id := newID()
	a, b := connect(t, direct), connect(t, direct)
	inTx(t, a, func(tx pgx.Tx) {
		if _, err := fencedlock.Acquire(ctx, tx, ns, id); err != nil {
			t.Fatal(err)
		}
		other, _ := b.Begin(ctx)
		defer func() { _ = other.Rollback(ctx) }()
		if _, err := other.Exec(ctx, "SET LOCAL lock_timeout = '100ms'"); err != nil {
			t.Fatal(err)
		}
		_, err := fencedlock.Acquire(ctx, other, ns, id)
		kindOf(t, err, fencedlock.ErrLockBusy, "55P03")
	})
}

func TestBadDurationsAreRefusedBeforeAnythingIsSent(t *testing.T) {
	nowhere := "host=/nonexistent-fenced-lock-socket-dir user=postgres"
	for _, ttl := range []time.Duration{0, -time.Second} {
		if _, err := fencedlock.AcquireLease(ctx, nowhere, ns, 1, ttl); err == nil || errors.Is(err, fencedlock.ErrConnectionLost) {
			t.Fatal(ttl, err)
		}
	}
	for _, option := range []fencedlock.LeaseOption{fencedlock.WithMargin(time.Second), fencedlock.WithWait(-time.Second)} {
		if _, err := fencedlock.AcquireLease(ctx, nowhere, ns, 1, 3*time.Second, option); err == nil || errors.Is(err, fencedlock.ErrConnectionLost) {
			t.Fatal(err)
		}
	}
}

func TestUnreachableServerIsConnectionLost(t *testing.T) {
	_, err := fencedlock.AcquireLease(ctx, "host=/nonexistent-fenced-lock-socket-dir user=postgres", ns, newID(), 3*time.Second)
	if !errors.Is(err, fencedlock.ErrConnectionLost) {
		t.Fatalf("%#v", err)
	}
}
