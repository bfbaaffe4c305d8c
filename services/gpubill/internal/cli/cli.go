// Package cli is gpubill's command line: `dev` (every service in one
// process), `token`, `simulate`, `ledger verify`, `ledger checkpoints
// rebuild`, `report segregated-funds`, `backup`, `restore`,
// `after-recovery`, `version` and `completion`. Config comes from the environment and flags (kong), as
// listed in DESIGN §10. --help anywhere prints and starts nothing; only
// `dev` may create the database.
package cli

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/willabides/kongplete"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/cmdline"
	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/gctune"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/gpubill/internal/backup"
	"github.com/gpubill/gpubill/services/gpubill/internal/simulate"
	"github.com/gpubill/gpubill/services/gpubill/internal/stack"
	"github.com/gpubill/gpubill/services/ledger"
)

const (
	printedTokenTTL = 30 * 24 * time.Hour
	simulateTick    = time.Second
)

type cli struct {
	Dev         devCmd           `cmd:"" help:"Run every gpubill service in one process with embedded NATS and Temporal (creates the database if missing)."`
	Token       tokenCmd         `cmd:"" help:"Print a bearer token the dev stack accepts."`
	Simulate    simulateCmd      `cmd:"" help:"Drive a simulated marketplace through the REST API of a running stack."`
	Ledger      ledgerCmd        `cmd:"" help:"Ledger maintenance."`
	Report      reportCmd        `cmd:"" help:"Reports for auditors, straight from the database (read only)."`
	Backup      backupCmd        `cmd:"" help:"Write a consistent snapshot of every schema (pg_dump) and its manifest into a new directory."`
	Restore     restoreCmd       `cmd:"" help:"Load a snapshot into an empty database and verify it against its manifest."`
	Recovery    afterRecoveryCmd `cmd:"" name:"after-recovery" help:"Run restore's last step on a database recovered otherwise (CloudNativePG point-in-time recovery, a volume snapshot), or whose gpubill restore was interrupted after loading: required before gpubill starts on it."`
	Version     versionCmd       `cmd:"" help:"Print the version, commit, commit time and Go version."`
	Completion  completionCmd    `cmd:"" help:"Print the shell code that enables tab completion: source <(gpubill completion bash)."`
	VersionFlag kong.VersionFlag `name:"version" help:"Print the version and exit."`
}

type devCmd struct {
	config.Common
	NATSAddr     string        `name:"nats-addr" env:"GPUBILL_NATS_ADDR" default:"127.0.0.1:0" help:"Embedded NATS listener."`
	TemporalAddr string        `name:"temporal-addr" env:"GPUBILL_TEMPORAL_ADDR" default:"127.0.0.1:0" help:"Embedded Temporal dev server listener."`
	Simulate     bool          `name:"simulate" env:"GPUBILL_SIMULATE" help:"Drive a simulated marketplace through the public API."`
	Force        bool          `help:"With --simulate: run even on a database holding parties or ledger history the simulation did not create (its deposits have no money behind them)."`
	BackupDir    string        `name:"backup-dir" env:"GPUBILL_BACKUP_DIR" help:"Where scheduled snapshots go (default: <data-dir>/backups)."`
	BackupEvery  time.Duration `name:"backup-every" env:"GPUBILL_BACKUP_EVERY" default:"6h" help:"Interval between scheduled snapshots (0: none)."`
	BackupKeep   time.Duration `name:"backup-keep" env:"GPUBILL_BACKUP_KEEP" default:"72h" help:"Age past which scheduled snapshots are removed (the newest is always kept)."`
	PGBin        string        `name:"pg-bin" env:"GPUBILL_PG_BIN" help:"Directory of pg_dump and pg_restore (default: /usr/lib/postgresql/15/bin if present, else $PATH)."`
}

type tokenCmd struct {
	Role       string        `required:"" help:"finance, auditor, provider, renter, meter, admin (or service: the internal identity between services)."`
	Sub        string        `help:"Subject: the provider or renter id (required for those roles); for a meter, the one provider whose usage it may ingest (unset: every provider)."`
	TTL        time.Duration `name:"ttl" default:"720h" help:"Lifetime (above 0)."`
	DataDir    string        `name:"data-dir" env:"GPUBILL_DATA_DIR" default:".gpubill" help:"Where gpubill dev keeps its signing key (auth.secret) when GPUBILL_AUTH_SECRET is unset."`
	AuthSecret string        `name:"auth-secret" env:"GPUBILL_AUTH_SECRET" help:"Token signing key, at least 32 bytes (prefer the environment variable: a flag shows in the process list)."`
}

