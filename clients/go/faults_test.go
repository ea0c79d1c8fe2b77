package fencedlock_test

// Faults on real processes: a holder paused past its ttl, its link cut or blackholed. Each ends
// with the holder told, and nothing taken again behind its back. (The server restart is in
// ./restart, run last.)

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	fencedlock "github.com/fenced-lock/fenced_lock/clients/go"
)

// output collects a process's standard output as it comes.
type output struct {
	mu   sync.Mutex
	text bytes.Buffer
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.text.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.text.String()
}

func TestPausedHolder(t *testing.T) {
	// SIGSTOP past the ttl: a successor takes the lease and writes; on resume the holder finds the
	// lease lost before any renewal (by its validity, on its monotonic clock), and its write with
	// the old token is refused.
	id, row := newID(), docID(t)
	out := &output{}
	holder := exec.Command(os.Getenv("CLIENTS_GO_HOLDER"), direct, fmt.Sprint(ns), fmt.Sprint(id), "2s", fmt.Sprint(row))
	holder.Stdout, holder.Stderr = out, os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	token := regexp.MustCompile(`(?m)^token (\d+)$`)
	if !waitUntil(10*time.Second, func() bool { return token.MatchString(out.String()) }) {
		t.Fatal(out.String())
	}
	_ = holder.Process.Signal(syscall.SIGSTOP)
	time.Sleep(2500 * time.Millisecond)
	successor := mustLease(t, direct, id, 10*time.Second)
	defer release(t, successor)
	conn := connect(t, direct)
	if err := fencedlock.FencedUpdate(ctx, conn, "documents", row, successor.Token, map[string]interface{}{"body": "successor"}); err != nil {
		t.Fatal(err)
	}
	_ = holder.Process.Signal(syscall.SIGCONT)
	if err := holder.Wait(); err != nil {
		t.Fatal(err, out.String())
	}
	lines := out.String()
	first := token.FindStringSubmatch(lines)[1]
	if !strings.Contains(lines, "\nlost "+fencedlock.LostDeadline+"\n") ||
		!strings.Contains(lines, fmt.Sprintf("\nrefused %s %d\n", first, successor.Token)) {
		t.Fatal(lines)
	}
	if text := body(t, row); text == nil || *text != "successor" {
		t.Fatal(text)
	}
}

func TestLinkFault(t *testing.T) {
	for _, fault := range []struct {
		name   string
		signal syscall.Signal
	}{{"cut", syscall.SIGUSR1}, {"blackhole", syscall.SIGHUP}} {
		fault := fault
		t.Run(fault.name, func(t *testing.T) {
			// The lease's connection reset (cut) or silent (blackhole: no byte passes either
			// way): the holder is told within the ttl, and the lease is not taken again with a
			// new token.
			id, ttl := newID(), 3*time.Second
			link := startProxy(t)
			reasons := make(chan string, 2)
			lease := mustLease(t, link.dsn, id, ttl, fencedlock.WithOnLost(func(r string) { reasons <- r }))
			time.Sleep(1200 * time.Millisecond) // one renewal through the proxy first
			if err := lease.Check(); err != nil {
				t.Fatal(err)
			}
			faultedAt := time.Now()
			_ = link.cmd.Process.Signal(fault.signal)
			if !doneWithin(lease.Done(), ttl) {
				t.Fatalf("not told within the ttl (%v)", ttl)
			}
			toldAfter := time.Since(faultedAt)
			reason := <-reasons
			if fault.name == "cut" && (!strings.Contains(reason, "connection") || toldAfter > ttl/3+time.Second) {
				t.Fatal(reason, toldAfter)
			}
			if fault.name == "blackhole" && reason != fencedlock.LostDeadline {
				t.Fatal(reason)
			}
			_ = link.cmd.Process.Signal(syscall.SIGUSR2)
			// The server still has the lease under its one token until it expires; nobody
			// renewed it under another.
			if row := leaseOf(t, id); row != nil && row.token != lease.Token {
				t.Fatalf("%+v", row)
			}
			if _, err := lease.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if !waitUntil(ttl+2*time.Second, func() bool {
				next, err := fencedlock.TryAcquireLease(ctx, direct, ns, id, time.Second)
				if next == nil || err != nil {
					return false
				}
				_, _ = next.Release(ctx)
				return next.Token > lease.Token
			}) {
				t.Fatal("no successor")
			}
		})
	}
}
