// The driver suite's patterns, run by Go's pgx v4, which describes each statement on the
// server and encodes parameters to the types it reports, directly and through PgBouncer in
// transaction mode; and the mixed workload through PgBouncer (run.sh says what it checks).
//
//	patterns ROUTE               (ROUTE: direct | pooled)
//	patterns mixed SETTINGS N    (SETTINGS: documented | defaults; N: the process)
//
// Behind the pooler the README's setting is statement_cache_mode=describe: pgx's default
// prepares statements on the server under names (lrupsc_*) another client can reach.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

var (
	ctx        = context.Background()
	route      = os.Args[1]
	pooled     = route != "direct"
	documented = route == "pooled" || (route == "mixed" && os.Args[2] == "documented")
	base       = map[bool]int32{false: 1400, true: 1500}[route == "pooled"]
)

func connect() *pgx.Conn {
	variable := func(direct, pooledName string) string {
		if pooled {
			return os.Getenv(pooledName)
		}
		return os.Getenv(direct)
	}
	url := fmt.Sprintf("host=%s port=%s dbname=%s user=postgres",
		variable("DRIVERS_HOST", "DRIVERS_POOLED_HOST"),
		variable("DRIVERS_PORT", "DRIVERS_POOLED_PORT"), os.Getenv("DRIVERS_DATABASE"))
	if documented {
		url += " statement_cache_mode=describe"
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		fmt.Println("pgx: cannot connect:", err)
		os.Exit(1)
	}
	return conn
}