type simulateCmd struct {
	URL        string        `name:"url" env:"GPUBILL_URL" default:"http://127.0.0.1:8080" help:"Base URL of the REST API."`
	Tick       time.Duration `default:"1s" help:"Interval between usage batches."`
	DataDir    string        `name:"data-dir" env:"GPUBILL_DATA_DIR" default:".gpubill" help:"Where gpubill dev keeps its signing key (auth.secret) when GPUBILL_AUTH_SECRET is unset."`
	AuthSecret string        `name:"auth-secret" env:"GPUBILL_AUTH_SECRET" help:"Token signing key, at least 32 bytes (prefer the environment variable: a flag shows in the process list)."`
	LogLevel   string        `name:"log-level" env:"GPUBILL_LOG_LEVEL" default:"info" enum:"debug,info,warn,error" help:"Log level."`
	Force      bool          `help:"Run even against a stack holding renters or providers the simulation did not create (its deposits have no money behind them)."`
}

type ledgerCmd struct {
	Verify      verifyCmd      `cmd:"" help:"Walk the journal hash chain and name the first altered transaction; check every balance against its postings; walk the audit log's hash chain and name the first altered record."`
	Checkpoints checkpointsCmd `cmd:"" help:"Balance checkpoints (the starting points of as-of reports)."`
}

type checkpointsCmd struct {
	Rebuild checkpointsRebuildCmd `cmd:"" help:"Mark the balance checkpoints at or after --since to be rebuilt from the postings: as-of reports and ledger verify leave them out at once, and the ledger's next checkpoint step (every minute) rebuilds them. For a checkpoint ledger verify names (BROKEN report record (checkpoint …)) because a posting committed late into it with no late-posting mark (before migration ledger/0040, or with its trigger disabled), once its postings are known good."`
}

type checkpointsRebuildCmd struct {
	Since       time.Time `required:"" name:"since" format:"2006-01-02T15:04:05Z07:00" help:"The instant, RFC 3339: the checkpoints at or after it are rebuilt, from the one before it (the checkpoint ledger verify names)."`
	DatabaseURL string    `name:"database-url" env:"DATABASE_URL" default:"postgres://postgres@127.0.0.1:5432/gpubill?sslmode=disable" help:"PostgreSQL; never created (a missing database or ledger schema fails)."`
}

type verifyCmd struct {
	DatabaseURL string `name:"database-url" env:"DATABASE_URL" default:"postgres://postgres@127.0.0.1:5432/gpubill?sslmode=disable" help:"PostgreSQL; read only, never created (a missing database or ledger schema fails)."`
	Head        string `name:"head" placeholder:"POSITION:HASH" help:"Also check that the chain's link at POSITION still has HASH (a report's journal_head_position and journal_head_hash)."`
	AuditHead   string `name:"audit-head" placeholder:"SEQ:HASH" help:"Also check that the audit record at SEQ still has HASH (the audit head an earlier verify printed): the newest records deleted, or the records after an edit hashed again, leave a chain that verifies."`
}

type reportCmd struct {
	SegregatedFunds segregatedFundsCmd `cmd:"" name:"segregated-funds" help:"The segregated-funds (client money) report of one currency as of an instant, as JSON, CSV or PDF."`
}

type segregatedFundsCmd struct {
	AsOf        time.Time `name:"as-of" format:"2006-01-02T15:04:05Z07:00" help:"The instant, RFC 3339 (default: now)."`
	Currency    string    `required:"" help:"Currency code, e.g. CNY."`
	Format      string    `enum:"json,csv,pdf" default:"json" help:"json, csv or pdf."`
	Output      string    `short:"o" name:"output" default:"-" help:"File to write (- for stdout); an existing one is not replaced without --force."`
	Force       bool      `help:"Replace the output file if it exists."`
	DatabaseURL string    `name:"database-url" env:"DATABASE_URL" default:"postgres://postgres@127.0.0.1:5432/gpubill?sslmode=disable" help:"PostgreSQL; read only, never created."`
}

