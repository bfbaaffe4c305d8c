package cli_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
	"github.com/gpubill/gpubill/services/ledger"
)

// Values the test links into the binaries (as `make build` does with git's).
const (
	linkedVersion    = "v0.0.0-clitest"
	linkedCommit     = "c0ffee0000000000000000000000000000000000"
	linkedCommitTime = "2026-01-02T03:04:05Z"
	runWithin        = time.Minute // one --help; a started stack would not end
)

var (
	buildOnce sync.Once
	binDir    string
	binErr    error
)

// binaries builds every binary of the repository (services/*/cmd/*) once
// per test process into a temp dir, as `make build` does, and returns the
// directory and the binaries' names.
func binaries(t *testing.T) (string, []string) {
	t.Helper()
	root := repoRoot(t)
	cmds, err := filepath.Glob(filepath.Join(root, "services", "*", "cmd", "*"))
	if err != nil || len(cmds) < 7 {
		t.Fatalf("binaries under services/*/cmd: %v, %v", cmds, err)
	}
	var names, pkgs []string
	for _, c := range cmds {
		names = append(names, filepath.Base(c))
		pkgs = append(pkgs, "./"+strings.TrimPrefix(c, root+"/"))
	}
	buildOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "gpubill-cli-test-")
		if binErr != nil {
			return
		}
		const pkg = "github.com/gpubill/gpubill/pkg/cmdline."
		args := append([]string{"build", "-o", binDir + "/", "-ldflags",
			"-X " + pkg + "version=" + linkedVersion + " -X " + pkg + "commit=" + linkedCommit + " -X " + pkg + "commitTime=" + linkedCommitTime}, pkgs...)
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = errors.New(string(out))
		}
	})
	if binErr != nil {
		t.Fatalf("build binaries: %v", binErr)
	}
	return binDir, names
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOWORK: %q, %v (the test builds the workspace's binaries)", out, err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// commandPaths walks the gpubill grammar: every command and subcommand,
// so a command added later is covered without touching this test.
func commandPaths(t *testing.T) [][]string {
	t.Helper()
	app, err := cli.Model()
	if err != nil {
		t.Fatal(err)
	}
	var paths [][]string
	var walk func(n *kong.Node, path []string)
	walk = func(n *kong.Node, path []string) {
		for _, c := range n.Children {
			if c.Type != kong.CommandNode {
				continue
			}
			p := append(append([]string{}, path...), c.Name)
			paths = append(paths, p)
			walk(c, p)
		}
	}
	walk(app.Node, nil)
	if len(paths) < 7 { // dev token simulate ledger ledger/verify version completion
		t.Fatalf("walked %d commands, want at least 7: %v", len(paths), paths)
	}
	return paths
}

// sandbox is the environment every command runs in: a database name no one
// uses, NATS and Temporal addresses that count connections, and listener
// addresses the test holds, so a command that tried to listen fails.
type sandbox struct {
	env      []string
	dbName   string
	dataDir  string
	accepted atomic.Int64
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	s := &sandbox{dbName: "gpubill_clitest_" + strings.ToLower(testkit.Name("x")[2:]), dataDir: filepath.Join(t.TempDir(), "data")}
	base, err := url.Parse(testkit.BaseDSN())
	if err != nil {
		t.Fatal(err)
	}
	base.Path = "/" + s.dbName
	if s.databaseExists(t) {
		t.Fatalf("database %s exists before the test", s.dbName)
	}
	t.Cleanup(func() { s.dropDatabase(t) }) // a command that wrongly created it
	counter := listen(t)
	go func() {
		for {
			c, err := counter.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			c.Close()
		}
	}()
	held := func() string { return listen(t).Addr().String() }
	s.env = append(os.Environ(),
		"DATABASE_URL="+base.String(),
		"NATS_URL=nats://"+counter.Addr().String(),
		"TEMPORAL_ADDRESS="+counter.Addr().String(),
		"GPUBILL_HTTP_ADDR="+held(), "GPUBILL_GRPC_ADDR="+held(),
		"GPUBILL_NATS_ADDR="+held(), "GPUBILL_TEMPORAL_ADDR="+held(),
		"GPUBILL_DATA_DIR="+s.dataDir,
		"GPUBILL_AUTH_SECRET=clitest-secret-0123456789abcdef0123456789",
		"GPUBILL_URL=http://"+counter.Addr().String(),
		"COMP_LINE=", // not a completion request
	)
	return s
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func (s *sandbox) databaseExists(t *testing.T) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testkit.BaseDSN())
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `select exists(select 1 from pg_database where datname=$1)`, s.dbName).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	return exists
}

func (s *sandbox) dropDatabase(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testkit.BaseDSN())
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "drop database if exists "+pgx.Identifier{s.dbName}.Sanitize()+" with (force)"); err != nil {
		t.Error(err)
	}
}

// assertUntouched: no database, no data dir, no connection.
func (s *sandbox) assertUntouched(t *testing.T) {
	t.Helper()
	if s.databaseExists(t) {
		t.Errorf("database %s was created", s.dbName)
	}
	if _, err := os.Stat(s.dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data dir %s was created (%v)", s.dataDir, err)
	}
	if n := s.accepted.Load(); n != 0 {
		t.Errorf("%d connections to NATS/Temporal/REST addresses", n)
	}
}

type result struct {
	code           int
	stdout, stderr string
}

func (s *sandbox) run(t *testing.T, bin string, args ...string) result {
	t.Helper()
	return s.runEnv(t, nil, bin, args...)
}

