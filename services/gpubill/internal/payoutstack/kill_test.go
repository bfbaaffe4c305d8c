package payoutstack_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/payout"
)

// The helper worker process (TestHelperPayoutWorker) reads its wiring from
// these variables; without helperEnv the helper test skips.
const (
	helperEnv         = "GPUBILL_PAYOUT_HELPER_WORKER"
	helperDSNEnv      = "GPUBILL_PAYOUT_HELPER_DSN"
	helperTemporalEnv = "GPUBILL_PAYOUT_HELPER_TEMPORAL"
	helperGRPCEnv     = "GPUBILL_PAYOUT_HELPER_GRPC"
	helperSecretEnv   = "GPUBILL_PAYOUT_HELPER_SECRET"
	helperQueueEnv    = "GPUBILL_PAYOUT_HELPER_QUEUE"
	helperDataDirEnv  = "GPUBILL_PAYOUT_HELPER_DATA_DIR" // its webhook key: the stack's
)

// TestHelperPayoutWorker is the worker process SIGKILLed by
// TestPayoutWorkerSIGKILLedAfterSubmission: the payout service (starter
// and worker) whose rail books a submission and then never answers.
func TestHelperPayoutWorker(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper process")
	}
	ctx := context.Background()
	pool, err := pg.Open(ctx, os.Getenv(helperDSNEnv), 4)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte(os.Getenv(helperSecretEnv))
	tok, err := auth.Issue(secret, auth.RoleService, "gpubill-internal", time.Hour) // the services' own identity, as deployed
	if err != nil {
		t.Fatal(err)
	}
	internal, err := grpc.NewClient(os.Getenv(helperGRPCEnv), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(auth.BearerCreds(tok)))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := client.DialContext(ctx, client.Options{HostPort: os.Getenv(helperTemporalEnv), Logger: payout.TemporalLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	d := svc.Deps{Pool: pool, Log: slog.New(slog.DiscardHandler), Clock: clock.System{}, Calendar: cycles.Default(), Internal: internal}
	s, err := payout.New(ctx, d, tc, os.Getenv(helperQueueEnv), payout.Config{Timing: testTiming, SandboxLatency: time.Second, SandboxReturnAfter: time.Second,
		DataDir: os.Getenv(helperDataDirEnv)})
	if err != nil {
		t.Fatal(err)
	}
	s.TestHooks().ReplaceRail(func(sandbox payout.Rail) payout.Rail {
		return &hangingRail{Rail: sandbox, submitted: make(chan string, 1)}
	})
	if err := s.Run(ctx); err != nil { // runs until SIGKILL
		t.Fatal(err)
	}
}

// A worker process SIGKILLed between the rail's acceptance and the
// confirmation: its attempt times out, the restarted service's worker
// queries the reference, finds the transfer, and the payout is paid with
// exactly one submission and exact ledger balances.
func TestPayoutWorkerSIGKILLedAfterSubmission(t *testing.T) {
	t.Parallel()
	st := newStack(t, payout.Config{})
	st.stopPayout() // this process does not work the queue until the helper is dead
	st.setup(t, "p-sigkill", "6222000011113331")
	// Money settled and the payout written as the consumer writes it.
	st.settleLedgerOnly(t, "p-sigkill", "cyc-20260101", "CNY", "900.00")
	id := ids.New("po")
	if err := st.s.TestHooks().CreateFromSettled(context.Background(), payout.Payout{ID: id, ProviderID: "p-sigkill", CycleID: "cyc-20260101",
		Currency: "CNY", Gross: decimal.RequireFromString("900.00"), Net: decimal.RequireFromString("900.00"), CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPayoutWorker$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperDSNEnv+"="+st.dsn, helperTemporalEnv+"="+temporalOnce.addr,
		helperGRPCEnv+"="+st.grpcAddr, helperSecretEnv+"="+string(st.secret), helperQueueEnv+"="+st.queue, helperDataDirEnv+"="+st.cfg.DataDir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	testkit.Eventually(t, waitLong, func() bool { return st.submissions(t, id) == 1 }, "the helper submitted %s", id)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	// The kill proved something: the rail has the transfer, payout does not know.
	p, err := st.s.TestHooks().GetPayout(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != "created" || p.RailRef != "" {
		t.Fatalf("killed too late: payout %s, reference %q", p.Status, p.RailRef)
	}
	st.startPayout() // the service restarted
	got := st.waitStatus(t, "p-sigkill", "cyc-20260101", "paid", waitLong)
	if got.PayoutId != id || got.RailReference != id {
		t.Errorf("paid %s under %q, want %s", got.PayoutId, got.RailReference, id)
	}
	if n := st.submissions(t, id); n != 1 {
		t.Errorf("submitted %d times", n)
	}
	st.checkProvider(t, "p-sigkill", "CNY", "0", "0")
	st.checkFunds(t, "CNY", decimal.RequireFromString("900.00"))
}