type backupCmd struct {
	Output      string `name:"output" short:"o" required:"" help:"New (or empty) directory for the snapshot."`
	DatabaseURL string `name:"database-url" env:"DATABASE_URL" default:"postgres://postgres@127.0.0.1:5432/gpubill?sslmode=disable" help:"PostgreSQL to snapshot; read only."`
	PGBin       string `name:"pg-bin" env:"GPUBILL_PG_BIN" help:"Directory of pg_dump (default: /usr/lib/postgresql/15/bin if present, else $PATH)."`
}

type restoreCmd struct {
	Dir         string `arg:"" help:"A snapshot directory written by gpubill backup."`
	DatabaseURL string `name:"database-url" env:"DATABASE_URL" default:"postgres://postgres@127.0.0.1:5432/gpubill?sslmode=disable" help:"An empty (or missing: created) database to load the snapshot into."`
	PGBin       string `name:"pg-bin" env:"GPUBILL_PG_BIN" help:"Directory of pg_restore (default: /usr/lib/postgresql/15/bin if present, else $PATH)."`
}

type afterRecoveryCmd struct {
	DatabaseURL     string `name:"database-url" env:"DATABASE_URL" default:"postgres://postgres@127.0.0.1:5432/gpubill?sslmode=disable" help:"The recovered database; never created."`
	ServicesStopped bool   `name:"services-stopped" help:"Confirm that no gpubill service runs on the database (they read the restore epoch once, at start); required."`
}

type versionCmd struct{}

type completionCmd struct {
	Shell string `arg:"" enum:"bash,zsh" help:"bash or zsh."`
}

type env struct {
	ctx    context.Context
	stdout *output
	stderr io.Writer
}

// output is a command's stdout: its answer. The first write that fails is
// kept and fails the command (a token or a verification verdict that was
// never printed is not a success), whatever the command returned.
type output struct {
	w   io.Writer
	err error
}

func (o *output) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	o.err = err
	return n, err
}

func (o *output) printf(format string, a ...any) {
	if o.err == nil {
		_, o.err = fmt.Fprintf(o.w, format, a...)
	}
}

func (o *output) println(a ...any) {
	if o.err == nil {
		_, o.err = fmt.Fprintln(o.w, a...)
	}
}

// Main runs the CLI and returns the exit code (cmdline.Exit*).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c cli
	complete := kong.PostBuild(func(k *kong.Kong) error {
		kongplete.Complete(k, kongplete.WithExitFunc(k.Exit))
		return nil
	})
	kctx, code, done := cmdline.Parse(name, &c, args, stdout, stderr, append(options(), complete)...)
	if done {
		return code
	}
	out := &output{w: stdout}
	err := kctx.Run(&env{ctx: ctx, stdout: out, stderr: stderr})
	if err == nil && out.err != nil {
		err = fmt.Errorf("writing the output: %w", out.err)
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpubill:", err) //nolint:errcheck // stderr: the exit code carries the failure
	}
	return cmdline.Code(err)
}

const name = "gpubill"

// options are the kong options of the gpubill grammar, shared by Main and
// Model. Main adds the completion hook, which answers a shell's completion
// request (COMP_LINE set by `complete -C`) before parsing and ends the run.
func options() []kong.Option {
	return []kong.Option{
		kong.Description("gpubill: billing and settlement for a GPU compute marketplace.\n\n" + cmdline.ExitCodesHelp +
			" A read-only command (ledger verify, report) fails with 1 on what it finds (a broken chain) and on a missing database or schema, which it never creates."),
	}
}

// Model is the gpubill grammar, for tests that walk every command.
func Model() (*kong.Application, error) {
	k, err := kong.New(&cli{}, append(options(), kong.Name(name))...)
	if err != nil {
		return nil, err
	}
	return k.Model, nil
}

