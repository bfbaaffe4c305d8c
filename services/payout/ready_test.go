package payout

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/gpubill/gpubill/pkg/svc"
)

// Run alone, payout is not ready while its Temporal frontend does not
// answer (every payout's workflow starts there).
func TestNotReadyWithoutTemporal(t *testing.T) {
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	var s svc.Service = &Service{tc: tc}
	rc, ok := s.(svc.ReadyChecker)
	if !ok {
		t.Fatal("payout has no readiness checks of its own")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cs := rc.ReadyChecks()
	if len(cs) != 1 || cs[0].Name != "temporal" || cs[0].Check(ctx) == nil {
		t.Fatalf("checks %+v: want temporal, failing", cs)
	}
}
