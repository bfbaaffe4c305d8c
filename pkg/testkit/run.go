package testkit

import (
	"context"
	"errors"
	"sync"
	"testing"
)

// Run runs run in the background (a service's Run) until stop is called or
// the test ends; stop waits for it and may be called more than once. An
// error other than the end of its context fails t.
func Run(t testing.TB, name string, run func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