func (d *devCmd) Run(e *env) error {
	log := obs.NewLogger(e.stderr, d.LogLevel)
	gctune.Apply().Log(log)
	shutdown, err := obs.SetupTracing(e.ctx, "gpubill", log)
	if err != nil {
		return err
	}
	defer func() {
		if err := shutdown(context.Background()); err != nil {
			log.Warn("spans not exported at exit", "err", err)
		}
	}()
	if d.Simulate && !d.Force {
		// Before anything starts on it: a production DATABASE_URL got the
		// whole stack and the simulation's deposits.
		if err := simulate.CheckOwnDatabase(e.ctx, d.DatabaseURL); err != nil {
			return err
		}
	}
	lease, recv, err := d.leaseControl(log)
	if err != nil {
		return err
	}
	if recv != nil {
		defer recv.Close()
	}
	st, err := stack.Start(e.ctx, stack.Config{Common: d.Common, NATSAddr: d.NATSAddr, TemporalAddr: d.TemporalAddr, Log: log, LeaseControl: &lease})
	if err != nil {
		return err
	}
	defer st.Stop()
	finance, err := auth.Issue(st.Secret, auth.RoleFinance, "", printedTokenTTL)
	if err != nil {
		return err
	}
	base := "http://" + st.HTTPAddr
	d.printUp(e, st, base, finance)
	d.runBackups(e, log)
	if d.Simulate {
		d.runSimulation(e, log, base, finance, recv)
	}
	select {
	case <-e.ctx.Done():
		e.stdout.println("shutting down…")
		return nil
	case err := <-st.Err():
		return err
	}
}

// leaseControl is lease control's configuration from the environment; the
// simulated marketplace is the scheduler lease control calls (recv, to be
// closed), unless GPUBILL_LEASE_CONTROL_URL names another.
func (d *devCmd) leaseControl(log *slog.Logger) (ledger.LeaseControlConfig, *simulate.LeaseReceiver, error) {
	lease, err := ledger.LeaseControlConfigFromEnv()
	if err != nil {
		return lease, nil, cmdline.UsageError{Err: err} // a setting; the receiver's failure below is not
	}
	if !d.Simulate || lease.URL != "" {
		return lease, nil, nil
	}
	recv, err := simulate.NewLeaseReceiver(log.With("component", "simulate"))
	if err != nil {
		return lease, nil, err
	}
	lease.URL, lease.Secret = recv.URL(), recv.Secret
	return lease, recv, nil
}

// printUp tells where the stack listens, with a finance token. NATS_URL
// is shown redacted (scheme, host, port): its user and password, or its
// token, would be on a terminal, a CI log or a shared screen.
func (d *devCmd) printUp(e *env, st *stack.Stack, base, finance string) {
	e.stdout.printf(`
gpubill dev is up.
  REST      %[1]s   (health: %[1]s/healthz, readiness: %[1]s/readyz)
  API docs  %[1]s/docs   (OpenAPI: %[1]s/v1/openapi.json)
  gRPC      %[2]s
  NATS      %[3]s
  Temporal  %[4]s
  data      %[5]s

A finance token (30 days; more with: bin/gpubill token --role finance):
  export TOKEN=%[6]s
  curl -s -H "Authorization: Bearer $TOKEN" %[1]s/v1/accounts/bank:client
  curl -s -H "Authorization: Bearer $TOKEN" '%[1]s/v1/accounts?prefix=renter:'

`, base, st.GRPCAddr, apperr.RedactURLs(st.NATSURL), st.Temporal, d.DataDir, finance)
}

// runBackups runs the scheduled backups in the background until e.ctx ends.
func (d *devCmd) runBackups(e *env, log *slog.Logger) {
	backupDir := d.BackupDir
	if backupDir == "" {
		backupDir = filepath.Join(d.DataDir, "backups")
	}
	go func() {
		sched := backup.Schedule{DSN: d.DatabaseURL, Dir: backupDir, Every: d.BackupEvery, Keep: d.BackupKeep,
			Tools: backup.Tools{BinDir: d.PGBin}, Log: log.With("component", "backup")}
		if err := sched.Run(e.ctx); err != nil {
			log.Error("scheduled backups stopped", "err", err)
		}
	}()
}

// runSimulation runs the simulated marketplace in the background until
// e.ctx ends. The stack is the one dev just started, so parties a developer
// created on it by hand do not stop the simulation (Force).
func (d *devCmd) runSimulation(e *env, log *slog.Logger, base, finance string, recv *simulate.LeaseReceiver) {
	go func() {
		if err := simulate.Run(e.ctx, simulate.Config{BaseURL: base, Token: finance, Tick: simulateTick, Log: log.With("component", "simulate"),
			Lease: recv, Force: true}); err != nil {
			log.Error("simulation stopped", "err", err)
		}
	}()
	e.stdout.println("Simulated marketplace: on (providers p-001..p-004, renters r-001..r-003; usage every second).")
	if recv != nil {
		e.stdout.println("Lease control: renter r-004 (30.00 CNY, credit limit 10.00) is warned, stopped and, after its top-up, resumed (watch the log).")
	}
}

