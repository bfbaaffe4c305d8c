package cli_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
	"github.com/gpubill/gpubill/services/gpubill/internal/stack"
)

// relaySchemas: every service's schema, each with its outbox relay.
var relaySchemas = []string{"metering", "pricing", "ledger", "tax", "payout", "settlement"}

// relayLocksHeld counts the outbox relay locks (pg_advisory_lock(hashtext(
// 'gpubill.outbox.<schema>'))) held in dsn's database, and the sessions
// holding them: each leading relay holds its own (a pooled connection), so
// six relays leading is six locks in six sessions, where a start-up check
// still holding them is one.
func relayLocksHeld(t *testing.T, dsn string) (locks, sessions int) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// A bigint key is classid (its high 32 bits) and objid (its low).
	if err := conn.QueryRow(context.Background(), `select count(*), count(distinct l.pid) from pg_locks l
		where l.locktype = 'advisory' and l.granted and l.objsubid = 1
		and l.database = (select oid from pg_database where datname = current_database())
		and (l.classid::bigint << 32 | l.objid::bigint) in (select hashtext('gpubill.outbox.' || s)::bigint from unnest($1::text[]) s)`,
		relaySchemas).Scan(&locks, &sessions); err != nil {
		t.Fatal(err)
	}
	return locks, sessions
}

// relaysLead: every schema's relay leads, each in its session.
func relaysLead(t *testing.T, dsn string) bool {
	locks, sessions := relayLocksHeld(t, dsn)
	return locks == len(relaySchemas) && sessions == len(relaySchemas)
}

// syncBuffer is a bytes.Buffer written by a running command and read by
// the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startDevStack(t *testing.T, dsn, temporal string) *stack.Stack {
	t.Helper()
	st, err := stack.Start(context.Background(), stack.Config{
		Common: config.Common{DatabaseURL: dsn, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(),
			AuthSecret: strings.Repeat("k", 32), TemporalAddress: temporal, CycleDays: 45, CycleAnchor: "2026-01-01", CycleGrace: 24 * time.Hour},
		NATSAddr: "127.0.0.1:0",
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	return st
}

// TestDevRefusesADatabaseAnotherStackRuns: a second gpubill dev on a
// database a stack runs on said "gpubill dev is up", and once the first
// stopped, its relays took over every outbox, publishing to its own
// embedded NATS and paying on its own rail. It now exits 1 while another
// session holds an outbox relay lock, naming the cause; a stack started
// once the first has stopped still leads every relay (its check lets the
// locks go before its relays try them).
func TestDevRefusesADatabaseAnotherStackRuns(t *testing.T) {
	dsn := testkit.NewDatabase(t)
	temporal := testkit.NewTemporal(t)
	first := startDevStack(t, dsn, temporal)
	testkit.Eventually(t, 30*time.Second, func() bool { return relaysLead(t, dsn) }, "the first stack's relays lead")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- cli.Main(ctx, []string{"dev", "--database-url", dsn, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
			"--data-dir", t.TempDir(), "--temporal-address", temporal, "--backup-every", "0"}, &out, &errOut)
	}()
	code := -1
	deadline := time.After(2 * time.Minute)
	for code == -1 {
		select {
		case code = <-exited:
		case <-deadline:
			t.Fatalf("the second gpubill dev neither refused nor came up in 2 min: %q %q", out.String(), errOut.String())
		case <-time.After(100 * time.Millisecond):
			if strings.Contains(out.String(), "gpubill dev is up") {
				cancel()
				code = <-exited
			}
		}
	}
	if code != 1 || !strings.Contains(errOut.String(), "another gpubill stack runs on this database") {
		t.Fatalf("a second gpubill dev on the database: exit %d, %q %q; want 1 and \"another gpubill stack runs on this database\"",
			code, out.String(), errOut.String())
	}
	if !relaysLead(t, dsn) {
		locks, sessions := relayLocksHeld(t, dsn)
		t.Fatalf("after the refusal: %d relay locks held in %d sessions; want the first stack's %d relays leading", locks, sessions, len(relaySchemas))
	}

	first.Stop()
	testkit.Eventually(t, 30*time.Second, func() bool { locks, _ := relayLocksHeld(t, dsn); return locks == 0 }, "the first stack's relays let go")
	startDevStack(t, dsn, temporal)
	testkit.Eventually(t, 30*time.Second, func() bool { return relaysLead(t, dsn) }, "the next stack's relays lead")
}

// TestDevBannerHidesNATSCredentials: the banner gpubill dev prints on
// stdout (a terminal, a CI log, a screen share) named NATS_URL whole, its
// user and password with it; it names the scheme, host and port.
func TestDevBannerHidesNATSCredentials(t *testing.T) {
	st := &stack.Stack{GRPCAddr: "127.0.0.1:9090", Temporal: "127.0.0.1:7233",
		NATSURL: "nats://gpubill:s3cr3t-pw@nats.internal:4222,nats://tok-abc@nats2.internal:4222"}
	var out bytes.Buffer
	if err := cli.PrintDevBanner(&out, st, "/data", "http://127.0.0.1:8080", "finance-token"); err != nil {
		t.Fatal(err)
	}
	banner := out.String()
	if !strings.Contains(banner, "nats.internal:4222") || !strings.Contains(banner, "nats2.internal:4222") {
		t.Fatalf("banner does not name the NATS servers:\n%s", banner)
	}
	for _, secret := range []string{"s3cr3t-pw", "tok-abc"} {
		if strings.Contains(banner, secret) {
			t.Errorf("banner shows NATS_URL's credential %q:\n%s", secret, banner)
		}
	}
}
