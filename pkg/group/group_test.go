package group

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// What arrives while a group runs waits and runs next, at most Max at a
// time; each caller's channel closes only after the group holding its item
// has run; the first caller runs its own group and returns, later groups run
// without it.
func TestQueueGroupsWhatWaits(t *testing.T) {
	gate, gate2 := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	ran := map[int]bool{}
	var calls atomic.Int32
	q := &Queue[int]{Max: 4, Run: func(_ context.Context, g []int) {
		switch calls.Add(1) {
		case 1:
			<-gate
		case 2: // the second group waits until the first caller has its answer
			<-gate2
		}
		mu.Lock()
		defer mu.Unlock()
		sizes = append(sizes, len(g))
		for _, v := range g {
			ran[v] = true
		}
	}}
	ranBefore := func(v int) bool { mu.Lock(); defer mu.Unlock(); return ran[v] }

	leader := make(chan bool)
	go func() {
		done := q.Add(context.Background(), 0) // runs the first group itself
		select {
		case <-done:
			leader <- ranBefore(0)
		default:
			leader <- false
		}
	}()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	var answered atomic.Int32
	bad := make(chan int, 10)
	for v := 1; v <= 10; v++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-q.Add(context.Background(), v)
			answered.Add(1)
			if !ranBefore(v) {
				bad <- v
			}
		}()
	}
	for q.Len() != 10 {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	select {
	case ok := <-leader:
		if !ok {
			t.Fatal("the first caller's Add returned before its group ran, or without its answer")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first caller is held by the groups after its own")
	}
	time.Sleep(20 * time.Millisecond) // the second group is held at gate2: none of it may be answered
	if n := answered.Load(); n != 0 {
		t.Fatalf("%d items answered before their group ran", n)
	}
	close(gate2)
	wg.Wait()
	close(bad)
	for v := range bad {
		t.Fatalf("item %d answered before its group ran", v)
	}
	if !slices.Equal(sizes, []int{1, 4, 4, 2}) {
		t.Fatalf("groups of %v, want [1 4 4 2]", sizes)
	}
	for q.Len() != 0 {
		time.Sleep(time.Millisecond)
	}
}

// With Linger, what arrives within it runs as one group; a group that
// fills to Max runs without waiting out Linger; and items that queued while
// a group ran (their Linger spent) run at once after it.
func TestQueueLingersForAGroup(t *testing.T) {
	const linger = 300 * time.Millisecond
	var mu sync.Mutex
	var sizes []int
	gate := make(chan struct{})
	var running atomic.Int32
	var hold atomic.Bool
	q := &Queue[int]{Max: 4, Linger: linger, Run: func(_ context.Context, g []int) {
		mu.Lock()
		sizes = append(sizes, len(g))
		mu.Unlock()
		running.Add(1)
		if hold.CompareAndSwap(true, false) {
			<-gate // this group holds the runner while more queue
		}
	}}
	addAll := func(vs ...int) (took time.Duration) {
		start := time.Now()
		var wg sync.WaitGroup
		for _, v := range vs {
			wg.Add(1)
			go func() { defer wg.Done(); <-q.Add(context.Background(), v) }()
			time.Sleep(10 * time.Millisecond) // arrivals spread within the linger
		}
		wg.Wait()
		return time.Since(start)
	}
	// Three arrivals 10 ms apart: one group of three, after the linger.
	if took := addAll(1, 2, 3); took < linger {
		t.Fatalf("a group of three ran after %s, before its linger of %s", took, linger)
	}
	// Four: the group is full at the fourth, it runs without the linger.
	if took := addAll(4, 5, 6, 7); took >= linger {
		t.Fatalf("a full group waited %s, its linger", took)
	}
	// The third group (one item) holds the runner; two items queue behind
	// it for longer than the linger, then run as soon as it returns.
	hold.Store(true)
	eight := make(chan struct{})
	go func() { <-q.Add(context.Background(), 8); close(eight) }()
	for running.Load() != 3 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	for _, v := range []int{9, 10} {
		wg.Add(1)
		go func() { defer wg.Done(); <-q.Add(context.Background(), v) }()
	}
	for q.Len() != 2 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(linger + 50*time.Millisecond)
	released := time.Now()
	close(gate)
	<-eight
	wg.Wait()
	if took := time.Since(released); took >= linger {
		t.Fatalf("items that had waited out their linger behind a running group waited %s more", took)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(sizes, []int{3, 4, 1, 2}) {
		t.Fatalf("groups of %v, want [3 4 1 2]", sizes)
	}
}

// A Max below 1 is taken as one item a group (it hung: the runner took
// groups of none and left its own item queued).
func TestQueueWithoutAMaxRunsOneAtATime(t *testing.T) {
	var sizes []int
	q := &Queue[int]{Run: func(_ context.Context, g []int) { sizes = append(sizes, len(g)) }}
	done := make(chan struct{})
	go func() {
		<-q.Add(context.Background(), 1)
		<-q.Add(context.Background(), 2)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Add with Max 0 did not return")
	}
	if !slices.Equal(sizes, []int{1, 1}) {
		t.Fatalf("groups of %v, want [1 1]", sizes)
	}
}

// With Detach, the first caller's Add returns before its group has run (a
// goroutine of the queue's runs it), so a caller whose context ends stops
// waiting, the first one too; the items are still answered after their
// group ran, and the runner role is released once the queue is empty.
func TestQueueDetachedDoesNotHoldTheFirstCaller(t *testing.T) {
	gate := make(chan struct{})
	var ran atomic.Int32
	q := &Queue[int]{Max: 4, Detach: true, Run: func(_ context.Context, g []int) {
		<-gate
		ran.Add(int32(len(g)))
	}}
	added := make(chan (<-chan struct{}))
	go func() { added <- q.Add(context.Background(), 1) }()
	var done <-chan struct{}
	select {
	case done = <-added:
	case <-time.After(5 * time.Second):
		close(gate)
		t.Fatal("the first caller's Add is held by its group's run")
	}
	select {
	case <-done:
		t.Fatal("answered before its group ran")
	default:
	}
	close(gate)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the detached runner never answered")
	}
	if ran.Load() != 1 {
		t.Fatalf("%d items ran, want 1", ran.Load())
	}
	// The runner role was released: a later item runs too.
	select {
	case <-q.Add(context.Background(), 2):
	case <-time.After(5 * time.Second):
		t.Fatal("a later item never ran")
	}
}
