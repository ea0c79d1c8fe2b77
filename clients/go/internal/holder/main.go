// A lease holder in a process of its own, for the fault tests: `holder CONNSTRING NS ID TTL ROW`
// takes the lease and prints "token N"; then, as a careful holder does, checks the lease before
// each step of its work; once it finds the lease lost it prints "lost REASON" and tries its
// write anyway with its token (row ROW of documents), printing "refused OFFERED ACCEPTED" or
// "written".
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v4"

	fencedlock "github.com/fenced-lock/fenced_lock/clients/go"
)

func main() {
	ctx := context.Background()
	connString := os.Args[1]
	ns, _ := strconv.Atoi(os.Args[2])
	id, _ := strconv.Atoi(os.Args[3])
	ttl, _ := time.ParseDuration(os.Args[4])
	lease, err := fencedlock.AcquireLease(ctx, connString, int32(ns), int32(id), ttl)
	if err != nil {
		panic(err)
	}
	fmt.Println("token", lease.Token)
	for {
		if err = lease.Check(); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var lost *fencedlock.Error
	errors.As(err, &lost)
	fmt.Println("lost", lost.Reason)
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		panic(err)
	}
	err = fencedlock.FencedUpdate(ctx, conn, "documents", os.Args[5], lease.Token,
		map[string]interface{}{"body": "paused holder"})
	var stale *fencedlock.Error
	switch {
	case err == nil:
		fmt.Println("written")
	case errors.As(err, &stale) && errors.Is(err, fencedlock.ErrStaleToken):
		fmt.Println("refused", *stale.Offered, stale.Accepted)
	default:
		panic(err)
	}
	_ = conn.Close(ctx)
	_, _ = lease.Release(ctx)
}
