package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// preparedStore answers Prepare with one pending CNY gross and the rate
// snapshotted with it.
type preparedStore struct {
	Store
	gross decimal.Decimal
}

func (s preparedStore) Prepare(context.Context, string, string) (bool, string, decimal.NullDecimal, time.Time, []domain.PreparedItem, error) {
	rate := decimal.NullDecimal{Decimal: decimal.RequireFromString("0.30"), Valid: true}
	return false, "standard", rate, t0, []domain.PreparedItem{{Currency: "CNY", Gross: s.gross, Status: domain.ItemPending}}, nil
}

// answeringTax answers every withholding with split.
type answeringTax struct {
	Tax
	split domain.Split
}

func (a answeringTax) ComputeWithholding(context.Context, TaxInput) (TaxResult, error) {
	return TaxResult{Split: a.split, RuleSet: "flat20", RuleVersion: "1", WithholdingID: "wh-1"}, nil
}

// countingLedger counts the transactions settlement asks it to post and
// refuses each, so a settlement that gets that far stops there.
type countingLedger struct {
	Ledger
	posts int
}

func (l *countingLedger) CreateTransaction(_ context.Context, tx LedgerTx) (string, error) {
	l.posts++
	return "", Rejected(fmt.Errorf("test ledger: %s reached the ledger", tx.Key))
}

// A tax service answering a split that does not hold (a negative part the
// others make up for, or parts a cent over gross) fails the provider's
// settlement for good (Rejected: retrying gets the same answer) before
// anything is posted: the ledger is never asked.
func TestSettleProviderRefusesABrokenTaxSplit(t *testing.T) {
	gross := decimal.RequireFromString("10.00")
	split := func(commission, tax, net string) domain.Split {
		return domain.Split{Currency: "CNY", Gross: gross, CommissionRate: decimal.RequireFromString("0.30"),
			Commission: decimal.RequireFromString(commission), Tax: decimal.RequireFromString(tax),
			Net: decimal.RequireFromString(net), Jurisdiction: "CN"}
	}
	for _, tt := range []struct {
		name    string
		give    domain.Split
		wantErr string
	}{
		{"negative tax", split("3.00", "-1.00", "8.00"), "negative part"},
		{"parts make 10.01", split("3.00", "1.40", "5.61"), "3 + 1.4 + 5.61 != gross 10 CNY"},
	} {
		l := &countingLedger{}
		s := &Steps{Store: preparedStore{gross: gross}, Ledger: l, Tax: answeringTax{split: tt.give}}
		_, err := s.SettleProvider(context.Background(), ProviderInput{CycleID: "cyc-20261112", ProviderID: "p-1"})
		if err == nil || !IsRejected(err) || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: %v, want a rejection naming %q", tt.name, err, tt.wantErr)
		}
		if l.posts != 0 {
			t.Errorf("%s: the ledger was asked to post %d transactions, want none", tt.name, l.posts)
		}
	}
}
