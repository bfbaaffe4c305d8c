package ports

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/money"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// The hand-written JSON of the report is the protojson of its proto, field
// for field: same names, every field emitted, the same strings (escapes
// included), timestamps and int64 text; and protojson reads it back into
// the very same message.
func TestReportJSONIsProtojson(t *testing.T) {
	usd, err := money.Lookup("USD")
	if err != nil {
		t.Fatal(err)
	}
	d := decimal.RequireFromString
	bank := d("1000.5")
	for name, rep := range map[string]*app.SegregatedFundsReport{
		"empty": {AsOf: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Currency: usd, Verdict: app.VerdictBalanced},
		"full": {
			AsOf: time.Date(2026, 11, 30, 23, 59, 59, 120_000_000, time.UTC), Currency: usd,
			Requirement: d("123.456"), TaxWithheld: d("-7.1"), Resource: d("99999999999999999999.99"),
			BankStatementBalance: &bank, Difference: d("-0.005"), LedgerDifference: d("0"), Verdict: app.VerdictShortfall,
			JournalHeadHash: "ab12", JournalHeadPosition: 1 << 40,
			Statements: []app.StoredStatement{{BankStatement: domain.BankStatement{ID: "st-\"1\"\\<é>", Account: "GB00 1234",
				ClosingAt: time.Date(2026, 11, 30, 0, 0, 0, 1000, time.FixedZone("x", 3600)), Closing: d("1000.5")}},
				{BankStatement: domain.BankStatement{ID: "st-2", Account: "tab\there\nnl\x01\x1f\u2028", ClosingAt: time.Date(2026, 11, 29, 1, 2, 3, 999_999_999, time.UTC)}}},
			Breaches: []domain.RecordedBreach{{TransactionID: "0190-aa", Breach: domain.Breach{Account: "bank:operating", FromPool: domain.PoolClient,
				ToPool: domain.PoolHouse, Amount: d("3.3"), Currency: "USD", Reason: "crosses \"pools\""}, EffectiveAt: time.Date(2026, 11, 2, 3, 4, 5, 600_000, time.UTC)}},
			Lines: []app.ReportLine{{Section: "requirement", Account: "renter:*:wallet", Description: "2 renter wallets in credit", Amount: d("12.5")},
				{Section: "memo", Account: "renter:*:wallet", Description: "in debit", Amount: d("-1")}},
			Clients: []app.ClientLine{
				{Kind: app.ClientRenter, ID: "r-1", Wallet: d("12.5")},
				{Kind: app.ClientRenter, ID: "r-2", Wallet: d("0.004")},
				{Kind: app.ClientProvider, ID: "p-1", Pending: d("1"), Available: d("0"), InTransit: d("2.345")},
				{Kind: app.ClientProvider, ID: "p-2", Pending: d("-1.5"), Available: d("1000000"), InTransit: d("0.01")},
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var calls []string
			got, err := reportJSON(rep, func(done, total int) { calls = append(calls, fmt.Sprint(done, "/", total)) })
			if err != nil {
				t.Fatal(err)
			}
			pb := ReportProto(rep)
			want, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(pb)
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, got)
			}
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("hand-written JSON\n%s\nprotojson\n%s", got, want)
			}
			back := &ledgerv1.SegregatedFundsReport{}
			if err := protojson.Unmarshal(got, back); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(back, pb) {
				t.Fatalf("protojson reads back\n%v\nwant\n%v", back, pb)
			}
			if n := len(rep.Clients); len(calls) == 0 || calls[len(calls)-1] != fmt.Sprint(n, "/", n) {
				t.Fatalf("progress calls %v, want the last %d/%d", calls, n, n)
			}
		})
	}
	t.Run("invalid UTF-8 refused, as protojson refuses it", func(t *testing.T) {
		rep := &app.SegregatedFundsReport{Currency: usd, Statements: []app.StoredStatement{{BankStatement: domain.BankStatement{ID: "st-\xff"}}}}
		if _, err := reportJSON(rep, func(int, int) {}); err == nil {
			t.Fatal("invalid UTF-8 written")
		}
	})
}
