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
