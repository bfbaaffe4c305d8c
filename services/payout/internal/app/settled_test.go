package app

import (
	"context"
	"reflect"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// settledMem is a Store whose transaction has an inbox and records the
// payouts created from settled statements.
type settledMem struct {
	Store // the rest, unused here
	Tx
	seen    map[string]bool
	created []string
}

func (m *settledMem) Update(_ context.Context, fn func(Tx) error) error { return fn(m) }

func (m *settledMem) Claim(_ context.Context, _ string, ids []string) (map[string]bool, error) {
	fresh := map[string]bool{}
	for _, id := range ids {
		if !m.seen[id] {
			m.seen[id], fresh[id] = true, true
		}
	}
	return fresh, nil
}

func (m *settledMem) CreateFromSettled(_ context.Context, p domain.Payout, _ domain.Minimums) ([]string, error) {
	m.created = append(m.created, p.ID)
	return []string{"joined-" + p.ID}, nil
}

// A settled statement makes its payout once: not from a message the inbox
// has seen, and once from one twice in a fetch; one with no net makes none.
func TestCreateFromSettledMessagesOnce(t *testing.T) {
	t.Parallel()
	st := &settledMem{seen: map[string]bool{"s-old": true}}
	a := &Payouts{Store: st}
	pay := func(id, net string) domain.Payout { return domain.Payout{ID: id, Net: decimal.RequireFromString(net)} }
	joined, err := a.CreateFromSettledMessages(context.Background(), []SettledMessage{
		{ID: "s-old", Payout: pay("po-old", "10")},
		{ID: "s-1", Payout: pay("po-1", "10")},
		{ID: "s-1", Payout: pay("po-1", "10")},
		{ID: "s-2", Payout: pay("po-2", "0")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"po-1"}; !reflect.DeepEqual(st.created, want) {
		t.Errorf("created %v, want %v", st.created, want)
	}
	if want := []string{"joined-po-1"}; !reflect.DeepEqual(joined, want) {
		t.Errorf("joined %v, want %v", joined, want)
	}
}
