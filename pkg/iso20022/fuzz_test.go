package iso20022

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// Whatever a bank (or anyone who can write to the inbox) sends, the readers
// answer a value or an error — never a panic — and a file they accept has
// what the rail relies on: a reason for every rejection, an EndToEndId and
// a status for every payment status, a currency for every amount.
func FuzzParseBankFile(f *testing.F) {
	for _, s := range []string{pain002, camt054, strings.Replace(camt054, "camt.054.001.08", "camt.054.001.02", 1), "<Document/>", ""} {
		f.Add([]byte(s))
	}
	if b, err := BuildPain001(sampleBatch()); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := Detect(b)
		if err != nil {
			var me *MalformedError
			if !errors.As(err, &me) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("Detect: %T %v", err, err)
			}
			return
		}
		switch k.Family() {
		case FamilyPain002:
			r, err := ParsePain002(b)
			if err != nil {
				return
			}
			for _, pi := range r.PaymentInfos {
				for _, tx := range pi.Transactions {
					if tx.OriginalEndToEndID == "" || !knownStatus[tx.Status] || (tx.Status == StatusRejected && len(tx.Reasons) == 0) {
						t.Fatalf("accepted a payment status without what the rail needs: %+v", tx)
					}
				}
			}
		case FamilyCamt054:
			n, err := ParseCamt054(b)
			if err != nil {
				return
			}
			for _, a := range n.Accounts {
				for _, e := range a.Entries {
					if len(e.Currency) != 3 || e.Amount.IsNegative() || (e.CreditDebit != Credit && e.CreditDebit != Debit) {
						t.Fatalf("accepted an entry without amount, currency or direction: %+v", e)
					}
					for _, tx := range e.Transactions {
						if tx.Currency == "" {
							t.Fatalf("accepted a transaction without currency: %+v", tx)
						}
					}
				}
				for _, me := range a.Unreadable {
					if me == nil || me.Element == "" {
						t.Fatalf("an entry set aside without the element at fault: %+v", me)
					}
				}
			}
		case FamilyPain001:
			ParsePain001(b) //nolint:errcheck // fuzzed for panics: most inputs are refused
		}
	})
}

// Any batch the builder accepts reads back with the same transfers and
// control sums that add up (amounts in whole minor units of CNY, JPY, USD).
func FuzzPain001RoundTrip(f *testing.F) {
	f.Add(uint64(62010), uint64(30000), uint8(0), uint8(2), "Zhang San", "e2e-1")
	f.Add(uint64(1), uint64(999999999999), uint8(1), uint8(1), "李伟 & <Co>", "x")
	f.Fuzz(func(t *testing.T, a1, a2 uint64, c1, c2 uint8, name, e2e string) {
		ccys := []string{"CNY", "JPY", "USD"}
		minor := map[string]int32{"CNY": 2, "JPY": 0, "USD": 2}
		mk := func(units uint64, c uint8, id string) CreditTransfer {
			ccy := ccys[int(c)%len(ccys)]
			return CreditTransfer{EndToEndID: id, Amount: decimal.NewFromUint64(units%1_000_000_000_000 + 1).Shift(-minor[ccy]), Currency: ccy,
				ExecutionDate: exec1.AddDate(0, 0, int(c)%3), Creditor: Party{Name: name, Account: "6222000011110001", Agent: "ICBKCNBJ"}}
		}
		b := CreditTransferBatch{MessageID: "pb-fuzz", CreatedAt: time.Unix(1_800_000_000, 0), InitiatingParty: "GPU Market", Debtor: sampleBatch().Debtor,
			Transfers: []CreditTransfer{mk(a1, c1, e2e), mk(a2, c2, e2e+"-2")}}
		out, err := BuildPain001(b)
		if err != nil {
			return // a name or id the schema would refuse
		}
		p, err := ParsePain001(out)
		if err != nil {
			t.Fatalf("the builder wrote what the reader refuses: %v\n%s", err, out)
		}
		got := map[string]CreditTransfer{}
		for _, pi := range p.PaymentInfos {
			for _, ct := range pi.Transfers {
				got[ct.EndToEndID] = ct
			}
		}
		for _, w := range b.Transfers {
			g := got[w.EndToEndID]
			if !g.Amount.Equal(w.Amount) || g.Currency != w.Currency || g.Creditor.Name != w.Creditor.Name {
				t.Fatalf("%s: got %s %s %q, want %s %s %q", w.EndToEndID, g.Amount, g.Currency, g.Creditor.Name, w.Amount, w.Currency, w.Creditor.Name)
			}
		}
		if want := b.Transfers[0].Amount.Add(b.Transfers[1].Amount); !p.ControlSum.Equal(want) {
			t.Fatalf("control sum %s, want %s", p.ControlSum, want)
		}
	})
}