func (s *sandbox) runEnv(t *testing.T, extra []string, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runWithin)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(append([]string{}, s.env...), extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s %v still running after %s (stdout %q, stderr %q)", filepath.Base(bin), args, runWithin, stdout.String(), stderr.String())
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// --help and -h on every command of every binary print the help on stdout,
// exit 0 and start nothing: no database created, no connection, no
// listener (the listener addresses are held by the test, so a command that
// tried to listen would fail), no data dir.
func TestHelpOnEveryCommandStartsNothing(t *testing.T) {
	dir, names := binaries(t)
	s := newSandbox(t)
	type call struct {
		bin  string
		args []string
	}
	var calls []call
	for _, p := range commandPaths(t) {
		calls = append(calls, call{"gpubill", p})
	}
	for _, n := range names {
		calls = append(calls, call{n, nil})
	}
	for _, c := range calls {
		for _, flag := range []string{"--help", "-h"} {
			r := s.run(t, filepath.Join(dir, c.bin), append(append([]string{}, c.args...), flag)...)
			usage := "Usage: " + strings.Join(append([]string{c.bin}, c.args...), " ")
			if r.code != 0 || !strings.HasPrefix(r.stdout, usage) || r.stderr != "" {
				t.Errorf("%s %s %s: exit %d, stdout %q, stderr %q; want 0 and stdout starting %q", c.bin, strings.Join(c.args, " "), flag, r.code, r.stdout, r.stderr, usage)
			}
		}
	}
	s.assertUntouched(t)
	top := s.run(t, filepath.Join(dir, "gpubill"), "--help")
	if !strings.Contains(top.stdout, "Exit codes: 0 ok; 1 the command failed") {
		t.Errorf("gpubill --help does not document the exit codes:\n%s", top.stdout)
	}
}

// ledger verify never creates the database it reads: a missing database
// or a database without the ledger schema fails with exit 1 and a message
// naming DATABASE_URL, and leaves nothing behind.
func TestLedgerVerifyNeedsAnExistingLedger(t *testing.T) {
	dir, _ := binaries(t)
	s := newSandbox(t)
	gpubill := filepath.Join(dir, "gpubill")

	r := s.run(t, gpubill, "ledger", "verify")
	if r.code != 1 || !strings.Contains(r.stderr, "database does not exist") || !strings.Contains(r.stderr, s.dbName) || !strings.Contains(r.stderr, "DATABASE_URL") {
		t.Errorf("verify on a missing database: exit %d, stderr %q; want 1 and a message naming the database and DATABASE_URL", r.code, r.stderr)
	}
	s.assertUntouched(t)

	empty := testkit.NewDatabase(t) // exists, never migrated
	r = s.runEnv(t, []string{"DATABASE_URL=" + empty}, gpubill, "ledger", "verify")
	if r.code != 1 || !strings.Contains(r.stderr, "schema not found: ledger has not been migrated") {
		t.Errorf("verify on a database without the ledger schema: exit %d, stderr %q; want 1 and schema not found", r.code, r.stderr)
	}
}

// ledger verify exits 0 on an intact chain and 1 on a broken one, naming
// the position.
func TestLedgerVerifyExitCodes(t *testing.T) {
	dir, _ := binaries(t)
	s := newSandbox(t)
	gpubill := filepath.Join(dir, "gpubill")
	ctx := context.Background()
	pool, dsn := testkit.NewPool(t)
	if err := pg.Migrate(ctx, pool, "ledger", migrations.For("ledger")); err != nil {
		t.Fatal(err)
	}
	env := []string{"DATABASE_URL=" + dsn}
	if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 0 || !strings.HasPrefix(r.stdout, "ok: 0 transactions chained") {
		t.Errorf("verify on an empty ledger: exit %d, stdout %q, stderr %q; want 0 and ok", r.code, r.stdout, r.stderr)
	}
	// A link whose transaction is not in the journal.
	if _, err := pool.Exec(ctx, `insert into ledger.journal_chain (position, tx_id, xid, prev_hash, hash)
		values (1, gen_random_uuid(), '1', '\x00', '\x00')`); err != nil {
		t.Fatal(err)
	}
	if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 1 || !strings.HasPrefix(r.stdout, "BROKEN at chain position 1") || !strings.Contains(r.stderr, "journal hash chain broken") {
		t.Errorf("verify on a broken chain: exit %d, stdout %q, stderr %q; want 1 and BROKEN at position 1", r.code, r.stdout, r.stderr)
	}
}

// ledger verify walks the audit log's hash chain too and exits 1 naming
// the first seq that does not verify: the services' role owns
// ledger.audit_events and may disable its trigger, and a record deleted or
// its actor edited passed. The records here were stored before migration
// ledger/0030, which chained them.
func TestLedgerVerifyAuditChain(t *testing.T) {
	dir, _ := binaries(t)
	s := newSandbox(t)
	gpubill := filepath.Join(dir, "gpubill")
	pool, dsn := auditLogOfFour(t)
	ctx := context.Background()
	env := []string{"DATABASE_URL=" + dsn}
	if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 0 || !strings.Contains(r.stdout, "\nok: 4 audit records chained and verified, head 4:") {
		t.Fatalf("verify of an untouched audit log: exit %d, stdout %q, stderr %q; want 0 and 4 audit records", r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct{ tamper, want string }{
		{`update ledger.audit_events set actor = 'bob' where seq = 3`, "BROKEN audit record 3: "},
		{`delete from ledger.audit_events where seq = 2`, "BROKEN audit record 2: "},
	} {
		if _, err := pool.Exec(ctx, `alter table ledger.audit_events disable trigger audit_events_immutable; `+tc.tamper+
			`; alter table ledger.audit_events enable trigger audit_events_immutable`); err != nil {
			t.Fatal(err)
		}
		if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 1 || !strings.HasPrefix(r.stdout, tc.want) ||
			!strings.Contains(r.stderr, "audit log hash chain broken") {
			t.Errorf("verify after %s: exit %d, stdout %q, stderr %q; want 1 and %q", tc.tamper, r.code, r.stdout, r.stderr, tc.want)
		}
	}
}

// auditLogOfFour is a ledger whose audit log holds four records, stored
// before migration ledger/0030, which chained them; it returns its pool
// and DSN.
func auditLogOfFour(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	pool, dsn := testkit.NewPool(t)
	all := migrations.For("ledger")
	before := fstest.MapFS{}
	names, err := fs.Glob(all, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if n < "0030" {
			b, err := fs.ReadFile(all, n)
			if err != nil {
				t.Fatal(err)
			}
			before[n] = &fstest.MapFile{Data: b}
		}
	}
	if err := pg.Migrate(ctx, pool, "ledger", before); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into ledger.audit_events (event_id, at, service, method, actor, role, resource_ids, request_id, code, client_addr)
		select 'e-' || i, now(), 'ledger', '/gpubill.ledger.v1.LedgerService/CreateTransaction', 'fin-' || i, 'finance', '{}', 'req-' || i, 'OK', ''
		from generate_series(1, 4) i`); err != nil {
		t.Fatal(err)
	}
	if err := pg.Migrate(ctx, pool, "ledger", all); err != nil {
		t.Fatal(err)
	}
	return pool, dsn
}

// ledger verify --audit-head SEQ:HASH checks that the audit record at SEQ
// still has HASH (the head verify printed, kept by an auditor), and exits
// 1 naming SEQ when it holds another or none: the newest records deleted,
// or every record after an edit hashed again, leave a chain that verifies
// from the genesis, and went unseen.
func TestLedgerVerifyAuditHead(t *testing.T) {
	dir, _ := binaries(t)
	s := newSandbox(t)
	gpubill := filepath.Join(dir, "gpubill")
	pool, dsn := auditLogOfFour(t)
	ctx := context.Background()
	env := []string{"DATABASE_URL=" + dsn}
	r := s.runEnv(t, env, gpubill, "ledger", "verify")
	_, head, ok := strings.Cut(r.stdout, "\nok: 4 audit records chained and verified, head ")
	head = strings.TrimSpace(head)
	if r.code != 0 || !ok || !strings.HasPrefix(head, "4:") || len(head) != len("4:")+64 {
		t.Fatalf("verify of an untouched audit log: exit %d, stdout %q, stderr %q; want 0 and head 4:HASH", r.code, r.stdout, r.stderr)
	}
	if r := s.runEnv(t, env, gpubill, "ledger", "verify", "--audit-head", head); r.code != 0 || !strings.Contains(r.stdout, "ok: the audit record at "+head) {
		t.Fatalf("verify --audit-head of the log's own head: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	other := "4:" + strings.Repeat("ab", 32)
	if r := s.runEnv(t, env, gpubill, "ledger", "verify", "--audit-head", other); r.code != 1 ||
		!strings.Contains(r.stdout, "BROKEN audit record 4: its hash is "+head[2:]+", not ") || !strings.Contains(r.stderr, "audit head does not match") {
		t.Errorf("verify --audit-head of another hash: exit %d, stdout %q, stderr %q; want 1 and BROKEN audit record 4", r.code, r.stdout, r.stderr)
	}
	for _, bad := range []string{"4", "x:" + head[2:], "0:" + head[2:], "4:abc", "4:" + strings.Repeat("zz", 32)} {
		if r := s.runEnv(t, env, gpubill, "ledger", "verify", "--audit-head", bad); r.code != 1 || !strings.Contains(r.stderr, "SEQ:HASH") {
			t.Errorf("verify --audit-head %q: exit %d, stderr %q; want 1 naming SEQ:HASH", bad, r.code, r.stderr)
		}
	}
	for _, tc := range []struct{ tamper, want string }{
		// Record 2's actor edited, and 2 to 4 hashed again in order, as the writer would.
		{`update ledger.audit_events set actor = 'mallory' where seq = 2;
			do $$
			declare
				prev bytea := (select hash from ledger.audit_events where seq = 1);
				r ledger.audit_events;
			begin
				for r in select * from ledger.audit_events where seq >= 2 order by seq loop
					update ledger.audit_events set prev_hash = prev, hash = ledger.audit_hash(prev, r) where seq = r.seq returning hash into prev;
				end loop;
			end;
			$$`, "BROKEN audit record 4: its hash is "},
		{`delete from ledger.audit_events where seq = 4`, "BROKEN audit record 4: no record holds it"},
	} {
		if _, err := pool.Exec(ctx, `alter table ledger.audit_events disable trigger audit_events_immutable; `+tc.tamper+
			`; alter table ledger.audit_events enable trigger audit_events_immutable`); err != nil {
			t.Fatal(err)
		}
		// The chain alone verifies: the head kept is what tells.
		if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 0 {
			t.Fatalf("verify after %.40s…: exit %d, stdout %q; want 0 (a chain that verifies, or the head proves nothing)", tc.tamper, r.code, r.stdout)
		}
		if r := s.runEnv(t, env, gpubill, "ledger", "verify", "--audit-head", head); r.code != 1 || !strings.Contains(r.stdout, tc.want) ||
			!strings.Contains(r.stderr, "audit head does not match") {
			t.Errorf("verify --audit-head %s after %.40s…: exit %d, stdout %q, stderr %q; want 1 and %q", head, tc.tamper, r.code, r.stdout, r.stderr, tc.want)
		}
	}
}

// ledgerWithADeposit is a migrated ledger holding a deposit of 10.00 CNY to
// r-1 an hour ago, as the ledger writes one; it returns its pool and DSN.
func ledgerWithADeposit(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	pool, dsn := testkit.NewPool(t)
	if _, err := ledger.New(ctx, svc.Deps{Pool: pool, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Calendar: cycles.Default()}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `with t as (
			insert into ledger.transactions (id, idempotency_key, request_hash, kind, effective_at, created_at)
			values (gen_random_uuid(), 'd1', '\x00', 'deposit', now() - interval '1 hour', now() - interval '1 hour') returning id, created_at)
		insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at)
		select id, 0, 'bank:client', 'CNY', 'debit', 10.00, created_at from t
		union all select id, 1, 'renter:r-1:wallet', 'CNY', 'credit', 10.00, created_at from t`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into ledger.balances (account, currency, debits, credits)
		values ('bank:client', 'CNY', 10.00, 0), ('renter:r-1:wallet', 'CNY', 0, 10.00)`); err != nil {
		t.Fatal(err)
	}
	return pool, dsn
}

// ledger verify --head P:H checks that the chain's link at P still has H (a
// report's journal head), and verify fails on a balance its postings do not
// sum to: an auditor's saved head could not be checked with the tool, and an
// edited balance passed.
func TestLedgerVerifyHeadAndBalances(t *testing.T) {
	dir, _ := binaries(t)
	s := newSandbox(t)
	gpubill := filepath.Join(dir, "gpubill")
	ctx := context.Background()
	pool, dsn := ledgerWithADeposit(t)
	chainAll(t, pool)
	head, err := ledger.ChainLinkHash(ctx, pool, 1)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"DATABASE_URL=" + dsn}
	if r := s.runEnv(t, env, gpubill, "ledger", "verify", "--head", "1:"+head); r.code != 0 || !strings.Contains(r.stdout, "ok: the link at 1:"+head) {
		t.Fatalf("verify --head of the journal's own link: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	other := strings.Repeat("ab", 32)
	if r := s.runEnv(t, env, gpubill, "ledger", "verify", "--head", "1:"+other); r.code != 1 || !strings.Contains(r.stdout, "BROKEN at chain position 1: its hash is "+head) {
		t.Errorf("verify --head of another hash: exit %d, stdout %q, stderr %q; want 1 and BROKEN", r.code, r.stdout, r.stderr)
	}
	for _, bad := range []string{"1", "x:" + head, "0:" + head, "1:abc"} {
		if r := s.runEnv(t, env, gpubill, "ledger", "verify", "--head", bad); r.code != 1 || !strings.Contains(r.stderr, "POSITION:HASH") {
			t.Errorf("verify --head %q: exit %d, stderr %q; want 1 naming POSITION:HASH", bad, r.code, r.stderr)
		}
	}
	if _, err := pool.Exec(ctx, `update ledger.balances set credits = 1000.00 where account = 'renter:r-1:wallet'`); err != nil {
		t.Fatal(err)
	}
	if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 1 || !strings.HasPrefix(r.stdout, "BROKEN balance renter:r-1:wallet CNY") {
		t.Errorf("verify after a balance was edited: exit %d, stdout %q, stderr %q; want 1 and the balance named", r.code, r.stdout, r.stderr)
	}
	// The balance put back, a checkpoint the postings do not give (as-of reports start from it).
	if _, err := pool.Exec(ctx, `update ledger.balances set credits = 10.00 where account = 'renter:r-1:wallet';
		insert into ledger.checkpoint_balances (at, currency, account, net_debit) values
			('2026-01-01T00:00:00Z', 'CNY', 'bank:client', 20.00), ('2026-01-01T00:00:00Z', 'CNY', 'renter:r-1:wallet', -20.00);
		insert into ledger.balance_checkpoints (at, prev_at, postings) values ('2026-01-01T00:00:00Z', null, 2)`); err != nil {
		t.Fatal(err)
	}
	if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 1 ||
		!strings.HasPrefix(r.stdout, "BROKEN report record (checkpoint 2026-01-01T00:00:00Z bank:client CNY): balance checkpoint at 2026-01-01T00:00:00Z holds a net debit of 20") ||
		!strings.Contains(r.stderr, "does not follow from the journal") {
		t.Errorf("verify after a checkpoint was invented: exit %d, stdout %q, stderr %q; want 1 and the checkpoint named", r.code, r.stdout, r.stderr)
	}
}

// ledger verify fails on a chained posting whose created_at is not its
// transaction's: the chain hashes the transaction's time, not the
// posting's, yet every as-of figure (reports, balances as of, invoices,
// checkpoints) reads the posting's, and a deposit moved 45 minutes passed.
func TestLedgerVerifyPostingTime(t *testing.T) {
	dir, _ := binaries(t)
	s := newSandbox(t)
	gpubill := filepath.Join(dir, "gpubill")
	ctx := context.Background()
	pool, dsn := ledgerWithADeposit(t)
	chainAll(t, pool)
	env := []string{"DATABASE_URL=" + dsn}
	if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 0 || !strings.HasPrefix(r.stdout, "ok: 1 transactions chained") {
		t.Fatalf("verify before the edit: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	var id string
	if err := pool.QueryRow(ctx, `select id::text from ledger.transactions where idempotency_key = 'd1'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`alter table ledger.postings disable trigger postings_immutable`,
		`update ledger.postings set created_at = created_at + interval '45 min' where tx_id = '` + id + `' and idx = 1`,
		`alter table ledger.postings enable trigger postings_immutable`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 1 ||
		!strings.HasPrefix(r.stdout, "BROKEN: transaction "+id+": posting 1 to renter:r-1:wallet was created at ") ||
		!strings.Contains(r.stderr, "journal hash chain broken") {
		t.Errorf("verify after a posting's created_at was moved: exit %d, stdout %q, stderr %q; want 1 and posting 1 of %s named", r.code, r.stdout, r.stderr, id)
	}
}

// ledger verify reads the ledger in one snapshot: the chain it walks, the
// transactions not chained yet, the postings and the balances as they stood
// together. Read through a pool, each statement its own snapshot, a
// transaction the chain worker chained between the walk and the count of
// those not chained yet was neither verified nor counted: "1 chained and
// verified, 0 not chained yet" of a journal that held 2 throughout.
func TestLedgerVerifyReadsOneSnapshot(t *testing.T) {
	ctx := context.Background()
	pool, dsn := ledgerWithADeposit(t) // d1
	chainAll(t, pool)
	// d2, posted as the ledger writes one and not chained yet.
	if _, err := pool.Exec(ctx, `with t as (
			insert into ledger.transactions (id, idempotency_key, request_hash, kind, effective_at, created_at)
			values (gen_random_uuid(), 'd2', '\x00', 'deposit', now(), now()) returning id, created_at)
		insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at)
		select id, 0, 'bank:client', 'CNY', 'debit', 5.00, created_at from t
		union all select id, 1, 'renter:r-1:wallet', 'CNY', 'credit', 5.00, created_at from t`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `update ledger.balances set debits = debits + 5.00 where account = 'bank:client';
		update ledger.balances set credits = credits + 5.00 where account = 'renter:r-1:wallet'`); err != nil {
		t.Fatal(err)
	}
	// The chain worker chains d2 once verify has walked the chain, before it
	// counts the transactions not chained yet.
	chained := 0
	restore := cli.BeforeVerifyStatements(func(sql string) {
		if chained > 0 || !strings.HasPrefix(sql, "select count(*) from ledger.transactions t") {
			return
		}
		// A pass chains nothing while a transaction of an earlier id is
		// still running in the cluster (other tests' share it).
		deadline := time.Now().Add(30 * time.Second)
		for chained == 0 && time.Now().Before(deadline) {
			n, err := ledger.ChainOnce(ctx, pool)
			if err != nil {
				t.Errorf("chain d2 during verify: %v", err)
				return
			}
			chained += n
			if n == 0 {
				time.Sleep(50 * time.Millisecond)
			}
		}
	})
	defer restore()
	var stdout, stderr bytes.Buffer
	code := cli.Main(ctx, []string{"ledger", "verify", "--database-url", dsn}, &stdout, &stderr)
	if chained != 1 {
		t.Fatalf("the chain worker chained %d transactions between verify's statements, want 1 (d2): the seam did not fire where verify counts", chained)
	}
	const want = "ok: 1 transactions chained and verified, 1 not chained yet, head "
	if code != 0 || !strings.HasPrefix(stdout.String(), want) {
		t.Errorf("verify while d2 was chained: exit %d, stdout %q, stderr %q; want 0 and %q (the journal as it stood when verify began)",
			code, stdout.String(), stderr.String(), want)
	}
}

// report segregated-funds writes the report to a file (whole, or nothing),
// quiet when stderr is not a terminal, as of now or a past instant, and
// never creates a database.
func TestReportSegregatedFunds(t *testing.T) {
	dir, _ := binaries(t)
	s := newSandbox(t)
	gpubill := filepath.Join(dir, "gpubill")
	before := time.Now().UTC().Add(-2 * time.Hour)
	_, dsn := ledgerWithADeposit(t) // 10.00 to r-1 an hour ago
	env := []string{"DATABASE_URL=" + dsn}
	out := filepath.Join(t.TempDir(), "report.csv")
	r := s.runEnv(t, env, gpubill, "report", "segregated-funds", "--currency", "CNY", "--format", "csv", "-o", out)
	b, err := os.ReadFile(out)
	if r.code != 0 || err != nil || !strings.Contains(string(b), "\nrenter,r-1,10.00,,,,10.00,CNY,") || !strings.Contains(string(b), "summary,verdict,,,,,balanced") {
		t.Fatalf("report now: exit %d, stderr %q, file %q (%v)", r.code, r.stderr, b, err)
	}
	if strings.TrimSpace(r.stderr) != "wrote "+out+" ("+strconv.Itoa(len(b))+" bytes)" {
		t.Errorf("stderr is not a terminal, yet it got more than the summary: %q", r.stderr)
	}
	r = s.runEnv(t, env, gpubill, "report", "segregated-funds", "--currency", "CNY", "--as-of", before.Format(time.RFC3339Nano))
	if r.code != 0 || strings.Contains(r.stdout, "r-1") || !strings.Contains(r.stdout, `"client_money_requirement":"0.00"`) {
		t.Errorf("report as of before the deposit: exit %d, stdout %.400q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// An existing file (a signed report) is not replaced without --force;
	// the report is readable by its owner only (client balances).
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("report file: %v %v, want mode 0600", fi.Mode(), err)
	}
	if err := os.WriteFile(out, []byte("SIGNED"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = s.runEnv(t, env, gpubill, "report", "segregated-funds", "--currency", "CNY", "--format", "csv", "-o", out)
	if b, err := os.ReadFile(out); r.code != 1 || !strings.Contains(r.stderr, "exists") || string(b) != "SIGNED" || err != nil {
		t.Errorf("report over an existing file: exit %d, stderr %q, file %.40q; want 1 and the file kept", r.code, r.stderr, b)
	}
	r = s.runEnv(t, env, gpubill, "report", "segregated-funds", "--currency", "CNY", "--format", "csv", "-o", out, "--force")
	if b, err := os.ReadFile(out); r.code != 0 || err != nil || !strings.Contains(string(b), "summary,verdict,,,,,balanced") {
		t.Errorf("report --force over an existing file: exit %d, stderr %q, file %.40q", r.code, r.stderr, b)
	}
	if left, err := filepath.Glob(out + ".partial*"); err != nil || len(left) > 0 {
		t.Errorf("partial files left: %v %v", left, err)
	}
	// A database a restore did not finish (its last step not run) is
	// refused, naming the way out: its report would read as a ready
	// ledger's.
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pg.MarkRestorePending(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	r = s.runEnv(t, env, gpubill, "report", "segregated-funds", "--currency", "CNY")
	if r.code != 1 || !strings.Contains(r.stderr, "did not finish") || !strings.Contains(r.stderr, "after-recovery") || strings.Contains(r.stdout, "r-1") {
		t.Errorf("report on a database whose restore did not finish: exit %d, stdout %.200q, stderr %q; want 1 naming after-recovery", r.code, r.stdout, r.stderr)
	}
	r = s.run(t, gpubill, "report", "segregated-funds", "--currency", "CNY")
	if r.code != 1 || s.databaseExists(t) {
		t.Errorf("report on a missing database: exit %d, stderr %q; want 1 and no database created", r.code, r.stderr)
	}
}

// Usage errors exit 2 on every binary; a failed command exits 1.
func TestExitCodes(t *testing.T) {
	dir, names := binaries(t)
	s := newSandbox(t)
	gpubill := filepath.Join(dir, "gpubill")
	tests := []struct {
		give     []string
		giveEnv  []string
		wantCode int
	}{
		{give: nil, wantCode: 2}, // no command
		{give: []string{"no-such-command"}, wantCode: 2},
		{give: []string{"token"}, wantCode: 2}, // --role is required
		{give: []string{"ledger", "verify", "--no-such-flag"}, wantCode: 2},
		{give: []string{"completion", "fish"}, wantCode: 2},
		{give: []string{"dev"}, giveEnv: []string{"GPUBILL_LOG_LEVEL=loud"}, wantCode: 2},
		{give: []string{"token", "--role", "finance"}, giveEnv: []string{"GPUBILL_AUTH_SECRET="}, wantCode: 1}, // no signing key
		// Values refused when the command runs are usage errors too, and no
		// token the services would refuse is printed.
		{give: []string{"token", "--role", "root"}, giveEnv: []string{"GPUBILL_AUTH_SECRET=" + strings.Repeat("k", 32)}, wantCode: 2},
		{give: []string{"token", "--role", "renter"}, giveEnv: []string{"GPUBILL_AUTH_SECRET=" + strings.Repeat("k", 32)}, wantCode: 2},
		{give: []string{"token", "--role", "renter", "--sub", "r-001 "}, giveEnv: []string{"GPUBILL_AUTH_SECRET=" + strings.Repeat("k", 32)}, wantCode: 2},
		{give: []string{"token", "--role", "finance", "--ttl=-1h"}, giveEnv: []string{"GPUBILL_AUTH_SECRET=" + strings.Repeat("k", 32)}, wantCode: 2},
		{give: []string{"token", "--role", "finance"}, giveEnv: []string{"GPUBILL_AUTH_SECRET=short"}, wantCode: 2},
		{give: []string{"ledger", "verify"}, wantCode: 1},
		// Without the operator's word that every service is stopped (checked
		// before any connection: the sandbox's database stays uncreated).
		{give: []string{"after-recovery"}, wantCode: 2},
		{give: []string{"after-recovery", "--services-stopped"}, wantCode: 1}, // the database does not exist
		// Settings out of range, refused at start-up: they exited 1.
		{give: []string{"dev"}, giveEnv: []string{"GPUBILL_CYCLE_DAYS=0"}, wantCode: 2},
		{give: []string{"dev"}, giveEnv: []string{"GPUBILL_RUNWAY_WARN=0"}, wantCode: 2},
	}
	for _, tt := range tests {
		r := s.runEnv(t, tt.giveEnv, gpubill, tt.give...)
		if r.code != tt.wantCode || r.stderr == "" {
			t.Errorf("gpubill %v (env %v): exit %d, stderr %q; want %d and a message", tt.give, tt.giveEnv, r.code, r.stderr, tt.wantCode)
		}
	}
	for _, n := range names {
		if r := s.run(t, filepath.Join(dir, n), "--no-such-flag"); r.code != 2 || r.stderr == "" {
			t.Errorf("%s --no-such-flag: exit %d, stderr %q; want 2", n, r.code, r.stderr)
		}
	}
	badCycle := []string{"NATS_URL=nats://127.0.0.1:1", "GPUBILL_AUTH_SECRET=" + strings.Repeat("k", 32), "GPUBILL_CYCLE_DAYS=0"}
	for _, n := range names {
		if n == "gpubill" {
			continue // the dev command, above
		}
		if r := s.runEnv(t, badCycle, filepath.Join(dir, n)); r.code != 2 || !strings.Contains(r.stderr, "CYCLE_DAYS") {
			t.Errorf("%s with GPUBILL_CYCLE_DAYS=0: exit %d, stderr %q; want 2 naming it", n, r.code, r.stderr)
		}
	}
	// Lease control's, read by the ledger alone.
	if r := s.runEnv(t, []string{"GPUBILL_RUNWAY_WARN=0"}, filepath.Join(dir, "ledger")); r.code != 2 || !strings.Contains(r.stderr, "RUNWAY_WARN") {
		t.Errorf("ledger with GPUBILL_RUNWAY_WARN=0: exit %d, stderr %q; want 2 naming it", r.code, r.stderr)
	}
	s.assertUntouched(t)
}

// `gpubill version` and --version on every binary print what the build
// knows: the linked version, the commit (VCS stamp, else the linked one),
// its time, and the Go version.
func TestVersion(t *testing.T) {
	dir, names := binaries(t)
	s := newSandbox(t)
	r := s.run(t, filepath.Join(dir, "gpubill"), "version")
	for _, want := range []string{"gpubill " + linkedVersion + "\n", "commit:      " + linkedCommit + "\n", "commit time: " + linkedCommitTime + "\n", "go:          " + runtime.Version() + "\n"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("gpubill version: exit %d, stdout %q; want 0 and %q", r.code, r.stdout, want)
		}
	}
	for _, n := range names {
		r := s.run(t, filepath.Join(dir, n), "--version")
		want := n + " " + linkedVersion + " (commit " + linkedCommit + ", " + linkedCommitTime + ", " + runtime.Version() + ")\n"
		if r.code != 0 || r.stdout != want {
			t.Errorf("%s --version: exit %d, stdout %q; want 0 and %q", n, r.code, r.stdout, want)
		}
	}
	s.assertUntouched(t)
}

// `gpubill completion bash|zsh` prints a script that hands completion to
// the binary, and the binary answers a completion request with the
// grammar's commands.
func TestCompletion(t *testing.T) {
	dir, _ := binaries(t)
	s := newSandbox(t)
	gpubill := filepath.Join(dir, "gpubill")
	for _, shell := range []string{"bash", "zsh"} {
		r := s.run(t, gpubill, "completion", shell)
		if r.code != 0 || !strings.Contains(r.stdout, "complete -o default -C '"+gpubill+"' gpubill\n") {
			t.Errorf("completion %s: exit %d, stdout %q", shell, r.code, r.stdout)
		}
	}
	if bash, err := exec.LookPath("bash"); err == nil {
		out, err := exec.Command(bash, "-c", "source <(\"$0\" completion bash) && complete -p gpubill", gpubill).CombinedOutput()
		if err != nil || !strings.Contains(string(out), gpubill) {
			t.Errorf("bash does not register the completion: %v %s", err, out)
		}
	}
	tests := []struct {
		give string
		want []string
	}{
		{"gpubill ", []string{"after-recovery", "backup", "completion", "dev", "ledger", "report", "restore", "simulate", "token", "version"}},
		{"gpubill led", []string{"ledger"}},
		{"gpubill ledger ", []string{"checkpoints", "verify"}},
		{"gpubill ledger checkpoints ", []string{"rebuild"}},
		{"gpubill token --ro", []string{"--role"}},
	}
	for _, tt := range tests {
		r := s.runEnv(t, []string{"COMP_LINE=" + tt.give, "COMP_POINT=" + strconv.Itoa(len(tt.give))}, gpubill)
		got := strings.Fields(r.stdout)
		sort.Strings(got)
		if r.code != 0 || strings.Join(got, " ") != strings.Join(tt.want, " ") {
			t.Errorf("completing %q: exit %d, %v; want %v", tt.give, r.code, got, tt.want)
		}
	}
	s.assertUntouched(t)
}

// Every flag of every command says what it is (token's and simulate's
// key and data-dir flags said nothing), and a log level is one of the
// four (simulate took "loud" and logged at info).
func TestEveryFlagHasHelp(t *testing.T) {
	app, err := cli.Model()
	if err != nil {
		t.Fatal(err)
	}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			if strings.TrimSpace(f.Help) == "" {
				t.Errorf("%s --%s has no help", n.Path(), f.Name)
			}
			if f.Name == "log-level" && f.Enum == "" {
				t.Errorf("%s --log-level takes any value", n.Path())
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(app.Node)
}

// chainAll chains every transaction, as the ledger's chain worker does: a
// pass chains nothing while a transaction of an earlier id is still running
// in the cluster (the tests of other packages share it), so it passes again
// until none is left.
func chainAll(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	testkit.Eventually(t, 30*time.Second, func() bool {
		if _, err := ledger.ChainOnce(ctx, pool); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctx, `select count(*) from ledger.transactions t
			where not exists (select 1 from ledger.journal_chain c where c.tx_id = t.id)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}, "transactions left unchained")
}

// A balance checkpoint made stale before ledger/0040 (a posting committed
// late into it, with no trigger to mark it) is named by ledger verify with
// the command that repairs it; `ledger checkpoints rebuild --since` marks it
// and the checkpoints after it for a rebuild, verify is ok at once, and
// after the ledger's next checkpoint step an as-of report holds the posting.
// There was no way to repair one but SQL by hand.
func TestLedgerCheckpointsRebuild(t *testing.T) {
	dir, _ := binaries(t)
	s := newSandbox(t)
	gpubill := filepath.Join(dir, "gpubill")
	ctx := context.Background()
	pool, dsn := ledgerWithADeposit(t) // 10.00 to r-1 an hour ago
	env := []string{"DATABASE_URL=" + dsn}
	at := time.Now().UTC().Add(-30 * time.Minute).Truncate(time.Second)
	stamp := at.Format(time.RFC3339Nano)
	// The checkpoint as the step made it, then 5.00 created before it and
	// committed after, with no trigger to mark it late.
	if _, err := pool.Exec(ctx, `insert into ledger.checkpoint_balances (at, currency, account, net_debit) values
			($1, 'CNY', 'bank:client', 10.00), ($1, 'CNY', 'renter:r-1:wallet', -10.00)`, at); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `insert into ledger.balance_checkpoints (at, prev_at, postings) values ($1, null, 2)`, at); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`alter table ledger.postings disable trigger postings_late_for_checkpoint`,
		`with t as (
			insert into ledger.transactions (id, idempotency_key, request_hash, kind, effective_at, created_at)
			values (gen_random_uuid(), 'late', '\x00', 'deposit', now() - interval '50 min', now() - interval '50 min') returning id, created_at)
		insert into ledger.postings (tx_id, idx, account, currency, direction, amount, created_at)
		select id, 0, 'bank:client', 'CNY', 'debit', 5.00, created_at from t
		union all select id, 1, 'renter:r-1:wallet', 'CNY', 'credit', 5.00, created_at from t`,
		`alter table ledger.postings enable trigger postings_late_for_checkpoint`,
		`update ledger.balances set debits = debits + 5.00 where account = 'bank:client'`,
		`update ledger.balances set credits = credits + 5.00 where account = 'renter:r-1:wallet'`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	chainAll(t, pool)
	repair := "gpubill ledger checkpoints rebuild --since " + stamp
	if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 1 ||
		!strings.HasPrefix(r.stdout, "BROKEN report record (checkpoint "+stamp+" bank:client CNY)") || !strings.Contains(r.stdout, repair) {
		t.Fatalf("verify of a checkpoint a posting committed late into: exit %d, stdout %q, stderr %q; want 1, the checkpoint named and %q", r.code, r.stdout, r.stderr, repair)
	}
	for _, bad := range [][]string{{}, {"--since", "yesterday"}} {
		if r := s.runEnv(t, env, gpubill, append([]string{"ledger", "checkpoints", "rebuild"}, bad...)...); r.code != 2 || !strings.Contains(r.stderr, "since") {
			t.Errorf("checkpoints rebuild %v: exit %d, stderr %q; want 2 naming --since", bad, r.code, r.stderr)
		}
	}
	if r := s.runEnv(t, env, gpubill, "ledger", "checkpoints", "rebuild", "--since", stamp); r.code != 0 ||
		!strings.HasPrefix(r.stdout, "marked 1 balance checkpoint at or after "+stamp+" to rebuild") {
		t.Fatalf("checkpoints rebuild --since %s: exit %d, stdout %q, stderr %q; want 0 and 1 checkpoint marked", stamp, r.code, r.stdout, r.stderr)
	}
	if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 0 {
		t.Fatalf("verify once marked: exit %d, stdout %q, stderr %q; want 0", r.code, r.stdout, r.stderr)
	}
	l, err := ledger.New(ctx, svc.Deps{Pool: pool, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Calendar: cycles.Default()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reports().CheckpointStep(ctx); err != nil {
		t.Fatal(err)
	}
	var rebuilt string
	if err := pool.QueryRow(ctx, `select coalesce((select net_debit::text from ledger.checkpoint_balances
		where at = $1 and account = 'bank:client' and currency = 'CNY'), 'none')`, at).Scan(&rebuilt); err != nil || rebuilt != "15.00" {
		t.Fatalf("bank:client in the checkpoint at %s after the checkpoint step: %s (%v), want 15.00", stamp, rebuilt, err)
	}
	if r := s.runEnv(t, env, gpubill, "ledger", "verify"); r.code != 0 {
		t.Errorf("verify after the checkpoint step: exit %d, stdout %q, stderr %q; want 0", r.code, r.stdout, r.stderr)
	}
	if r := s.runEnv(t, env, gpubill, "report", "segregated-funds", "--currency", "CNY", "--format", "csv", "--as-of", at.Add(time.Second).Format(time.RFC3339)); r.code != 0 ||
		!strings.Contains(r.stdout, "\nrenter,r-1,15.00,") {
		t.Errorf("report as of just after the checkpoint: exit %d, stdout %.600q, stderr %q; want r-1 at 15.00", r.code, r.stdout, r.stderr)
	}
	// A missing database is not created.
	if r := s.run(t, gpubill, "ledger", "checkpoints", "rebuild", "--since", stamp); r.code != 1 || !strings.Contains(r.stderr, "database does not exist") || s.databaseExists(t) {
		t.Errorf("checkpoints rebuild on a missing database: exit %d, stderr %q; want 1 and no database created", r.code, r.stderr)
	}
}
