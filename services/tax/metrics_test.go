package tax

import (
	"context"
	"testing"

	"github.com/gpubill/gpubill/migrations"
	"github.com/gpubill/gpubill/pkg/testkit"
)

// A remittance not posted and tax withheld in no remittance are on
// /metrics by age: a run the ledger refused, or one that never ran, showed
// in the Temporal UI only.
func TestRemittanceAges(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "tax", migrations.For("tax"))
	ctx := context.Background()
	metric := func(name string) float64 { t.Helper(); return testkit.SQLMetric(t, pool, Metrics(), name) }
	for _, q := range []string{
		`insert into tax.withholdings (withholding_id, idempotency_key, provider_id, cycle_id, currency, gross, commission, taxable_base,
			tax_withheld, net, tax_profile, jurisdiction, rule_set, rule_version, certificate_id, settlement_tx_id, created_at) values
			('wh-1', 'k-1', 'p-1', 'cyc-20260101', 'CNY', 100, 25, 75, 15, 60, 'individual', 'CN', 'flat20', '1', 'c-1', 'tx-1', now() - interval '40 days'),
			('wh-2', 'k-2', 'p-2', 'cyc-20260101', 'CNY', 100, 25, 75, 15, 60, 'individual', 'CN', 'flat20', '1', 'c-2', null, now() - interval '90 days')`,
		`insert into tax.remittances (remittance_id, period, jurisdiction, currency, amount, status, created_at)
			values ('rem-2026-01-CN-CNY', '2026-01', 'CN', 'CNY', 15, 'pending', now() - interval '2 days')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// wh-2's settlement was never found posted (no run looked it up, or
	// the ledger refused it): it counts too, a run that never came found
	// nothing posted.
	for name, days := range map[string]float64{"gpubill_tax_unremitted_age_seconds": 90, "gpubill_tax_remittance_pending_age_seconds": 2} {
		if v := metric(name); v < days*86400 || v > days*86400+600 {
			t.Errorf("%s: %v, want about %v days", name, v, days)
		}
	}
}

// A remittance reversed in the ledger and not remitted again (no other of
// its period, jurisdiction and currency remitted: none planned, or one
// pending) is on /metrics, counted and by the age since it was found
// reversed: tax owed to the authority, unpaid, with no alert.
func TestReversedRemittanceNotRemittedAgain(t *testing.T) {
	t.Parallel()
	pool := testkit.NewMigratedPool(t, "tax", migrations.For("tax"))
	ctx := context.Background()
	metric := func(name string) float64 { t.Helper(); return testkit.SQLMetric(t, pool, Metrics(), name) }
	// January's reversal is remitted again (-2 remitted): not counted.
	// February's waits for a plan, March's -2 is pending (the ledger
	// refused it).
	if _, err := pool.Exec(ctx, `insert into tax.remittances (remittance_id, period, jurisdiction, currency, amount, status, transaction_id,
			reversed_by, reversed_at, created_at) values
		('rem-2026-01-CN-CNY', '2026-01', 'CN', 'CNY', 15, 'reversed', 'tx-1', 'tx-r1', now() - interval '9 hours', now() - interval '40 days'),
		('rem-2026-01-CN-CNY-2', '2026-01', 'CN', 'CNY', 15, 'remitted', 'tx-2', '', null, now() - interval '9 hours'),
		('rem-2026-02-CN-CNY', '2026-02', 'CN', 'CNY', 15, 'reversed', 'tx-3', 'tx-r3', now() - interval '3 hours', now() - interval '10 days'),
		('rem-2026-03-CN-CNY', '2026-03', 'CN', 'CNY', 15, 'reversed', 'tx-4', 'tx-r4', now() - interval '1 hour', now() - interval '2 days'),
		('rem-2026-03-CN-CNY-2', '2026-03', 'CN', 'CNY', 15, 'pending', '', '', null, now() - interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	if v := metric("gpubill_tax_remittances_reversed_unremitted"); v != 2 {
		t.Errorf("gpubill_tax_remittances_reversed_unremitted: %v, want 2 (February's, March's)", v)
	}
	if v := metric("gpubill_tax_remittance_reversed_age_seconds"); v < 3*3600 || v > 3*3600+600 {
		t.Errorf("gpubill_tax_remittance_reversed_age_seconds: %v, want about 3 hours (February's)", v)
	}
}