func (t *tokenCmd) Run(e *env) error {
	secret, err := secretFor(t.AuthSecret, t.DataDir)
	if err != nil {
		return err
	}
	tok, err := auth.Issue(secret, t.Role, t.Sub, t.TTL)
	if err != nil {
		return cmdline.UsageError{Err: err}
	}
	if t.Sub == "" && personRoles[t.Role] {
		// Audit fields (a reconciliation's requester, a resolution's
		// resolved_by and voided_by, a statement's imported_by, a bank
		// file's release) name the caller as role and subject: every
		// subject-less token of a role is one caller there.
		fmt.Fprintf(e.stderr, "gpubill: warning: no --sub: every %s token without a subject is the same caller %q in audit fields (a reconciliation's requester, resolved_by, voided_by, imported_by) and shares its reconciliation keys; give each person --sub\n", t.Role, t.Role) //nolint:errcheck // stderr: a warning; the token is the answer
	}
	e.stdout.println(tok)
	return nil
}

// personRoles are the roles a person holds, whose actions audit fields name.
var personRoles = map[string]bool{auth.RoleFinance: true, auth.RoleAuditor: true, auth.RoleAdmin: true}

func (s *simulateCmd) Run(e *env) error {
	secret, err := secretFor(s.AuthSecret, s.DataDir)
	if err != nil {
		return err
	}
	tok, err := auth.Issue(secret, auth.RoleFinance, "", printedTokenTTL)
	if err != nil {
		return err
	}
	return simulate.Run(e.ctx, simulate.Config{BaseURL: s.URL, Token: tok, Tick: s.Tick, Log: obs.NewLogger(e.stderr, s.LogLevel),
		Force: s.Force})
}

// secretFor reads the dev stack's signing key; it never creates one, so a
// token printed before the stack first started cannot silently mismatch.
func secretFor(configured, dataDir string) ([]byte, error) {
	if configured != "" {
		return []byte(configured), nil
	}
	if _, err := os.Stat(dataDir + "/auth.secret"); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no signing key in %s: start the stack once (make run) or set GPUBILL_AUTH_SECRET", dataDir)
	}
	return auth.LoadOrCreateSecret("", dataDir)
}

// querier is what ledger verify reads the ledger through.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// verifyReads wraps what ledger verify reads through: as is, but a test
// puts a writer between two of its statements with it.
var verifyReads = func(q querier) querier { return q }

