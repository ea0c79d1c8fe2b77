// Package restart holds the test that restarts the server under a holder: run last, alone (it
// ends every session).
package restart

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	fencedlock "github.com/fenced-lock/fenced_lock/clients/go"
)

func TestServerRestarted(t *testing.T) {
	// Its lease's session is gone, so the holder is told (a connection lost is a lease lost,
	// never re-taken with a new token), and once the ttl has passed a successor gets a larger
	// token.
	ctx, dsn, id := context.Background(), os.Getenv("CLIENTS_DSN"), int32(7702*1000+os.Getpid()%1000)
	reasons := make(chan string, 2)
	lease, err := fencedlock.AcquireLease(ctx, dsn, 7702, id, 3*time.Second,
		fencedlock.WithOnLost(func(r string) { reasons <- r }))
	if err != nil {
		t.Fatal(err)
	}
	pg := filepath.Join(os.Getenv("CLIENTS_SCRIPTS"), "pg.sh")
	directory := os.Getenv("CLIENTS_SERVER_DIR")
	for _, argv := range [][]string{{"stop", directory},
		append([]string{"start", directory}, strings.Fields(os.Getenv("CLIENTS_SERVER_OPTIONS"))...)} {
		if out, err := exec.Command(pg, argv...).CombinedOutput(); err != nil {
			t.Fatal(err, string(out))
		}
	}
	select {
	case <-lease.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("not told within the ttl")
	}
	if reason := <-reasons; !strings.Contains(reason, "connection") {
		t.Fatal(reason)
	}
	if released, err := lease.Release(ctx); released || err != nil {
		t.Fatal(released, err)
	}
	var successor *fencedlock.Lease
	for deadline := time.Now().Add(6 * time.Second); successor == nil && time.Now().Before(deadline); {
		if successor, err = fencedlock.TryAcquireLease(ctx, dsn, 7702, id, 5*time.Second); successor == nil {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if successor == nil || successor.Token <= lease.Token {
		t.Fatal("no successor with a larger token", err)
	}
	if released, err := successor.Release(ctx); !released || err != nil {
		t.Fatal(released, err)
	}
	if !errors.Is(lease.Check(), fencedlock.ErrLeaseLost) {
		t.Fatal("the old lease stays lost")
	}
}
