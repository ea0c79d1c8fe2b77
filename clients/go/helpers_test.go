package fencedlock_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
)

// The test server and PgBouncer that clients/run.sh started.
var (
	direct = os.Getenv("CLIENTS_DSN")
	pooled = os.Getenv("CLIENTS_POOLED_DSN")
	routes = []struct{ name, dsn string }{{"direct", direct}, {"pooled", pooled}}
	ctx    = context.Background()
)

// Keys no other test uses: fresh ids in namespace 7702 (Python has 7700, Node.js 7701).
const ns = 7702

var nextID = int32(1 + (os.Getpid()%1000)*1000)

func newID() int32 { return atomic.AddInt32(&nextID, 1) }

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	return conn
}

// exec runs sql on a direct connection of its own, with the simple protocol (nothing prepared).
func queryRow(t *testing.T, dest []interface{}, sql string, args ...interface{}) {
	t.Helper()
	conn := connect(t, direct)
	if err := conn.QueryRow(ctx, sql, append([]interface{}{pgx.QuerySimpleProtocol(true)}, args...)...).Scan(dest...); err != nil {
		t.Fatal(err)
	}
}

// docID is a row of documents no other test writes, with no fence yet.
func docID(t *testing.T) int32 {
	row := newID()%1000 + 1
	var n int64
	queryRow(t, []interface{}{&n}, "WITH u AS (UPDATE documents SET fence = NULL, body = NULL WHERE id = $1 RETURNING 1) SELECT count(*) FROM u", row)
	return row
}

func body(t *testing.T, row int32) *string {
	var text *string
	queryRow(t, []interface{}{&text}, "SELECT body FROM documents WHERE id = $1", row)
	return text
}

type leaseRow struct {
	token int64
	owner string
	live  bool
}

// leaseOf is the lease's row in fenced_leases, or nil.
func leaseOf(t *testing.T, id int32) *leaseRow {
	var n int64
	var row leaseRow
	queryRow(t, []interface{}{&n, &row.token, &row.owner, &row.live},
		"SELECT count(*), coalesce(max(token), 0), coalesce(max(owner), ''), coalesce(bool_or(expires_at > now()), false) "+
			"FROM fenced_leases WHERE ns = $1 AND id = $2 AND slot = 0", ns, id)
	if n == 0 {
		return nil
	}
	return &row
}

func waitUntil(timeout time.Duration, predicate func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if predicate() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return predicate()
}

func doneWithin(done <-chan struct{}, d time.Duration) bool {
	// Closed already: done, whatever d (a select with both ready picks either).
	select {
	case <-done:
		return true
	default:
	}
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// proxy is scripts/tcp_proxy.py on 127.0.0.1 in front of the test server's socket: cut resets
// its connections, blackhole lets no byte pass, restore lets traffic flow again.
type proxy struct {
	cmd *exec.Cmd
	dsn string
}

// A port below the ephemeral range (32768-60999), from a point that depends on this process.
func freePort(t *testing.T) int {
	for port, tries := 21000+(os.Getpid()*7)%11000, 0; tries < 11000; tries++ {
		if port++; port >= 32000 {
			port = 21000
		}
		if probe, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			probe.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

func startProxy(t *testing.T) *proxy {
	port := freePort(t)
	host := strings.TrimPrefix(strings.Fields(direct)[0], "host=")
	cmd := exec.Command("python3", filepath.Join(os.Getenv("CLIENTS_SCRIPTS"), "tcp_proxy.py"),
		fmt.Sprint(port), filepath.Join(host, ".s.PGSQL.5432"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	up := waitUntil(10*time.Second, func() bool {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	if !up {
		t.Fatal("the proxy did not start")
	}
	return &proxy{cmd: cmd, dsn: strings.Replace(direct, "host="+host, fmt.Sprintf("host=127.0.0.1 port=%d", port), 1)}
}
