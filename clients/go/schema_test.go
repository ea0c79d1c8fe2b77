package fencedlock_test

import (
	"errors"
	"os"
	"testing"
	"time"

	fencedlock "github.com/fenced-lock/fenced_lock/clients/go"
)

// The extension in a schema of its own (CREATE EXTENSION fenced_lock SCHEMA fenced), found
// through the connection's search_path: a lock, a guarded write, a lease.
func TestSchemaThroughSearchPath(t *testing.T) {
	dsn := os.Getenv("CLIENTS_SCHEMA_DSN")
	conn := connect(t, dsn)
	var schema string
	if err := conn.QueryRow(ctx, "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'fenced_lock'").Scan(&schema); err != nil || schema != "fenced" {
		t.Fatalf("extension in %q (%v)", schema, err)
	}
	var tokens []int64
	for _, body := range []string{"first", "second"} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		token, err := fencedlock.Acquire(ctx, tx, 1003, 1)
		if err == nil {
			err = fencedlock.FencedUpdate(ctx, tx, "documents", 1, token, map[string]interface{}{"body": body})
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, token)
	}
	if tokens[1] <= tokens[0] {
		t.Fatalf("tokens %v do not rise", tokens)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = fencedlock.FencedUpdate(ctx, tx, "documents", 1, tokens[0], map[string]interface{}{"body": "stale"})
	_ = tx.Rollback(ctx)
	if !errors.Is(err, fencedlock.ErrStaleToken) {
		t.Fatalf("a stale write gave %v", err)
	}
	lease, err := fencedlock.AcquireLease(ctx, dsn, 1003, 2, 30*time.Second)
	if err != nil || lease.Token <= tokens[1] {
		t.Fatalf("lease %v (%v)", lease, err)
	}
	if _, err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
