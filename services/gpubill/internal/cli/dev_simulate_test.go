package cli_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/testkit"
	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
)

// runDev runs gpubill dev with args on dsn until it exits (its code) or is
// up and until(dsn) holds, then stops it (-1: it came up).
func runDev(t *testing.T, dsn, temporal string, until func() bool, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- cli.Main(ctx, append([]string{"dev", "--database-url", dsn, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
			"--data-dir", t.TempDir(), "--temporal-address", temporal, "--backup-every", "0"}, args...), &out, &errOut)
	}()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case code := <-exited:
			return code, out.String(), errOut.String()
		case <-deadline:
			cancel()
			<-exited
			t.Fatalf("gpubill dev %v neither exited nor came up in 3 min: %q %q", args, out.String(), errOut.String())
		case <-time.After(100 * time.Millisecond):
			if strings.Contains(out.String(), "gpubill dev is up") && until() {
				cancel()
				if code := <-exited; code != 0 {
					t.Fatalf("gpubill dev %v stopped: exit %d; want 0: %q", args, code, errOut.String())
				}
				return -1, out.String(), errOut.String()
			}
		}
	}
}

func execSQL(t *testing.T, dsn, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatal(err)
	}
}

func countSQL(t *testing.T, dsn, sql string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDevSimulateRefusesADatabaseItDidNotFill: gpubill dev --simulate on
// a production DATABASE_URL ran the whole stack on it and booked the
// simulation's deposits, no money behind them, among its clients'. It now
// exits 1, before anything starts, on a database holding a party or a
// party's ledger account the simulation did not create, naming them,
// unless --force. make run (dev --simulate) on a fresh machine (no
// database yet) and again on the database it filled still comes up.
func TestDevSimulateRefusesADatabaseItDidNotFill(t *testing.T) {
	temporal := testkit.NewTemporal(t)
	dsn := testkit.NewDatabase(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	base := *u
	base.Path = "/postgres"
	execSQL(t, base.String(), "drop database "+strings.TrimPrefix(u.Path, "/")) // a fresh machine: created by dev

	seeded := func() bool {
		return countSQL(t, dsn, `select count(*) from ledger.accounts where address like 'renter:%:wallet'`) >= 3 &&
			countSQL(t, dsn, `select count(*) from metering.providers`) == 4
	}
	if code, _, errOut := runDev(t, dsn, temporal, seeded, "--simulate"); code != -1 {
		t.Fatalf("make run on a fresh machine: exit %d, %q; want it up, the marketplace seeded", code, errOut)
	}
	always := func() bool { return true }
	if code, _, errOut := runDev(t, dsn, temporal, always, "--simulate"); code != -1 {
		t.Fatalf("make run again on its own database: exit %d, %q; want it up", code, errOut)
	}

	execSQL(t, dsn, `insert into metering.providers (provider_id, name, tier, tax_profile, jurisdiction, currency, version, created_at, updated_at)
		values ('p-prod-1', 'A real provider', 'standard', 'individual', 'CN', 'CNY', 1, now(), now())`)
	code, out, errOut := runDev(t, dsn, temporal, always, "--simulate")
	if code != 1 || !strings.Contains(errOut, "parties or ledger history the simulation did not create") || !strings.Contains(errOut, "providers p-prod-1") ||
		!strings.Contains(errOut, "--force") || strings.Contains(out, "gpubill dev is up") {
		t.Fatalf("dev --simulate on a database holding a provider it did not create: exit %d, %q %q; want 1 before anything started, "+
			"naming p-prod-1 and --force", code, out, errOut)
	}
	if code, _, errOut := runDev(t, dsn, temporal, always, "--simulate", "--force"); code != -1 {
		t.Fatalf("dev --simulate --force: exit %d, %q; want it up", code, errOut)
	}

	// The ledger alone on its database: a party's accounts are its history.
	ledgerOnly := testkit.NewDatabase(t)
	pool, err := pg.Open(context.Background(), ledgerOnly, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pg.Migrate(context.Background(), pool, "ledger", migrations.For("ledger")); err != nil {
		t.Fatal(err)
	}
	execSQL(t, ledgerOnly, `insert into ledger.accounts (address, class, kind, fund_pool) values ('renter:r-prod-7:wallet', 'renter_wallet', 'liability', 'client')`)
	code, out, errOut = runDev(t, ledgerOnly, temporal, always, "--simulate")
	if code != 1 || !strings.Contains(errOut, "ledger accounts renter:r-prod-7:wallet") || strings.Contains(out, "gpubill dev is up") {
		t.Fatalf("dev --simulate on a ledger database with a renter it did not create: exit %d, %q %q; want 1, naming renter:r-prod-7:wallet",
			code, out, errOut)
	}
	if n := countSQL(t, ledgerOnly, `select count(*) from information_schema.schemata where schema_name = 'metering'`); n != 0 {
		t.Fatalf("dev --simulate refused: the metering schema was created (%d); want nothing started on the database", n)
	}
}
