package fencedlock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/jackc/pgx/v4"

	fencedlock "github.com/fenced-lock/fenced_lock/clients/go"
)

// A transaction lock: taken inside the caller's transaction, ended with it.
func ExampleAcquire() {
	ctx := context.Background()
	conn, _ := pgx.Connect(ctx, "host=/var/run/postgresql dbname=app")
	tx, _ := conn.Begin(ctx)
	token, err := fencedlock.Acquire(ctx, tx, 1001, 42, fencedlock.WithTimeout(5*time.Second))
	if errors.Is(err, fencedlock.ErrLockBusy) {
		log.Print("busy")
	}
	_ = fencedlock.FencedUpdate(ctx, tx, "accounts", 42, token, map[string]interface{}{"balance": 10})
	_ = tx.Commit(ctx)
}

// A lease renewed in the background; its context is cancelled when it is lost.
func ExampleAcquireLease() {
	ctx := context.Background()
	lease, err := fencedlock.AcquireLease(ctx, "host=/var/run/postgresql dbname=app", 1001, 42, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = lease.Release(ctx) }()
	for step := 0; step < 10; step++ {
		if err := lease.Check(); err != nil { // ErrLeaseLost once not known valid
			return
		}
		work(lease.Context(), step, lease.Token) // the resource checks the token
	}
}

// client-go's leader loop: one leader at a time, the term its fencing token.
func ExampleRunLeaderElection() {
	ctx := context.Background()
	_ = fencedlock.RunLeaderElection(ctx, fencedlock.LeaderElectionConfig{
		ConnString: "host=/var/run/postgresql dbname=app", NS: 1001, ID: 1, TTL: 15 * time.Second,
		Callbacks: fencedlock.LeaderCallbacks{
			OnStartedLeading: func(term context.Context, token int64) { lead(term, token) },
		},
	})
}

func work(context.Context, int, int64) {}

func lead(context.Context, int64) {}
