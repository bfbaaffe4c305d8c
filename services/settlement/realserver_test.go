package settlement

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// dialTemporal connects to a dev server, waiting until its namespace answers
// (the frontend accepts TCP before the namespace is ready).
func dialTemporal(t testing.TB, addr string) client.Client {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		tc, err := client.Dial(client.Options{HostPort: addr, Logger: TemporalLogger(discardLog()), ConnectionOptions: client.ConnectionOptions{GrpcCompression: &client.GrpcCompressionNone{}}})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
			cancel()
			if err == nil {
				t.Cleanup(tc.Close)
				return tc
			}
			tc.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("temporal at %s not ready: %v", addr, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// runWorker runs the service (worker, relay) until the returned stop is called.
func runWorker(t testing.TB, s *Service) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}
