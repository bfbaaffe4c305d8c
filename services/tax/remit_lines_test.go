package tax

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/auth"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
)

// RemitTax without summary_only answered every line of the report in one
// answer (~60 B a provider, past gRPC's 4 MiB and the gateway's limits at a
// marketplace's size): it answers one page (500) and where the rest is read
// (GET /v1/tax-remittances/{id}/lines), and counts the lines without
// building them. 499 CN providers and 2 in US: the page ends inside US's
// remittance, read on from there by the lines route.
func TestRemitTaxAnswersOnePageOfLines(t *testing.T) {
	t.Parallel()
	s, _, clk := newTax(t)
	const cn, linesMax = 499, 500
	want := map[string]string{} // provider → tax
	// The CN providers' withholdings inserted as ComputeWithholding records
	// them (one at a time through the API took 40 s), settled in the ledger.
	if _, err := s.d.Pool.Exec(context.Background(), `insert into tax.withholdings (withholding_id, idempotency_key, provider_id,
			cycle_id, currency, gross, commission_rate, commission, taxable_base, tax_withheld, net, tax_profile, jurisdiction,
			rule_set, rule_version, certificate_id, created_at)
		select 'wh-' || p, 'k-' || p, p, 'cyc-20260101', 'CNY', 1000.00, 0.25, 250.00, 750.00, 150.00, 600.00, 'individual', 'CN',
			'flat20', '1', 'cert-' || p, $2
		from (select 'p-' || lpad(i::text, 4, '0') as p from generate_series(0, $1 - 1) i) g`, cn, clk.Now()); err != nil {
		t.Fatal(err)
	}
	for i := range cn {
		p := fmt.Sprintf("p-%04d", i)
		s.d.Internal.(*ledgerConn).settle("k-"+p, "CN", "CNY", "150.00")
		want[p] = "150.00"
	}
	for _, p := range []string{"p-us-1", "p-us-2"} {
		known(t, s, p, "individual", "US", 1)
		want[p] = compute(t, s, p, "1000.00", "0.20", "", "k-"+p).TaxWithheld
	}
	clk.Set(time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC))
	resp := remitted(t, s, "2026-02")
	if len(resp.Lines) > linesMax || resp.LineCount != cn+2 {
		t.Fatalf("answered %d lines (line_count %d); want at most %d of %d", len(resp.Lines), resp.LineCount, linesMax, cn+2)
	}
	if resp.LinesNextRemittanceId != "rem-2026-02-US-CNY" || resp.LinesNextPageToken == "" {
		t.Fatalf("next lines at %q token %q; want rem-2026-02-US-CNY after p-us-1", resp.LinesNextRemittanceId, resp.LinesNextPageToken)
	}
	lines := resp.Lines
	rest, err := s.api.ListRemittanceLines(as(auth.RoleFinance, ""), &taxv1.ListRemittanceLinesRequest{
		RemittanceId: resp.LinesNextRemittanceId, PageToken: resp.LinesNextPageToken})
	if err != nil {
		t.Fatal(err)
	}
	lines = append(lines, rest.Lines...)
	sums := map[string]decimal.Decimal{}
	for _, l := range lines {
		if w, ok := want[l.ProviderId]; !ok || w != l.TaxWithheld {
			t.Errorf("line %v: want %q for %s (or no line)", l, w, l.ProviderId)
		}
		delete(want, l.ProviderId)
		sums[l.RemittanceId] = sums[l.RemittanceId].Add(decimal.RequireFromString(l.TaxWithheld))
	}
	if len(want) != 0 {
		t.Errorf("no line read for %v", want)
	}
	for _, r := range resp.Remittances {
		if !sums[r.RemittanceId].Equal(decimal.RequireFromString(r.Amount)) {
			t.Errorf("%s: lines add up to %s, want %s", r.RemittanceId, sums[r.RemittanceId], r.Amount)
		}
	}
}