// one returns the first column of the first row (int64, bool, time.Time, nil, ...).
func one(conn *pgx.Conn, sql string, params ...interface{}) (interface{}, error) {
	rows, err := conn.Query(ctx, sql, params...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var value interface{}
	if rows.Next() {
		values, err := rows.Values()
		if err != nil {
			return nil, err
		}
		if len(values) > 0 {
			value = values[0]
		}
	}
	return value, rows.Err()
}

func must(conn *pgx.Conn, sql string, params ...interface{}) interface{} {
	value, err := one(conn, sql, params...)
	if err != nil {
		panic(err)
	}
	return value
}

func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func sqlstateOf(conn *pgx.Conn, sql string, params ...interface{}) string {
	_, err := one(conn, sql, params...)
	return sqlstate(err)
}

func check(condition bool, format string, args ...interface{}) {
	if !condition {
		panic(fmt.Errorf(format, args...))
	}
}

func positive(value interface{}) bool {
	token, ok := value.(int64)
	return ok && token > 0
}

type pattern struct {
	name string
	run  func(a, b *pgx.Conn)
}

var patterns = []pattern{
	{"guarded_write", func(a, b *pgx.Conn) {
		changes, _ := json.Marshal(map[string]string{"v": "pgx " + route})
		// Untyped, fenced_update's id is text: a Go int cannot be sent there, its string can.
		id := strconv.Itoa(int(base + 1))
		must(a, "BEGIN")
		token := must(a, "SELECT acquire_fenced($1, $2)", 4201, base+1)
		written := must(a, "SELECT fenced_update_or_false($1, $2, $3, $4)", "driver_rows", id, token, string(changes))
		must(a, "COMMIT")
		check(positive(token), "token %#v is not a positive int64", token)
		check(written == true, "fenced_update returned %#v", written)
		stale := must(a, "SELECT fenced_update_or_false($1, $2, $3, $4)", "driver_rows", id, token.(int64)-1, string(changes))
		check(stale == false, "a lower token wrote: %#v", stale)
		state := sqlstateOf(a, "SELECT fenced_update($1, $2, $3, $4)", "driver_rows", id,
			token.(int64)-1, string(changes))
		check(state == "SF001", "fenced_update_strict with a lower token: SQLSTATE %s", state)
	}},
	{"skip_if_busy", func(a, b *pgx.Conn) {
		must(a, "BEGIN")
		must(a, "SELECT acquire_fenced($1, $2)", 4201, base+2)
		must(b, "BEGIN")
		busy := must(b, "SELECT try_acquire_fenced($1, $2)", 4201, base+2)
		must(b, "ROLLBACK")
		must(a, "ROLLBACK")
		check(busy == nil, "try_acquire_fenced on a held key returned %#v", busy)
	}},
	{"bounded_wait", func(a, b *pgx.Conn) {
		must(a, "BEGIN")
		must(a, "SELECT acquire_fenced($1, $2)", 4201, base+2)
		must(b, "BEGIN")
		state := sqlstateOf(b, "SELECT acquire_fenced($1, $2, $3)", 4201, base+2, 100*time.Millisecond)
		must(b, "ROLLBACK")
		must(a, "ROLLBACK")
		check(state == "55P03", "SQLSTATE %s", state)
	}},
	{"stale_write", func(a, b *pgx.Conn) {
		must(a, "BEGIN")
		older := must(a, "SELECT acquire_fenced($1, $2)", 4201, base+3)
		newer := must(a, "SELECT acquire_fenced($1, $2)", 4201, base+4)
		must(a, "COMMIT")
		resource := "drivers/pgx/" + route
		must(a, "SELECT fence_check($1, $2)", resource, newer)
		state := sqlstateOf(a, "SELECT fence_check($1, $2)", resource, older)
		check(state == "SF001", "SQLSTATE %s", state)
	}},
	{"named_and_bigint", func(a, b *pgx.Conn) {
		big := int64(5_000_000_000) + int64(base)
		must(a, "BEGIN")
		named := must(a, "SELECT acquire_fenced_named($1, $2)", "drivers", fmt.Sprintf("order:%d", base))
		byBigint := must(a, "SELECT acquire_fenced_named($1, $2::bigint::text)", "drivers", big)
		byText := must(a, "SELECT acquire_fenced_named($1, $2)", "drivers", strconv.FormatInt(big, 10))
		must(a, "COMMIT")
		check(byBigint == byText, "a bigint key and its text are different locks")
		check(named != byBigint, "two keys shared a grant")
	}},
	{"autocommit", func(a, b *pgx.Conn) {
		state := sqlstateOf(a, "SELECT acquire_fenced($1, $2)", 4201, base+5)
		check(state == "25P01", "SQLSTATE %s", state)
	}},
	{"lease", func(a, b *pgx.Conn) {
		key, ttl := base+7, 30*time.Second
		token := must(a, "SELECT try_acquire_lease($1, $2, $3, $4)", 4203, key, "a", ttl)
		busy := must(b, "SELECT try_acquire_lease($1, $2, $3, $4)", 4203, key, "b", ttl)
		expiry := must(a, "SELECT renew_lease($1, $2, $3, $4)", 4203, key, token, ttl)
		released := must(a, "SELECT release_lease($1, $2, $3)", 4203, key, token)
		taken := must(b, "SELECT try_acquire_lease($1, $2, $3, $4)", 4203, key, "b", ttl)
		must(b, "SELECT release_lease($1, $2, $3)", 4203, key, taken)
		check(positive(token), "token %#v", token)
		check(busy == nil, "another owner got %#v", busy)
		_, isTime := expiry.(time.Time)
		check(isTime, "renew returned %#v", expiry)
		check(released == true && taken.(int64) > token.(int64), "released %#v, next token %#v", released, taken)
	}},
	{"leader_owner", func(a, b *pgx.Conn) {
		key := base + 9
		term := must(a, "SELECT try_acquire_fenced_session($1, $2, $3)", 4203, key, "client-a")
		other := must(b, "SELECT try_acquire_fenced_session($1, $2, $3)", 4203, key, "client-b")
		check(positive(term), "term %#v", term)
		check(other == nil, "a second owner became leader with term %#v", other)
		if !pooled {
			released := must(a, "SELECT release_fenced($1, $2, $3)", 4203, key, "client-a")
			check(released == true, "released %#v", released)
		}
	}},
	{"permits", func(a, b *pgx.Conn) {
		// One permit: a slot and a token as a row; the other client's try gets no row (count
		// 0), never a NULL row; after the holder's commit, a larger token.
		key := base + 13
		must(a, "BEGIN")
		slot := must(a, "SELECT slot FROM acquire_permit($1, $2, $3)", 4206, key, 1)
		token := must(a, "SELECT token FROM acquire_permit($1, $2, $3)", 4206, key, 1)
		must(b, "BEGIN")
		none := must(b, "SELECT count(*) FROM try_acquire_permit($1, $2, $3)", 4206, key, 1)
		must(b, "ROLLBACK")
		must(a, "COMMIT")
		must(b, "BEGIN")
		later := must(b, "SELECT token FROM try_acquire_permit($1, $2, $3)", 4206, key, 1)
		must(b, "COMMIT")
		check(slot == int32(1) && positive(token), "slot %#v, token %#v", slot, token)
		check(none == int64(0), "a second holder of one permit: %#v rows", none)
		check(positive(later) && later.(int64) > token.(int64), "next token %#v", later)
	}},
	{"lease_permit", func(a, b *pgx.Conn) {
		// A permit as a lease: every call commits on its own, so it works through the pooler.
		key, ttl := base+14, 30*time.Second
		token := must(a, "SELECT token FROM try_acquire_lease_permit($1, $2, $3, $4, $5)", 4206, key, 1, "a", ttl)
		none := must(b, "SELECT count(*) FROM try_acquire_lease_permit($1, $2, $3, $4, $5)", 4206, key, 1, "b", ttl)
		expiry := must(a, "SELECT renew_lease($1, $2, $3, $4)", 4206, key, token, ttl)
		released := must(a, "SELECT release_lease($1, $2, $3)", 4206, key, token)
		taken := must(b, "SELECT token FROM acquire_lease_permit($1, $2, $3, $4, $5, $6)", 4206, key, 1, "b",
			ttl, 5*time.Second)
		must(b, "SELECT release_lease($1, $2, $3)", 4206, key, taken)
		check(positive(token), "token %#v", token)
		check(none == int64(0), "another owner got a permit: %#v rows", none)
		_, isTime := expiry.(time.Time)
		check(isTime, "renew returned %#v", expiry)
		check(released == true && positive(taken) && taken.(int64) > token.(int64),
			"released %#v, next token %#v", released, taken)
	}},
	{"shared_lock", func(a, b *pgx.Conn) {
		// Two readers at once, each with its own token; a writer's try is busy (NULL) meanwhile.
		key := base + 15
		must(a, "BEGIN")
		must(b, "BEGIN")
		first := must(a, "SELECT acquire_fenced($1, $2, shared => true)", 4206, key)
		second := must(b, "SELECT try_acquire_fenced($1, $2, shared => true)", 4206, key)
		must(b, "ROLLBACK")
		must(b, "BEGIN")
		busy := must(b, "SELECT try_acquire_fenced($1, $2)", 4206, key)
		must(b, "ROLLBACK")
		must(a, "COMMIT")
		check(positive(first) && positive(second) && second.(int64) > first.(int64),
			"readers' tokens %#v, %#v", first, second)
		check(busy == nil, "a writer got %#v beside a reader", busy)
	}},
	{"session_lease", func(a, b *pgx.Conn) {
		token := must(a, "SELECT acquire_fenced_session($1, $2)", 4201, base+6)
		held := must(a, "SELECT current_fence($1, $2)", 4201, base+6)
		released := must(a, "SELECT release_fenced($1, $2)", 4201, base+6)
		check(held == token && released == true, "held %#v, released %#v", held, released)
	}},
}

const held = "SELECT token FROM fenced_locks WHERE ns = $1 AND id = $2 AND pid = pg_backend_pid()"

// mixedTransaction runs one transaction of the mixed workload and returns what was wrong
// with its answers ("" if nothing), or the first error.
func mixedTransaction(conn *pgx.Conn, kind string, key, row int32) (problem string, err error) {
	defer func() {
		if caught := recover(); caught != nil {
			err = caught.(error)
		}
	}()
	must(conn, "BEGIN")
	switch kind {
	case "acquire", "try":
		function := map[string]string{"acquire": "acquire_fenced", "try": "try_acquire_fenced"}[kind]
		token := must(conn, "SELECT "+function+"($1, $2)", 4205, key)
		lock := must(conn, held, 4205, key)
		if !positive(token) || lock != token {
			problem = fmt.Sprintf("%s gave %#v, fenced_locks shows %#v", function, token, lock)
		}
	case "current":
		if fence := must(conn, "SELECT current_fence($1, $2)", 4205, key); fence != nil {
			problem = fmt.Sprintf("current_fence of a free key gave %#v", fence)
		}
	case "leader":
		owner := fmt.Sprintf("owner-%d", key)
		term := must(conn, "SELECT try_acquire_fenced_session($1, $2, $3)", 4205, key, owner)
		released := must(conn, "SELECT release_fenced($1, $2, $3)", 4205, key, owner)
		if !positive(term) || released != true {
			problem = fmt.Sprintf("try_acquire_fenced_session gave %#v, release_fenced %#v", term, released)
		}
	default:
		token := must(conn, "SELECT acquire_fenced($1, $2)", 4205, key)
		written := must(conn, "SELECT fenced_update_or_false($1, $2, $3, $4)", "driver_rows",
			strconv.Itoa(int(row)), token, fmt.Sprintf(`{"v": "%d"}`, key))
		if written != true {
			problem = fmt.Sprintf("fenced_update with token %#v gave %#v", token, written)
		}
	}
	must(conn, "COMMIT")
	return problem, nil
}

func runMixed(settings string, process int32) bool {
	slot, _ := strconv.Atoi(os.Getenv("MIXED_SLOT"))
	conns := make([]*pgx.Conn, 6)
	for i := range conns {
		conns[i] = connect()
	}
	picks := rand.New(rand.NewSource(int64(process)))
	kinds := []string{"acquire", "try", "current", "leader", "update"}
	wrong, failures, first := 0, 0, ""
	for i := int32(0); i < 150; i++ {
		conn := conns[picks.Intn(len(conns))]
		kind := kinds[picks.Intn(len(kinds))]
		key := int32(slot)*10000 + process*1000 + i
		problem, err := mixedTransaction(conn, kind, key, int32(slot)*20+process*10+i%10+3001)
		if err != nil {
			failures++
			problem = fmt.Sprintf("SQLSTATE %s: %s", sqlstate(err), strings.SplitN(err.Error(), "\n", 2)[0])
			one(conn, "ROLLBACK") //nolint:errcheck // nothing to roll back is fine
		} else if problem != "" {
			wrong++
		}
		if problem != "" && first == "" {
			first = kind + ": " + problem
		}
	}
	for _, conn := range conns {
		conn.Close(ctx)
	}
	line := fmt.Sprintf("pgx mixed %s p%d: 150 transactions, %d wrong, %d errors", settings, process, wrong, failures)
	if first != "" {
		line += "; first: " + first
	}
	fmt.Println(line)
	return wrong == 0 && failures == 0
}

func runPatterns() bool {
	a, b := connect(), connect()
	failed := 0
	for _, p := range patterns {
		// Session-scoped locks belong to one server connection: not through a transaction pooler.
		if pooled && p.name == "session_lease" {
			continue
		}
		func() {
			defer func() {
				if caught := recover(); caught != nil {
					failed++
					fmt.Printf("pgx %s %s: FAILED: %v\n", route, p.name, caught)
					one(a, "ROLLBACK") //nolint:errcheck // nothing to roll back is fine
					one(b, "ROLLBACK") //nolint:errcheck
				}
			}()
			p.run(a, b)
			fmt.Printf("pgx %s %s: ok\n", route, p.name)
		}()
	}
	a.Close(ctx)
	b.Close(ctx)
	return failed == 0
}

func main() {
	ok := false
	if route == "mixed" {
		process, _ := strconv.Atoi(os.Args[3])
		ok = runMixed(os.Args[2], int32(process))
	} else {
		ok = runPatterns()
	}
	if !ok {
		os.Exit(1)
	}
}
