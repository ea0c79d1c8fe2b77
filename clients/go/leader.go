package fencedlock

import (
	"context"
	"errors"
	"time"
)

// LeaderCallbacks are client-go's: OnStartedLeading runs for each term won, with a context
// cancelled when the term ends (the lease lost, or the election's context done) and the term
// (the lease's token); it should return then. OnStoppedLeading runs after it has returned.
type LeaderCallbacks struct {
	OnStartedLeading func(ctx context.Context, term int64)
	OnStoppedLeading func()
}

// LeaderElectionConfig says what to campaign for and how.
type LeaderElectionConfig struct {
	ConnString string
	NS, ID     int32
	// TTL is the lease's (15 s by default); RetryPeriod how long each campaign waits on the
	// server for the lease (half the TTL by default), woken at the leader's release.
	TTL, RetryPeriod time.Duration
	// Owner is this candidate's id (NewOwner by default).
	Owner     string
	Options   []LeaseOption
	Callbacks LeaderCallbacks
}

// RunLeaderElection campaigns for (NS, ID) until ctx is done, leading each time it wins, and
// campaigns again after each term. It returns ctx's error, or the first error that is not a
// lost connection (those are retried after RetryPeriod).
func RunLeaderElection(ctx context.Context, config LeaderElectionConfig) error {
	if config.TTL == 0 {
		config.TTL = 15 * time.Second
	}
	if config.RetryPeriod == 0 {
		config.RetryPeriod = config.TTL / 2
	}
	if config.Owner == "" {
		config.Owner = NewOwner()
	}
	options := append([]LeaseOption{WithOwner(config.Owner), WithWait(config.RetryPeriod)},
		config.Options...)
	for ctx.Err() == nil {
		lease, err := TryAcquireLease(ctx, config.ConnString, config.NS, config.ID, config.TTL, options...)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrConnectionLost):
			select {
			case <-ctx.Done():
			case <-time.After(config.RetryPeriod):
			}
			continue
		case err != nil:
			return err
		case lease == nil:
			continue
		}
		lead(ctx, lease, config.Callbacks)
	}
	return ctx.Err()
}

func lead(ctx context.Context, lease *Lease, callbacks LeaderCallbacks) {
	term, endTerm := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		callbacks.OnStartedLeading(term, lease.Token)
	}()
	select {
	case <-done:
	case <-lease.Done():
	case <-ctx.Done():
	}
	endTerm()
	release, cancel := context.WithTimeout(context.Background(), lease.clock.ttl)
	_, _ = lease.Release(release) // a lease not released expires by itself
	cancel()
	<-done
	if callbacks.OnStoppedLeading != nil {
		callbacks.OnStoppedLeading()
	}
}
