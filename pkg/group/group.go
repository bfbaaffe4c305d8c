// Package group runs concurrent callers' work in groups (group commit)
// without a background goroutine: the first caller to find no one running
// becomes the runner and runs groups of whatever is queued until its own
// work has run, then hands what is left to a goroutine of its own, so its
// caller is not held by later arrivals (or, with Detach, starts that
// goroutine at once, so no caller is held by a group at all). The ledger's
// API writes (detached) and the audit recorder's records are committed
// this way; through pkg/pg.Batches,
// settlement's and the tax service's per-provider statements, which linger
// for a group.
package group

import (
	"context"
	"sync"
	"time"
)

// Queue groups the items added to it. Max, Linger and Run are set before
// the first Add.
type Queue[T any] struct {
	Max int // most items in one group (below 1: one)
	// Linger is how long the oldest item waits for its group to fill to
	// Max before the group runs anyway; 0 runs whatever is queued at once.
	// Items that queued while a group ran have waited already: a group
	// runs at once when its oldest item has waited Linger.
	Linger time.Duration
	Run    func(ctx context.Context, g []T) // runs a group; its items are answered when it returns
	// Detach runs the groups on a goroutine of the queue's own, never on a
	// caller's: Add returns at once, so every caller (the first one too,
	// which would otherwise run groups until its own has run) can stop
	// waiting when its context ends. The ledger's API writes: a group the
	// database holds must not hold its leader past the leader's deadline.
	Detach bool

	mu      sync.Mutex
	queue   []entry[T]
	running bool
	full    chan struct{} // closed by Add when the queue fills to Max while the runner lingers
}

type entry[T any] struct {
	v    T
	at   time.Time // when it was queued
	done chan struct{}
}

// Add queues v and returns a channel closed once the group holding v has
// run. The caller that finds no runner runs groups (with ctx, less its
// cancellation: a group holds other callers' work) before Add returns, or,
// with Detach, starts a goroutine that runs them.
func (q *Queue[T]) Add(ctx context.Context, v T) <-chan struct{} {
	e := entry[T]{v: v, at: time.Now(), done: make(chan struct{})}
	q.mu.Lock()
	q.queue = append(q.queue, e)
	if q.full != nil && len(q.queue) >= q.Max {
		close(q.full)
		q.full = nil
	}
	lead := !q.running
	q.running = true
	q.mu.Unlock()
	switch {
	case lead && q.Detach:
		go q.drain(context.WithoutCancel(ctx), nil)
	case lead:
		q.drain(context.WithoutCancel(ctx), e.done)
	}
	return e.done
}

// drain runs queued groups until mine has run, then hands the rest of the
// queue to a new runner; with mine nil, until the queue is empty.
func (q *Queue[T]) drain(ctx context.Context, mine chan struct{}) {
	for {
		if mine != nil {
			select {
			case <-mine:
				go q.drain(ctx, nil) // drains the queue, then releases the runner role
				return
			default:
			}
		}
		q.mu.Lock()
		q.linger()
		n := min(len(q.queue), max(q.Max, 1))
		batch := q.queue[:n:n]
		q.queue = q.queue[n:]
		if n == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		vs := make([]T, n)
		for i, e := range batch {
			vs[i] = e.v
		}
		q.Run(ctx, vs)
		for _, e := range batch {
			close(e.done)
		}
	}
}

// linger waits, with q.mu held on entry and on return, until the queue
// holds Max items or its oldest has waited Linger.
func (q *Queue[T]) linger() {
	if q.Linger <= 0 || len(q.queue) == 0 || len(q.queue) >= q.Max {
		return
	}
	wait := q.Linger - time.Since(q.queue[0].at)
	if wait <= 0 {
		return
	}
	full := make(chan struct{})
	q.full = full
	q.mu.Unlock()
	t := time.NewTimer(wait)
	select {
	case <-full:
	case <-t.C:
	}
	t.Stop()
	q.mu.Lock()
	q.full = nil
}

// Len is the number of items waiting for a group.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue)
}
