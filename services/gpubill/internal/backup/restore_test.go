package backup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/gpubill/internal/backup"
	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
	"github.com/gpubill/gpubill/services/gpubill/internal/stack"
)

const secret = "gpubill-backup-test-secret-0123456789"

// TestBackupRestoreIntoFreshCluster runs the stack, settles a cycle, backs
// the database up while the stack runs, restores it into a PostgreSQL
// cluster of its own (initdb'd by the test, so its transaction ids start
// far below the source's), and proves the restore: the same journal head
// hash, `gpubill ledger verify` passing on it, every balance row identical
// to the source's; then a stack started on the restored database (new
// NATS, new Temporal) bills and settles the next cycle and chains its new
// transactions after the restored head.
func TestBackupRestoreIntoFreshCluster(t *testing.T) {
	ctx := testkit.Context(t)
	now := time.Now().UTC()
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	cal := cycles.Calendar{Anchor: today.AddDate(0, 0, -10), LengthDays: 1, Grace: 24 * time.Hour}
	// Both clusters the test's own: the chain waits for every older
	// transaction on its server, and the source is made older than the
	// target (its transaction ids further on), as a busy production server
	// is older than the fresh one a backup is restored into.
	src := testkit.NewCluster(t) + "/gpubill?sslmode=disable"
	ageCluster(t, src, 20000)
	f := startStack(t, src, cal)

	f.mustDo(http.MethodPost, "/v1/providers", map[string]any{"provider_id": "p-001", "name": "Rig One", "tier": "standard",
		"tax_profile": "individual", "jurisdiction": "CN", "pue": "1.2", "currency": "CNY"})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-001", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/rate-cards", map[string]any{"currency": "CNY", "effective_from": "2026-01-01T00:00:00Z",
		"gpu_prices": []map[string]string{{"gpu_model": "RTX_4090", "hourly": "2.80"}}})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": "100.00", "currency": "CNY", "external_ref": "bank-ref-1"})
	// Cycle one: two days ago, 2 GPUs × 1.5 h × 2.80 = 8.40, settled before the backup.
	first := f.usage("evt-1", today.AddDate(0, 0, -2))
	cyc1 := cal.ForUsageEnd(first).ID
	f.waitBalance("provider:p-001:pending:"+cyc1, "CNY", "8.40")
	f.settle(cyc1)
	// gross 8.40 = commission 2.10 + tax 1.26 + net 5.04; the sweep takes 2.10 out of bank:client.
	f.waitBalance("provider:p-001:available", "CNY", "5.04")
	f.waitBalance("bank:client", "CNY", "97.90")
	f.waitChained()
	// p-001's payout (no KYC: waiting at the gate) exists and has its workflow.
	testkit.Eventually(t, 60*time.Second, func() bool {
		var n int
		q(t, src, `select count(*) from payout.payouts where workflow_started`, &n)
		return n == 1
	}, "p-001's payout workflow started")
	// A message in flight at the snapshot: metering published usage evt-3
	// (a day ago, 2 GPUs × 1.5 h = 8.40) and pricing has not applied it
	// yet. Only the outbox's kept copy (pkg/outbox) brings it to the
	// restored stack, whose JetStream store starts empty. (A stream
	// sequence no consumer has reached, so the source relay keeps it.)
	inflight := inflightUsage(t, "evt-3", today.AddDate(0, 0, -1).Add(4*time.Hour), cal)
	q(t, src, fmt.Sprintf(`insert into metering.outbox_published (seq, id, subject, payload, created_at, stream, stream_seq)
		values ((select coalesce(max(seq), 0) + 1000 from metering.outbox_published), 'ub-inflight', 'usage.recorded.p-001',
		decode('%x', 'hex'), now(), 'USAGE', 1099511627776) returning 1`, inflight), new(int))

	// The backup, taken while the stack runs.
	dir := filepath.Join(t.TempDir(), "snap")
	var out, errOut bytes.Buffer
	if code := cli.Main(ctx, []string{"backup", "-o", dir, "--database-url", src}, &out, &errOut); code != 0 {
		t.Fatalf("gpubill backup: exit %d, %s %s", code, out.String(), errOut.String())
	}
	m, err := backup.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	f.st.Stop()
	srcHead, srcBalances := headHash(t, src), balances(t, src)
	if !strings.Contains(out.String(), "journal head "+srcHead) {
		t.Fatalf("gpubill backup said %q; want the head %s", out.String(), srcHead)
	}
	if m.Ledger.HeadHash != srcHead || m.Ledger.Transactions == 0 {
		t.Fatalf("manifest head %s (%d transactions); the source's chain head is %s", m.Ledger.HeadHash, m.Ledger.Transactions, srcHead)
	}

	// Restore into a new cluster.
	dst := testkit.NewCluster(t) + "/gpubill_restored?sslmode=disable"
	res, err := backup.Restore(ctx, dst, dir, backup.Tools{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requeued["metering"] < 1 {
		t.Fatalf("requeued %v; want at least metering's message in flight", res.Requeued)
	}
	// p-001 has no KYC: its payout waits at the gate, a workflow the new
	// Temporal must get again.
	if res.PayoutsRestarted != 1 {
		t.Fatalf("%d payouts marked for a new workflow; want p-001's one waiting for KYC", res.PayoutsRestarted)
	}
	if res.XidsAdvanced == 0 {
		t.Fatalf("a fresh cluster's transaction ids needed no advance past the snapshot's %d: the test proves nothing about it", m.Ledger.XidMax)
	}
	if got := headHash(t, dst); got != srcHead {
		t.Fatalf("restored head hash %s, source %s", got, srcHead)
	}
	if got := balances(t, dst); got != srcBalances {
		t.Fatalf("restored balances differ from the source's:\nsource:\n%s\nrestored:\n%s", srcBalances, got)
	}
	out.Reset()
	if code := cli.Main(ctx, []string{"ledger", "verify", "--database-url", dst}, &out, &errOut); code != 0 ||
		!strings.Contains(out.String(), "head "+srcHead) || !strings.Contains(out.String(), ", 0 not chained yet") {
		t.Fatalf("gpubill ledger verify on the restored database: exit %d, %q %q; want 0 and head %s", code, out.String(), errOut.String(), srcHead)
	}

	// A second restore into the same (now non-empty) database is refused.
	if _, err := backup.Restore(ctx, dst, dir, backup.Tools{}); !errors.Is(err, backup.ErrNotEmpty) || !strings.Contains(err.Error(), "ledger") {
		t.Fatalf("restore into a non-empty database: %v; want ErrNotEmpty naming the schemas", err)
	}

	// The restored stack bills and settles the next cycle.
	g := startStack(t, dst, cal)
	g.waitBalance("bank:client", "CNY", "97.90")
	var payoutID string
	q(t, dst, `select payout_id from payout.payouts`, &payoutID)
	tc, err := client.Dial(client.Options{HostPort: g.st.Temporal})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	testkit.Eventually(t, 30*time.Second, func() bool {
		_, err := tc.DescribeWorkflowExecution(ctx, "payout-"+payoutID, "")
		return err == nil
	}, "payout %s's workflow started on the new Temporal", payoutID)
	second := g.usage("evt-2", today.AddDate(0, 0, -1))
	cyc2 := cal.ForUsageEnd(second).ID
	if cyc2 == cyc1 {
		t.Fatalf("usage a day later fell into the same cycle %s", cyc1)
	}
	// evt-2 and the in-flight evt-3: 2 × 8.40.
	g.waitBalance("provider:p-001:pending:"+cyc2, "CNY", "16.80")
	g.settle(cyc2)
	// gross 16.80 = commission 4.20 + tax 2.52 (20 % of 12.60) + net 10.08, on top of cycle one's.
	g.waitBalance("provider:p-001:available", "CNY", "15.12")
	g.waitBalance("tax:withheld:CN", "CNY", "3.78")
	g.waitBalance("bank:client", "CNY", "93.70")
	g.waitBalance("renter:r-001:wallet", "CNY", "74.80")
	g.waitChained()
	out.Reset()
	if code := cli.Main(ctx, []string{"ledger", "verify", "--database-url", dst}, &out, &errOut); code != 0 {
		t.Fatalf("ledger verify after the restored stack's settlement: exit %d, %q %q", code, out.String(), errOut.String())
	}
	var checked int64
	if _, err := fmt.Sscanf(out.String(), "ok: %d transactions chained", &checked); err != nil || checked <= m.Ledger.Transactions {
		t.Fatalf("ledger verify after new activity: %q; want more than the %d restored transactions chained", out.String(), m.Ledger.Transactions)
	}
}

// inflightUsage is a usage.recorded batch as metering publishes it: one
// event of 2 RTX_4090 × 1.5 h from start, for p-001 and r-001.
func inflightUsage(t *testing.T, id string, start time.Time, cal cycles.Calendar) []byte {
	end := start.Add(90 * time.Minute)
	b, err := proto.Marshal(&eventsv1.UsageRecordedBatch{BatchId: "ub-inflight", Events: []*eventsv1.UsageEvent{{
		Id: id, LeaseId: "lease-" + id, ProviderId: "p-001", RenterId: "r-001", GpuModel: "RTX_4090", GpuCount: 2,
		StartTime: timestamppb.New(start), EndTime: timestamppb.New(end), Currency: "CNY", ProviderTier: "standard",
		ProviderPue: "1.2", CycleId: cal.ForUsageEnd(end).ID, ReceivedAt: timestamppb.New(end),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRestoreRefusesADifferentSnapshot: a manifest that does not describe
// the dump (here its head hash altered) fails `gpubill restore` (exit 1),
// naming the difference; a backup into a used directory is refused.
func TestRestoreRefusesADifferentSnapshot(t *testing.T) {
	ctx := testkit.Context(t)
	base := testkit.NewCluster(t)
	src := base + "/gpubill?sslmode=disable"
	now := time.Now().UTC()
	f := startStack(t, src, cycles.Calendar{Anchor: now.AddDate(0, 0, -10).Truncate(24 * time.Hour), LengthDays: 1, Grace: 24 * time.Hour})
	f.mustDo(http.MethodPost, "/v1/renters", map[string]any{"renter_id": "r-001", "name": "Lab", "currency": "CNY", "credit_limit": "0"})
	f.mustDo(http.MethodPost, "/v1/deposits", map[string]any{"renter_id": "r-001", "amount": "100.00", "currency": "CNY", "external_ref": "bank-ref-1"})
	f.waitChained()
	dir := filepath.Join(t.TempDir(), "snap")
	m, err := backup.Take(ctx, src, dir, backup.Tools{}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.st.Stop()
	if _, err := backup.Take(ctx, src, dir, backup.Tools{}, time.Now()); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("a backup into a used directory: %v; want refused", err)
	}
	for i, alter := range []struct {
		field  func(*backup.Manifest)
		naming string
	}{
		{func(m *backup.Manifest) { m.Ledger.HeadHash = strings.Repeat("ab", 32) }, "journal head hash: manifest " + strings.Repeat("ab", 32)},
		// Lowered, the transaction id counter was advanced too little, and
		// nothing said so.
		{func(m *backup.Manifest) { m.Ledger.XidMax = 3 }, "largest transaction id (xid_max): manifest 3"},
	} {
		altered := *m
		alter.field(&altered)
		b, err := json.Marshal(altered)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, backup.ManifestFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		code := cli.Main(ctx, []string{"restore", dir, "--database-url", fmt.Sprintf("%s/gpubill_restored_%d?sslmode=disable", base, i)}, &out, &errOut)
		if code != 1 || !strings.Contains(errOut.String(), alter.naming) {
			t.Fatalf("gpubill restore against an altered manifest: exit %d, %q; want 1 and %q", code, errOut.String(), alter.naming)
		}
	}
	// A snapshot of a ledger whose balance checkpoint its postings do not give.
	pool, err := pgxpool.New(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `insert into ledger.checkpoint_balances (at, currency, account, net_debit) values ('2026-01-01T00:00:00Z', 'CNY', 'bank:client', 55);
		insert into ledger.balance_checkpoints (at, prev_at, postings) values ('2026-01-01T00:00:00Z', null, 0)`); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "snap-checkpoint")
	if _, err := backup.Take(ctx, src, dir, backup.Tools{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := cli.Main(ctx, []string{"restore", dir, "--database-url", base + "/gpubill_restored_checkpoint?sslmode=disable"}, &out, &errOut)
	if want := "report record checkpoint 2026-01-01T00:00:00Z bank:client CNY"; code != 1 || !strings.Contains(errOut.String(), want) {
		t.Fatalf("gpubill restore of a ledger with an invented checkpoint: exit %d, %q; want 1 and %q", code, errOut.String(), want)
	}
	// The checkpoint gone, a snapshot of a ledger whose deposit's posting was
	// moved 45 minutes (the chain hashes its transaction's time, not its own).
	var id string
	if err := pool.QueryRow(ctx, `select tx_id::text from ledger.postings where account = 'renter:r-001:wallet'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `delete from ledger.checkpoint_balances; delete from ledger.balance_checkpoints;
		alter table ledger.postings disable trigger postings_immutable;
		update ledger.postings set created_at = created_at + interval '45 min' where tx_id = '`+id+`' and account = 'renter:r-001:wallet';
		alter table ledger.postings enable trigger postings_immutable`); err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(t.TempDir(), "snap-posting-time")
	if _, err := backup.Take(ctx, src, dir, backup.Tools{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	code = cli.Main(ctx, []string{"restore", dir, "--database-url", base + "/gpubill_restored_posting_time?sslmode=disable"}, &out, &errOut)
	if want := "transaction " + id + ": posting 1 to renter:r-001:wallet was created at "; code != 1 || !strings.Contains(errOut.String(), want) {
		t.Fatalf("gpubill restore of a ledger with a posting moved in time: exit %d, %q; want 1 and %q", code, errOut.String(), want)
	}
}

type fixture struct {
	t       *testing.T
	st      *stack.Stack
	base    string
	finance string
	pool    string
}

func startStack(t *testing.T, dsn string, cal cycles.Calendar) *fixture {
	t.Helper()
	cfg := stack.Config{
		Common: config.Common{
			DatabaseURL: dsn, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", DataDir: t.TempDir(), AuthSecret: secret,
			CycleDays: cal.LengthDays, CycleAnchor: cal.Anchor.Format(time.DateOnly), CycleGrace: cal.Grace,
		},
		NATSAddr: "127.0.0.1:0", TemporalAddr: "127.0.0.1:0",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	st, err := stack.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	tok, err := auth.Issue([]byte(secret), auth.RoleFinance, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, st: st, base: "http://" + st.HTTPAddr, finance: tok, pool: dsn}
}

func (f *fixture) do(method, path string, body any) (int, map[string]any) {
	f.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, f.base+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+f.finance)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]any{}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		f.t.Fatalf("%s %s: HTTP %d, answer not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

func (f *fixture) mustDo(method, path string, body any) map[string]any {
	f.t.Helper()
	code, out := f.do(method, path, body)
	if code/100 != 2 {
		f.t.Fatalf("%s %s: HTTP %d %v", method, path, code, out)
	}
	return out
}

func (f *fixture) balance(address, currency string) decimal.Decimal {
	f.t.Helper()
	code, out := f.do(http.MethodGet, "/v1/accounts/"+address, nil)
	if code == http.StatusNotFound {
		return decimal.Zero
	}
	if code != http.StatusOK {
		f.t.Fatalf("GET account %s: HTTP %d %v", address, code, out)
	}
	for _, b := range out["balances"].([]any) {
		if m := b.(map[string]any); m["currency"] == currency {
			return decimal.RequireFromString(m["amount"].(string))
		}
	}
	return decimal.Zero
}

func (f *fixture) waitBalance(address, currency, want string) {
	f.t.Helper()
	w := decimal.RequireFromString(want)
	var got decimal.Decimal
	testkit.Eventually(f.t, 60*time.Second, func() bool {
		got = f.balance(address, currency)
		return got.Equal(w)
	}, "balance of %s: want %s", address, want)
}

// usage posts 2 GPUs × 1.5 h (01:00–02:30 UTC of day) and returns its end.
func (f *fixture) usage(id string, day time.Time) time.Time {
	f.t.Helper()
	start := day.Add(time.Hour)
	end := start.Add(90 * time.Minute)
	res := f.mustDo(http.MethodPost, "/v1/usage-events", map[string]any{"events": []any{map[string]any{"id": id, "lease_id": "lease-" + id,
		"provider_id": "p-001", "renter_id": "r-001", "gpu_model": "RTX_4090", "gpu_count": 2,
		"start_time": start.Format(time.RFC3339), "end_time": end.Format(time.RFC3339)}}})
	if fmt.Sprint(res["accepted"]) != "1" {
		f.t.Fatalf("usage %s: %v", id, res)
	}
	return end
}

func (f *fixture) settle(cycle string) {
	f.t.Helper()
	f.mustDo(http.MethodPost, "/v1/settlement-cycles/"+cycle+":close", map[string]any{})
	testkit.Eventually(f.t, 90*time.Second, func() bool {
		_, c := f.do(http.MethodGet, "/v1/settlement-cycles/"+cycle, nil)
		return c["status"] == "settled"
	}, "cycle %s settled", cycle)
}

// waitChained waits until every journal transaction is in the hash chain.
func (f *fixture) waitChained() {
	f.t.Helper()
	testkit.Eventually(f.t, 90*time.Second, func() bool { // other databases' long transactions hold the chain back
		var unchained int64
		q(f.t, f.pool, `select count(*) from ledger.transactions t where not exists (select 1 from ledger.journal_chain c where c.tx_id = t.id)`, &unchained)
		return unchained == 0
	}, "every transaction chained")
}

func q(t *testing.T, dsn, sql string, dest ...any) {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.QueryRow(context.Background(), sql).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func headHash(t *testing.T, dsn string) string {
	var h string
	q(t, dsn, `select encode(hash, 'hex') from ledger.journal_chain order by position desc limit 1`, &h)
	return h
}

// balances lists every balance row, as text, in address order.
func balances(t *testing.T, dsn string) string {
	var s string
	q(t, dsn, `select coalesce(string_agg(account || ' ' || currency || ' ' || debits::text || ' ' || credits::text, E'\n'
		order by account, currency), '') from ledger.balances`, &s)
	return s
}

// ageCluster creates the database and consumes n transaction ids on its
// server.
func ageCluster(t *testing.T, dsn string, n int) {
	t.Helper()
	if err := pg.EnsureDatabase(context.Background(), dsn); err != nil {
		t.Fatal(err)
	}
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(context.Background(), fmt.Sprintf(`do $$ begin for i in 1..%d loop perform pg_current_xact_id(); commit; end loop; end $$`, n)); err != nil {
		t.Fatal(err)
	}
}