func (v *verifyCmd) Run(e *env) error {
	pool, err := pg.OpenReadOnly(e.ctx, v.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := pg.RequireSchema(e.ctx, pool, "ledger"); err != nil {
		return err
	}
	// One REPEATABLE READ READ ONLY snapshot, as restore verifies: read
	// statement by statement through the pool, a transaction committed
	// between two of verify's reads (the walk of the chain, the count of
	// those not chained yet, the postings, the balances, the --head link,
	// the --audit-head record) was half seen, neither verified nor counted.
	var res ledger.VerifyResult
	var pos int64
	var hash, got string
	var pending bool
	var audit auditHead
	if err := pg.InSnapshot(e.ctx, pool, func(tx pgx.Tx) error {
		q := verifyReads(tx)
		var err error
		if pending, err = pg.IsRestorePending(e.ctx, tx); err != nil {
			return err
		}
		if res, err = ledger.VerifyChain(e.ctx, q); err != nil || !res.OK {
			return err
		}
		if v.Head != "" {
			if pos, hash, err = parseHead(v.Head); err != nil {
				return err
			}
			if got, err = ledger.ChainLinkHash(e.ctx, q, pos); err != nil {
				return err
			}
		}
		if v.AuditHead != "" {
			err = audit.read(e.ctx, q, v.AuditHead)
		}
		return err
	}); err != nil {
		return err
	}
	if err := broken(e.stdout, res); err != nil {
		return err
	}
	if v.Head != "" && got != hash {
		e.stdout.printf("BROKEN at chain position %d: its hash is %s, not %s (the chain was rewritten from there, or the head is not this journal's)\n", pos, got, hash)
		return errors.New("journal head does not match")
	}
	if v.AuditHead != "" {
		if err := audit.check(e.stdout, res.AuditHeadSeq); err != nil {
			return err
		}
	}
	e.stdout.printf("ok: %d transactions chained and verified, %d not chained yet, head %s\n", res.Checked, res.Unchained, res.HeadHash)
	e.stdout.printf("ok: %d audit records chained and verified, head %d:%s\n", res.AuditChecked, res.AuditHeadSeq, res.AuditHeadHash)
	if v.Head != "" {
		e.stdout.printf("ok: the link at %s\n", v.Head)
	}
	if v.AuditHead != "" {
		e.stdout.printf("ok: the audit record at %d:%s\n", audit.seq, audit.want)
	}
	// The chain of a restore's load verifies; the database is still not
	// one gpubill may run on.
	if pending {
		return fmt.Errorf("%w: %s", pg.ErrRestorePending, pg.RestorePendingRemedy)
	}
	return nil
}

// Run marks the checkpoints from --since stale, as the late-posting
// trigger marks those a late posting makes stale: the ledger's checkpoint
// step rebuilds them; until then every reader leaves them out.
func (c *checkpointsRebuildCmd) Run(e *env) error {
	pool, err := openFinishedLedger(e.ctx, pg.OpenExisting, c.DatabaseURL, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := ledger.MarkCheckpointsStale(e.ctx, pool, c.Since)
	if err != nil {
		return err
	}
	e.stdout.printf("marked %s at or after %s to rebuild: reports and ledger verify leave them out from now on, "+
		"and the ledger's next checkpoint step (every minute) rebuilds them from the postings\n",
		countOf(n, "balance checkpoint"), c.Since.UTC().Format(time.RFC3339Nano))
	return nil
}

// countOf is "1 what" or "n whats".
func countOf(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// broken prints what res found broken, and says so; nil when res is OK.
func broken(out *output, res ledger.VerifyResult) error {
	switch {
	case res.OK:
		return nil
	case res.BadBalance != "":
		out.printf("BROKEN balance %s: %s (%d links verified)\n", res.BadBalance, res.Reason, res.Checked)
		return errors.New("a balance is not the sum of its postings")
	case res.BadReportRecord != "":
		out.printf("BROKEN report record (%s): %s (%d links verified)\n", res.BadReportRecord, res.Reason, res.Checked)
		return errors.New("a record the segregated-funds report reads does not follow from the journal")
	case res.FirstBadAuditSeq != 0:
		out.printf("BROKEN audit record %d: %s (%d audit records verified before it)\n", res.FirstBadAuditSeq, res.Reason, res.AuditChecked)
		return errors.New("audit log hash chain broken")
	case res.FirstBadPosition == 0: // outside the chain's links: a reversal link, a transaction behind the head
		out.printf("BROKEN: transaction %s: %s (%d links verified)\n", res.FirstBadTransaction, res.Reason, res.Checked)
		return errors.New("journal hash chain broken")
	default:
		out.printf("BROKEN at chain position %d: transaction %s: %s (checked %d links before it)\n",
			res.FirstBadPosition, res.FirstBadTransaction, res.Reason, res.Checked)
		return errors.New("journal hash chain broken")
	}
}

// parseHead reads --head POSITION:HASH.
func parseHead(s string) (int64, string, error) {
	p, h, ok := strings.Cut(strings.TrimSpace(s), ":")
	pos, err := strconv.ParseInt(p, 10, 64)
	if !ok || err != nil || pos < 1 || len(h) != 64 {
		return 0, "", fmt.Errorf("--head %q: want POSITION:HASH (a report's journal_head_position, 1 or more, and its 64 hex digit journal_head_hash)", s)
	}
	return pos, strings.ToLower(h), nil
}

// auditHead is ledger verify --audit-head SEQ:HASH: the audit record at
// seq, which must still hold the hash want.
type auditHead struct {
	seq   int64
	want  string
	got   string // the record's hash, when found
	found bool
}

// read parses s (SEQ:HASH) and reads the record it names through q.
func (a *auditHead) read(ctx context.Context, q querier, s string) error {
	p, h, ok := strings.Cut(strings.TrimSpace(s), ":")
	seq, err := strconv.ParseInt(p, 10, 64)
	if _, herr := hex.DecodeString(h); !ok || err != nil || seq < 1 || len(h) != 64 || herr != nil {
		return fmt.Errorf("--audit-head %q: want SEQ:HASH (the audit head ledger verify printed: a seq, 1 or more, and its 64 hex digit hash)", s)
	}
	a.seq, a.want = seq, strings.ToLower(h)
	a.got, a.found, err = ledger.AuditRecordHash(ctx, q, a.seq)
	return err
}

// check says BROKEN, naming the seq, when the record holds another hash
// or none (the log's chain ends at last).
func (a *auditHead) check(out *output, last int64) error {
	switch {
	case !a.found:
		out.printf("BROKEN audit record %d: no record holds it, the log ends at %d (its newest records were deleted, or the head is not this log's)\n",
			a.seq, last)
	case a.got != a.want:
		out.printf("BROKEN audit record %d: its hash is %s, not %s (the log was rewritten up to it, or the head is not this log's)\n",
			a.seq, a.got, a.want)
	default:
		return nil
	}
	return errors.New("audit head does not match")
}

// openFinishedLedger opens the database at dsn with open (never creating
// it) and refuses one without the ledger's schema or whose restore did not
// finish: its figures would read as a ready ledger's (the services refuse
// to start on it; so does ledger verify).
func openFinishedLedger(ctx context.Context, open func(context.Context, string, int32) (*pgxpool.Pool, error), dsn string, conns int32) (*pgxpool.Pool, error) {
	pool, err := open(ctx, dsn, conns)
	if err != nil {
		return nil, err
	}
	if err := pg.RequireSchema(ctx, pool, "ledger"); err != nil {
		pool.Close()
		return nil, err
	}
	if err := pg.RestoreFinished(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func (c *segregatedFundsCmd) Run(e *env) error {
	pool, err := openFinishedLedger(e.ctx, pg.OpenReadOnly, c.DatabaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	var asOf *time.Time
	if !c.AsOf.IsZero() {
		asOf = &c.AsOf
	}
	bar := newProgress(e.stderr)
	defer bar.finish()
	b, err := ledger.ExportSegregatedFunds(e.ctx, pool, asOf, c.Currency, c.Format, bar.lines)
	if errors.As(err, new(*apperr.InvalidError)) {
		return cmdline.UsageError{Err: err} // an unknown currency, an as-of ahead of now
	}
	if err != nil {
		return err
	}
	bar.finish()
	if c.Output == "-" {
		_, err := e.stdout.Write(b)
		return err
	}
	if err := writeWhole(c.Output, b, c.Force); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "wrote %s (%d bytes)\n", c.Output, len(b)) //nolint:errcheck // a note on stderr; the report is written
	return nil
}

// writeWhole writes b to path whole or not at all: into a new file of its
// own beside it (readable by its owner only: client balances), flushed to
// disk, then linked to path, which must not exist unless force (then
// renamed over it), and the directory flushed. A report already at path (a
// signed year-end one) was replaced without a word, two runs shared one
// ".partial" file, and a crash could leave an empty file under path.
func writeWhole(path string, b []byte, force bool) (err error) {
	if _, err := os.Lstat(path); err == nil && !force {
		return fmt.Errorf("%s exists: it is not replaced (--force replaces it)", path)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".partial-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}()
	if _, err := f.Write(b); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Sync(); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Close(); err != nil {
		return err
	}
	if force {
		err = os.Rename(tmp, path)
	} else if err = os.Link(tmp, path); errors.Is(err, os.ErrExist) {
		err = fmt.Errorf("%s exists: it is not replaced (--force replaces it)", path)
	}
	if err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

func (b *backupCmd) Run(e *env) error {
	m, err := backup.Take(e.ctx, b.DatabaseURL, b.Output, backup.Tools{BinDir: b.PGBin}, time.Now())
	if err != nil {
		return err
	}
	e.stdout.printf("backup of %s at %s in %s\n", m.Database, m.CreatedAt.Format(time.RFC3339), b.Output)
	printFigures(e.stdout, m.Ledger)
	return nil
}

func (r *restoreCmd) Run(e *env) error {
	res, err := backup.Restore(e.ctx, r.DatabaseURL, r.Dir, backup.Tools{BinDir: r.PGBin})
	if err != nil {
		return err
	}
	e.stdout.printf("restored the backup of %s taken at %s; verified against its manifest\n",
		res.Manifest.Database, res.Manifest.CreatedAt.Format(time.RFC3339))
	printFigures(e.stdout, res.Restored)
	e.stdout.printf("  ledger verify: ok, %d transactions chained and verified\n", res.Chain.Checked)
	var requeued int64
	for _, n := range res.Requeued {
		requeued += n
	}
	e.stdout.printf("  %d published messages back in their outboxes, %d payouts to restart, %d transaction ids consumed\n",
		requeued, res.PayoutsRestarted, res.XidsAdvanced)
	e.stdout.printf("  restore epoch %s (%s): ETags and event ids issued from now on differ from those issued before\n",
		res.Epoch, strings.Join(res.EpochSchemas, ", "))
	printBankFilesHeld(e.stdout, res)
	return nil
}

// printBankFilesHeld says what finance does before bank payouts go out again.
func printBankFilesHeld(w *output, res *backup.Result) {
	if res.BankFilesHeld {
		w.println("  bank-file rail held: no payment file is cut or delivered until finance has imported the bank's files " +
			"since the recovery point and released it (POST /v1/bank-files:release-restore-hold)")
	}
}

// errServicesNotStopped: after-recovery runs only once the operator says
// every service is stopped. The outbox relays' locks it checks besides show
// a service that runs and relays, not one that is starting or whose relay
// is between two attempts (NATS down: it lets its lock go for a moment).
var errServicesNotStopped = errors.New("stop every gpubill service on the database (scale its Deployments to 0), " +
	"then run gpubill after-recovery --services-stopped, then start them (with a new JetStream store and Temporal)")

func (r *afterRecoveryCmd) Run(e *env) error {
	if !r.ServicesStopped {
		return cmdline.UsageError{Err: errServicesNotStopped}
	}
	res, err := backup.AfterRecovery(e.ctx, r.DatabaseURL)
	if err != nil {
		return err
	}
	e.stdout.printf("readied the recovered database %s; no manifest to compare against (it was not loaded by gpubill restore): "+
		"the figures below are checked by ledger verify only, not against a backup's\n", res.Database)
	printFigures(e.stdout, res.Restored)
	e.stdout.printf("  ledger verify: ok, %d transactions chained and verified, %d not chained yet\n", res.Chain.Checked, res.Chain.Unchained)
	var requeued int64
	for _, n := range res.Requeued {
		requeued += n
	}
	e.stdout.printf("  %d published messages back in their outboxes, %d payouts to restart\n", requeued, res.PayoutsRestarted)
	e.stdout.printf("  restore epoch %s (%s): ETags and event ids issued from now on differ from those issued before\n",
		res.Epoch, strings.Join(res.EpochSchemas, ", "))
	printBankFilesHeld(e.stdout, res)
	e.stdout.println("start gpubill on it with a new JetStream store and a new Temporal")
	return nil
}

func printFigures(w *output, f ledger.Figures) {
	w.printf("  journal head %s (position %d), %d transactions, %d postings\n", f.HeadHash, f.HeadPosition, f.Transactions, f.Postings)
	for _, c := range f.Currencies {
		w.printf("  %s: %d accounts, debits %s, credits %s, bank:client %s\n", c.Currency, c.Accounts, c.Debits, c.Credits, c.BankClient)
	}
	w.printf("  balances sha256 %s\n", f.BalancesSHA256)
}

func (versionCmd) Run(e *env) error {
	_, err := fmt.Fprint(e.stdout, cmdline.Build().Text(name))
	return err
}

// completionScripts hand completion to this binary (`complete -C`): the
// shell runs it with COMP_LINE set and kongplete answers from the grammar,
// so the script never goes stale when a command is added.
var completionScripts = map[string]string{
	"bash": "complete -o default -C %[1]s %[2]s\n",
	"zsh":  "autoload -U +X bashcompinit && bashcompinit\ncomplete -o default -C %[1]s %[2]s\n",
}

func (c *completionCmd) Run(e *env) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("locate this binary for the completion script: %w", err)
	}
	quoted := "'" + strings.ReplaceAll(bin, "'", `'\''`) + "'" // a shell word whatever the path holds
	_, err = fmt.Fprintf(e.stdout, completionScripts[c.Shell], quoted, name)
	return err
}
