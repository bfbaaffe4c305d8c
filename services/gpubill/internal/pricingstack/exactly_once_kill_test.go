package pricingstack_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	meteringv1 "github.com/gpubill/gpubill/proto/gen/gpubill/metering/v1"
	"github.com/gpubill/gpubill/services/pricing"
)

// The helper pricing process (TestHelperPricingProcess) reads its wiring
// from these variables; without helperPointEnv the helper test skips.
const (
	helperPointEnv = "GPUBILL_PRICING_HELPER_FAIL_POINT" // where the helper blocks until killed
	helperDSNEnv   = "GPUBILL_PRICING_HELPER_DSN"
	helperNATSEnv  = "GPUBILL_PRICING_HELPER_NATS"
	helperMarker   = "pricing-helper blocked at"
	// ratingDurable is the rating consumer's durable name (ports.ratingDurable).
	ratingDurable = "pricing-rating"
)

// killAckWait is the rating consumer's AckWait in the kill test (parent and
// helper alike): a batch delivered to a killed process comes back after it.
const killAckWait = 2 * time.Second

// The kill test: the pricing consumer runs in a child process and
// is SIGKILLed mid-batch, first with the rating transaction's work done but
// not committed, then with it committed but not acknowledged; a fresh
// consumer takes over after each kill, and every event is charged exactly
// once, with billed == round(exact) per lease in the database and on the wire.
func TestExactlyOnceKilledPricingProcess(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.parties(t, 3, 2, "CNY")
	s.card(t, "CNY", "0.01")
	run(t, s.metering)
	leases, mixed := onceUsage()
	half := len(mixed) / 2
	ctx := context.Background()

	// Round 1: killed inside the rating transaction.
	s.ingestRelayed(t, mixed[:half], half, 0)
	s.killPricingAt(t, "before-commit")
	if n := s.ratedEvents(t); n != 0 {
		t.Fatalf("%d events rated by a transaction that never committed", n)
	}
	if n := s.ackPending(t); n == 0 {
		t.Fatal("no usage message delivered to the killed process is awaiting redelivery; the kill proves nothing")
	}
	s.pricing.SetAckWait(killAckWait)
	stop := run(t, s.pricing)
	testkit.Eventually(t, 15*time.Second, func() bool { return s.ratedEvents(t) == half }, "first half rated after the kill")
	stop()

	// Round 2: the second half and the first half again; killed after the
	// commit, before the acknowledgement.
	s.ingestRelayed(t, mixed, len(mixed)-half, half)
	s.killPricingAt(t, "after-commit")
	if n := s.ratedEvents(t); n <= half {
		t.Fatalf("%d events rated when the process was killed after its commit, want more than %d", n, half)
	}
	if n := s.ackPending(t); n == 0 {
		t.Fatal("no committed usage message is awaiting redelivery; the kill proves nothing")
	}
	p2, err := pricing.New(ctx, s.deps)
	if err != nil {
		t.Fatal(err)
	}
	p2.SetAckWait(killAckWait)
	run(t, p2)
	// The committed batch comes back after killAckWait; it must change nothing.
	testkit.Eventually(t, 15*time.Second, func() bool { return s.ackPending(t) == 0 }, "redelivered usage acknowledged")
	s.checkChargedOnce(t, leases, len(mixed))
}

// ingestRelayed ingests events and waits until metering has relayed them to
// JetStream, so the next pricing process fetches them in one go.
func (s *stack) ingestRelayed(t *testing.T, evs []*meteringv1.UsageEventInput, wantAccepted, wantDups int) {
	t.Helper()
	if acc, dups := s.ingest(t, evs, 20); acc != wantAccepted || dups != wantDups {
		t.Fatalf("ingest: accepted %d duplicates %d, want %d and %d", acc, dups, wantAccepted, wantDups)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		var n int
		if err := s.deps.Pool.QueryRow(context.Background(), `select count(*) from metering.outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}, "metering outbox relayed")
}

// ackPending is how many usage messages the rating consumer has delivered
// and not had acknowledged.
func (s *stack) ackPending(t *testing.T) int {
	t.Helper()
	cons, err := s.js.JS.Consumer(context.Background(), natsx.StreamUsage, ratingDurable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.NumAckPending
}

// killPricingAt starts the helper pricing process on the stack's database
// and JetStream server, waits until it reports being blocked at the fail
// point, and SIGKILLs it.
func (s *stack) killPricingAt(t *testing.T, point string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPricingProcess$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), helperPointEnv+"="+point, helperDSNEnv+"="+s.dsn, helperNATSEnv+"="+s.js.URL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	blocked, drained := make(chan string, 1), make(chan struct{})
	var out strings.Builder
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			out.WriteString(line + "\n")
			if strings.HasPrefix(line, helperMarker) {
				blocked <- line
			}
		}
	}()
	kill := func() {
		_ = cmd.Process.Signal(syscall.SIGKILL) // no drain, no deferred rollback
		<-drained                               // Wait closes stdout: read it to the end first
		_ = cmd.Wait()
	}
	select {
	case line := <-blocked:
		if line != helperMarker+" "+point {
			kill()
			t.Fatalf("helper reported %q, want %q", line, helperMarker+" "+point)
		}
	case <-time.After(20 * time.Second):
		kill()
		t.Fatalf("helper process never blocked at %s\nstdout:\n%s\nstderr:\n%s", point, out.String(), stderr.String())
	}
	kill()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("helper process ended with %s, not SIGKILL\nstderr:\n%s", cmd.ProcessState, stderr.String())
	}
	t.Logf("helper pricing process killed at %s, %s after it started", point, time.Since(began).Round(time.Millisecond))
}

// TestHelperPricingProcess is the pricing process TestExactlyOnceKilledPricingProcess
// starts and kills: pricing (rating consumer, outbox relay, pending retrier)
// on the parent test's database and JetStream server, whose rating
// transaction prints a marker line and blocks at the named fail point until
// the process is killed. Without helperPointEnv it skips.
func TestHelperPricingProcess(t *testing.T) {
	point := os.Getenv(helperPointEnv)
	if point == "" {
		t.Skip("helper process for TestExactlyOnceKilledPricingProcess")
	}
	ctx := context.Background()
	pool, err := pg.Open(ctx, os.Getenv(helperDSNEnv), 4)
	if err != nil {
		t.Fatal(err)
	}
	nc, js, err := natsx.Connect(os.Getenv(helperNATSEnv), "pricing-helper")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	d := svc.Deps{Pool: pool, JS: js, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Clock: clock.NewManual(now), Calendar: cycles.Default()}
	p, err := pricing.New(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	p.SetAckWait(killAckWait)
	p.SetFailPoint(func(at string) error {
		if at == point {
			fmt.Println(helperMarker, at)
			select {} // until SIGKILL
		}
		return nil
	})
	t.Fatalf("pricing stopped before the kill (Run returned %v)", p.Run(ctx))
}
