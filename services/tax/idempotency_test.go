package tax

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/gpubill/gpubill/pkg/auth"
	taxv1 "github.com/gpubill/gpubill/proto/gen/gpubill/tax/v1"
)

// A withholding's idempotency key replays the recorded withholding for the
// same request and is a conflict (409) for any other, as every idempotent
// write answers; a field the replay leaves to the provider's defaults matches.
func TestWithholdingKeyReplaysOrConflicts(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t)
	base := func() *taxv1.ComputeWithholdingRequest {
		return &taxv1.ComputeWithholdingRequest{ProviderId: "p-1", CycleId: "cyc-20260101", Currency: "CNY", Gross: "1000.00",
			CommissionRate: "0.20", TaxProfile: "individual", Jurisdiction: "CN", IdempotencyKey: "k1"}
	}
	first, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), base())
	if err != nil {
		t.Fatal(err)
	}
	if first.TaxWithheld != "160.00" {
		t.Fatalf("first withholding %v, want tax 160.00", first)
	}
	omitted := base()
	omitted.TaxProfile, omitted.Jurisdiction = "", ""
	// The split reads the rate with blanks round it taken off; the replay
	// read it as written and answered a byte-identical request 409.
	padded := base()
	padded.CommissionRate, padded.IdempotencyKey = " 0.20", "k-padded"
	p1, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), padded)
	if err != nil {
		t.Fatal(err)
	}
	if p2, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), padded); err != nil || p2.WithholdingId != p1.WithholdingId {
		t.Errorf("a rate with a blank, the same request again: %v, %v; want the original %s", p2, err, p1.WithholdingId)
	}
	for name, req := range map[string]*taxv1.ComputeWithholdingRequest{"same body": base(), "defaults left empty": omitted} {
		got, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), req)
		if err != nil || got.WithholdingId != first.WithholdingId || got.TaxWithheld != first.TaxWithheld {
			t.Errorf("%s: %v, %v; want the original %s", name, got, err, first.WithholdingId)
		}
	}
	for name, change := range map[string]func(*taxv1.ComputeWithholdingRequest){
		"gross":           func(r *taxv1.ComputeWithholdingRequest) { r.Gross = "2000.00" },
		"commission rate": func(r *taxv1.ComputeWithholdingRequest) { r.CommissionRate = "0.25" },
		"commission":      func(r *taxv1.ComputeWithholdingRequest) { r.CommissionRate, r.Commission = "", "200.00" },
		"provider":        func(r *taxv1.ComputeWithholdingRequest) { r.ProviderId = "p-2" },
		"cycle":           func(r *taxv1.ComputeWithholdingRequest) { r.CycleId = "cyc-20260215" },
		"currency":        func(r *taxv1.ComputeWithholdingRequest) { r.Currency = "USD" },
		"tax profile":     func(r *taxv1.ComputeWithholdingRequest) { r.TaxProfile = "enterprise" },
		"jurisdiction":    func(r *taxv1.ComputeWithholdingRequest) { r.Jurisdiction = "US" },
		"rule set":        func(r *taxv1.ComputeWithholdingRequest) { r.RuleSet = "cn_labour" },
	} {
		req := base()
		change(req)
		if got, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), req); code(err) != codes.Aborted {
			t.Errorf("same key, different %s: %v, %v; want a conflict (409)", name, got, err)
		}
	}
}

// A replay is compared with the recorded withholding under the bounds a
// first request is parsed under (money.ParseDecimal: at most 64 characters,
// an exponent of at most 64): read with Currency.ParseAmount, unbounded, a
// gross of 77 characters a new key refuses was answered the record.
// Records stay replayable whatever their scale, and one recorded before
// amounts were bounded (more than 18 digits before the point) is answered,
// not called another request.
func TestWithholdingReplayReadsAmountsBounded(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t)
	req := func(key, gross, commission string) *taxv1.ComputeWithholdingRequest {
		return &taxv1.ComputeWithholdingRequest{ProviderId: "p-1", CycleId: "cyc-20260101", Currency: "CNY", Gross: gross,
			Commission: commission, TaxProfile: "individual", Jurisdiction: "CN", IdempotencyKey: key}
	}
	first, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), req("k1", "1000.00", "200.00"))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("0", 70) + "1000.00"
	if _, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), req("k-new", long, "200.00")); code(err) != codes.InvalidArgument {
		t.Fatalf("a gross of %d characters under a new key: %v, want InvalidArgument", len(long), err)
	}
	for _, tt := range []struct {
		give, gross, commission string
		want                    codes.Code
	}{
		{"the same amounts", "1000.00", "200.00", codes.OK},
		{"more decimals", "1000.000", "200.0000", codes.OK},
		{"an exponent", "1e3", "2E2", codes.OK},
		{"blanks round them", " 1000 ", " 200.0 ", codes.OK},
		{"a gross of 77 characters", long, "200.00", codes.Aborted},
		{"a commission of 77 characters", "1000.00", strings.Repeat("0", 70) + "200.00", codes.Aborted},
		{"a gross with an exponent past 64", "1e65", "200.00", codes.Aborted},
		{"another gross", "1000.01", "200.00", codes.Aborted},
	} {
		got, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), req("k1", tt.gross, tt.commission))
		if code(err) != tt.want || tt.want == codes.OK && got.WithholdingId != first.WithholdingId {
			t.Errorf("replay with %s: %v, %v; want %v", tt.give, got, err, tt.want)
		}
	}
	// Recorded before amounts were bounded, at the text's scale: 10^20
	// yuan, with three decimals.
	legacy, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), req("k-legacy", "500.00", "100.00"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.d.Pool.Exec(context.Background(), `update tax.withholdings set gross = 100000000000000000000.000,
		commission = 20000000000000000000.000, taxable_base = 80000000000000000000.000, tax_withheld = 16000000000000000000.000,
		net = 64000000000000000000.000 where idempotency_key = 'k-legacy'`); err != nil {
		t.Fatal(err)
	}
	got, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), req("k-legacy", "100000000000000000000.00", "20000000000000000000.00"))
	if err != nil || got.WithholdingId != legacy.WithholdingId || got.TaxWithheld != "16000000000000000000.00" {
		t.Errorf("replay of a withholding recorded before amounts were bounded: %v, %v; want the record %s", got, err, legacy.WithholdingId)
	}
}

// Requests that arrive together with one key (a provider workflow's retry
// racing its first attempt), each its own insert, possibly in one shared
// batch: one withholding is recorded and every request answers it; requests
// with other keys beside them record their own.
func TestWithholdingKeyTakenConcurrentlyAnswersTheOriginal(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t)
	req := func(key string) *taxv1.ComputeWithholdingRequest {
		return &taxv1.ComputeWithholdingRequest{ProviderId: "p-1", CycleId: "cyc-20260101", Currency: "CNY", Gross: "1000.00",
			CommissionRate: "0.20", TaxProfile: "individual", Jurisdiction: "CN", IdempotencyKey: key}
	}
	const n = 12
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "same"
			if i%3 == 0 {
				key = fmt.Sprintf("own-%d", i)
			}
			got, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), req(key))
			ids[i], errs[i] = got.GetWithholdingId(), err
		}()
	}
	wg.Wait()
	var same string
	for i := range n {
		if errs[i] != nil || ids[i] == "" {
			t.Fatalf("request %d: %q, %v", i, ids[i], errs[i])
		}
		if i%3 == 0 {
			continue
		}
		if same == "" {
			same = ids[i]
		}
		if ids[i] != same {
			t.Fatalf("requests with one key answered %s and %s", same, ids[i])
		}
	}
	var rows, distinct int
	if err := s.d.Pool.QueryRow(context.Background(), `select count(*) filter (where idempotency_key = 'same'), count(distinct withholding_id)
		from tax.withholdings`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != 1 || distinct != 5 {
		t.Fatalf("%d withholdings under the shared key and %d in all, want 1 and 5", rows, distinct)
	}
}

// A provider recorded before metering checked the id grammar may carry a
// jurisdiction no ledger address can hold ("CN BEIJING"): its withholding is
// refused with a FailedPrecondition naming the jurisdiction (not posted and
// left to fail at the ledger), and goes through once the provider is
// corrected; a request naming such a jurisdiction is a 400 naming the field.
func TestWithholdingRefusesJurisdictionOutsideTheGrammar(t *testing.T) {
	t.Parallel()
	s, _, _ := newTax(t)
	ctx := context.Background()
	setJurisdiction := func(j string, version int) {
		if _, err := s.d.Pool.Exec(ctx, `insert into tax.profiles (provider_id, tax_profile, jurisdiction, version, updated_at)
			values ('p-old', 'individual', $1, $2, now()) on conflict (provider_id) do update
			set jurisdiction = excluded.jurisdiction, version = excluded.version`, j, version); err != nil {
			t.Fatal(err)
		}
	}
	setJurisdiction("CN BEIJING", 1)
	req := &taxv1.ComputeWithholdingRequest{ProviderId: "p-old", CycleId: "cyc-20260101", Currency: "CNY", Gross: "100.00",
		CommissionRate: "0.20", IdempotencyKey: "k-old"}
	_, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), req)
	if code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "CN BEIJING") {
		t.Fatalf("withholding with jurisdiction CN BEIJING: %v, want FailedPrecondition naming it", err)
	}
	setJurisdiction("CN-BJ", 2)
	if got, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), req); err != nil || got.Jurisdiction != "CN-BJ" {
		t.Fatalf("after the correction: %v, %v; want CN-BJ", got, err)
	}
	bad := &taxv1.ComputeWithholdingRequest{ProviderId: "p-1", CycleId: "cyc-20260101", Currency: "CNY", Gross: "100.00",
		CommissionRate: "0.20", Jurisdiction: "CN Beijing", IdempotencyKey: "k-bad"}
	if _, err := s.api.ComputeWithholding(as(auth.RoleAdmin, ""), bad); code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "jurisdiction") {
		t.Fatalf("request naming CN Beijing: %v, want InvalidArgument on jurisdiction", err)
	}
}
