package domain

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func line(no int, ref, amt string) BankLine {
	return BankLine{StatementID: "st-1", LineNo: no, Reference: ref, Amount: decimal.RequireFromString(amt)}
}

func mv(kind, key, amt string, txs ...string) Movement {
	return Movement{Kind: kind, Key: key, Amount: decimal.RequireFromString(amt), TransactionIDs: txs}
}

// summary renders a reconciliation as "matched: ref=key(txs) …; bank: …; ledger: …".
func summary(r Reconciliation) string {
	var m, b, l []string
	for _, x := range r.Matched {
		m = append(m, fmt.Sprintf("%d=%s:%s%v", x.Line.LineNo, x.Movement.Kind, x.Movement.Key, x.Movement.TransactionIDs))
	}
	for _, x := range r.UnmatchedBank {
		b = append(b, fmt.Sprintf("%d", x.Line.LineNo))
	}
	for _, x := range r.UnmatchedLedger {
		l = append(l, fmt.Sprintf("%s:%s:%s", x.Movement.Kind, x.Movement.Key, x.Movement.Amount))
	}
	return "matched " + strings.Join(m, " ") + "; bank " + strings.Join(b, " ") + "; ledger " + strings.Join(l, " ")
}

func TestReconcile(t *testing.T) {
	tests := []struct {
		name  string
		give  []BankLine
		moves []Movement
		want  string
	}{
		{
			name: "each kind by its key",
			give: []BankLine{line(1, "bank-ref-1", "100.00"), line(2, "po-7", "-5.04"), line(3, "rem-CN-2026-11", "-1.26"), line(4, "cyc-20261130", "-4.20")},
			moves: []Movement{mv(MovementDeposit, "bank-ref-1", "100.00", "t1"), mv(MovementPayout, "po-7", "-5.04", "t2"),
				mv(MovementTaxRemittance, "rem-CN-2026-11", "-1.26", "t3"), mv(MovementCommissionSweep, "cyc-20261130", "-2.10", "t4"),
				mv(MovementCommissionSweep, "cyc-20261130", "-2.10", "t5")},
			want: "matched 1=deposit:bank-ref-1[t1] 2=payout:po-7[t2] 3=tax_remittance:rem-CN-2026-11[t3] 4=commission_sweep:cyc-20261130[t4 t5]; bank ; ledger ",
		},
		{
			name:  "a payout retry's rail reference names the payout",
			give:  []BankLine{line(1, "po-7-2", "-5.04")},
			moves: []Movement{mv(MovementPayout, "po-7", "-5.04", "t2")},
			want:  "matched 1=payout:po-7[t2]; bank ; ledger ",
		},
		{
			name: "a bank file's EndToEndId: the payout id compacted, with a retry's attempt",
			give: []BankLine{line(1, "0193a1b2c3d4e5f60718293a4b5c6d7e", "-5.04"), line(2, "0193a1b2c3d4e5f60718293a4b5c6d7f-2", "-7.00")},
			moves: []Movement{mv(MovementPayout, "po_0193a1b2-c3d4-e5f6-0718-293a4b5c6d7e", "-5.04", "t1"),
				mv(MovementPayout, "po_0193a1b2-c3d4-e5f6-0718-293a4b5c6d7f", "-7.00", "t2")},
			want: "matched 1=payout:po_0193a1b2-c3d4-e5f6-0718-293a4b5c6d7e[t1] 2=payout:po_0193a1b2-c3d4-e5f6-0718-293a4b5c6d7f[t2]; bank ; ledger ",
		},
		{
			name:  "a deposit whose reference ends in -N is not a payout retry",
			give:  []BankLine{line(1, "bank-ref-1", "100.00")},
			moves: []Movement{mv(MovementDeposit, "bank-ref", "100.00", "t1")},
			want:  "matched ; bank 1; ledger deposit:bank-ref:100",
		},
		{
			name:  "a payout paid, returned and paid again by a retry: three transfers",
			give:  []BankLine{line(1, "po-9", "-5.04"), line(2, "po-9", "5.04"), line(3, "po-9-2", "-5.04")},
			moves: []Movement{mv(MovementPayout, "po-9", "-5.04", "t1"), mv(MovementPayout, "po-9", "5.04", "t2"), mv(MovementPayout, "po-9", "-5.04", "t3")},
			want:  "matched 1=payout:po-9[t1] 2=payout:po-9[t2] 3=payout:po-9[t3]; bank ; ledger ",
		},
		{
			name:  "paid and returned are two transfers of one payout",
			give:  []BankLine{line(1, "po-9", "-5.04"), line(2, "po-9", "5.04")},
			moves: []Movement{mv(MovementPayout, "po-9", "-5.04", "t1"), mv(MovementPayout, "po-9", "5.04", "t2")},
			want:  "matched 1=payout:po-9[t1] 2=payout:po-9[t2]; bank ; ledger ",
		},
		{
			name:  "another amount under the right reference is an exception on both sides",
			give:  []BankLine{line(1, "bank-ref-1", "99.00")},
			moves: []Movement{mv(MovementDeposit, "bank-ref-1", "100.00", "t1")},
			want:  "matched ; bank 1; ledger deposit:bank-ref-1:100",
		},
		{
			name:  "one movement matches one line only",
			give:  []BankLine{line(1, "bank-ref-1", "100.00"), line(2, "bank-ref-1", "100.00")},
			moves: []Movement{mv(MovementDeposit, "bank-ref-1", "100.00", "t1")},
			want:  "matched 1=deposit:bank-ref-1[t1]; bank 2; ledger ",
		},
		{
			name:  "unknown on either side",
			give:  []BankLine{line(1, "interest", "0.12")},
			moves: []Movement{mv(MovementOther, "tx-9", "-3.00", "tx-9")},
			want:  "matched ; bank 1; ledger other:tx-9:-3",
		},
		{
			name: "nothing at all is reconciled",
			want: "matched ; bank ; ledger ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summary(Reconcile(tt.give, tt.moves)); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestReconcileReasonsNameTheOtherSide(t *testing.T) {
	r := Reconcile([]BankLine{line(3, "bank-ref-1", "99.00")}, []Movement{mv(MovementDeposit, "bank-ref-1", "100.00", "t1")})
	if r.Verdict() != ReconExceptions || len(r.UnmatchedBank) != 1 || len(r.UnmatchedLedger) != 1 {
		t.Fatalf("%+v", r)
	}
	if got := r.UnmatchedBank[0].Reason; !strings.Contains(got, "100, not 99") {
		t.Errorf("bank line reason %q; want the ledger's amount named", got)
	}
	if got := r.UnmatchedLedger[0].Reason; !strings.Contains(got, "statement st-1 line 3") || !strings.Contains(got, "99") {
		t.Errorf("movement reason %q; want the statement line named", got)
	}
	if v := Reconcile(nil, nil).Verdict(); v != ReconReconciled {
		t.Errorf("empty: %s", v)
	}
}

func TestClassifyMovement(t *testing.T) {
	tests := []struct {
		kind     TxKind
		key      string
		meta     map[string]string
		wantKind string
		wantKey  string
	}{
		{TxDeposit, "deposit:bank-ref-1", map[string]string{"external_ref": "bank-ref-1"}, MovementDeposit, "bank-ref-1"},
		{TxManual, "payout-po-1-1-paid", map[string]string{"kind": "payout", "payout_id": "po-1", "step": "paid"}, MovementPayout, "po-1"},
		{TxManual, "rem-CN-2026-11-CNY", map[string]string{"kind": "tax_remittance", "period": "2026-11"}, MovementTaxRemittance, "rem-CN-2026-11-CNY"},
		{TxManual, "settle-cyc-1-p-1:CNY", map[string]string{"kind": "settlement", "cycle_id": "cyc-1"}, MovementCommissionSweep, "cyc-1"},
		{TxManual, "settle-cyc-1-p-1:CNY:sweep", map[string]string{"kind": "commission_sweep", "cycle_id": "cyc-1"}, MovementCommissionSweep, "cyc-1"},
		{TxReversal, "rev-1", map[string]string{"kind": "payout", "payout_id": "po-1"}, MovementOther, "tx-1"},
		{TxManual, "fix-1", nil, MovementOther, "tx-1"},
	}
	for _, tt := range tests {
		k, key := ClassifyMovement("tx-1", tt.kind, tt.key, tt.meta)
		if k != tt.wantKind || key != tt.wantKey {
			t.Errorf("%s %s %v: %s %s; want %s %s", tt.kind, tt.key, tt.meta, k, key, tt.wantKind, tt.wantKey)
		}
	}
}

// A cycle's sweeps are one transfer, as old as its first part: a late
// settlement's sweep joining one the bank has not shown for 6 days made the
// group outstanding again (its newest part's time), hiding the missed
// transfer for 4 more days.
func TestSweepGroupIsAsOldAsItsFirstPart(t *testing.T) {
	closeAt := time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)
	old, late := mv(MovementCommissionSweep, "cyc-1", "-2.10", "t1"), mv(MovementCommissionSweep, "cyc-1", "-1.05", "t2")
	old.RecordedAt, late.RecordedAt = closeAt.Add(-6*24*time.Hour), closeAt.Add(time.Hour)
	r := Reconcile(nil, []Movement{old, late})
	r.MarkOutstanding(closeAt, closeAt.Add(30*time.Hour))
	if len(r.UnmatchedLedger) != 1 || r.UnmatchedLedger[0].Outstanding || r.Verdict() != ReconExceptions {
		t.Fatalf("%+v, verdict %s; want one exception (the group recorded 6 days before the close)", r.UnmatchedLedger, r.Verdict())
	}
}

// A movement no line names is outstanding while it is within OutstandingMax
// of both the latest statement's close and the close the run expects (the
// run less StatementLag). By the close alone, a feed that stopped on 12-01
// kept a payout of 12-02 outstanding in every later run.
func TestOutstandingByCloseAndRunTime(t *testing.T) {
	closeAt := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	tests := []struct {
		name       string
		giveRecord time.Time
		giveRun    time.Time
		wantOutst  bool
		wantInWhy  string
	}{
		{"the next morning", closeAt.Add(34 * time.Hour), closeAt.Add(2*day + 6*time.Hour), true, "outstanding: recorded 2026-12-02T10:00:00Z"},
		{"the daily run, statement on time", closeAt.Add(-3 * day), closeAt.Add(30 * time.Hour), true, "outstanding: recorded 2026-11-28T00:00:00Z"},
		{"4 days before the close", closeAt.Add(-4*day - time.Second), closeAt.Add(30 * time.Hour), false, "no statement line with this reference"},
		{"feed stopped, within 6 days of the run", closeAt.Add(34 * time.Hour), closeAt.Add(7*day + 10*time.Hour), true, "less than 6 days before this run"},
		{"feed stopped, over 6 days before the run", closeAt.Add(34 * time.Hour), closeAt.Add(19*day + 6*time.Hour), false, "the latest statement closes 2026-12-01T00:00:00Z"},
		{"feed stopped, a second too old", closeAt.Add(34 * time.Hour), closeAt.Add(34*time.Hour + 6*day + time.Second), false, "has the bank feed stopped?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mv(MovementPayout, "po-1", "-40.00", "t1")
			m.RecordedAt = tt.giveRecord
			r := Reconcile(nil, []Movement{m})
			r.MarkOutstanding(closeAt, tt.giveRun)
			u := r.UnmatchedLedger[0]
			if u.Outstanding != tt.wantOutst || !strings.Contains(u.Reason, tt.wantInWhy) {
				t.Fatalf("outstanding %v, reason %q; want %v, a reason with %q", u.Outstanding, u.Reason, tt.wantOutst, tt.wantInWhy)
			}
		})
	}
}

// stmt is a statement of account acct closing at the end of 2026-12-day,
// imported importedMin minutes after 2026-12-10.
func stmt(id, acct string, day int, opening, closing string, importedMin int) ImportedStatement {
	d := time.Date(2026, 12, day, 0, 0, 0, 0, time.UTC)
	return ImportedStatement{
		BankStatement: BankStatement{ID: id, Account: acct, Currency: "CNY", Date: d, ClosingAt: d.Add(24 * time.Hour),
			Opening: decimal.RequireFromString(opening), Closing: decimal.RequireFromString(closing)},
		ImportedAt: time.Date(2026, 12, 10, 0, importedMin, 0, 0, time.UTC),
	}
}

// An account's statements follow on in the order of their close, whatever
// the order of import: a gap (a statement missing) and an overlap (a
// period covered twice) are breaks naming both statements, the closing
// and opening balances and their difference; accounts are apart.
func TestStatementBreaks(t *testing.T) {
	dec1, dec2, dec3 := stmt("d1", "A", 1, "800.00", "900.00", 0), stmt("d2", "A", 2, "900.00", "850.00", 2), stmt("d3", "A", 3, "850.00", "870.00", 1)
	tests := []struct {
		name string
		give []ImportedStatement
		want []string
	}{
		{"one statement", []ImportedStatement{dec1}, nil},
		{"following on", []ImportedStatement{dec1, dec2, dec3}, nil},
		{"3 December imported before 2 December", []ImportedStatement{dec1, dec3, dec2}, nil},
		{"2 December missing", []ImportedStatement{dec3, dec1}, []string{"A d1>d3 900.00>850.00 -50.00"}},
		{"1 December and 1 to 2 December", []ImportedStatement{dec1, stmt("d1-2", "A", 2, "800.00", "850.00", 3)},
			[]string{"A d1>d1-2 900.00>800.00 -100.00"}},
		{"1 December twice, balances following on", []ImportedStatement{stmt("e1", "A", 1, "900.00", "900.00", 0), stmt("e1b", "A", 1, "900.00", "900.00", 1)},
			[]string{"A e1>e1b 900.00>900.00 0.00 same instant"}},
		{"another account's statements between", []ImportedStatement{dec1, stmt("b2", "B", 2, "5.00", "7.00", 0), dec2, stmt("b3", "B", 3, "7.00", "1.00", 0)}, nil},
		{"a gap in each account", []ImportedStatement{dec3, stmt("b1", "B", 1, "5.00", "7.00", 0), dec1, stmt("b3", "B", 3, "8.00", "9.00", 0)},
			[]string{"A d1>d3 900.00>850.00 -50.00", "B b1>b3 7.00>8.00 1.00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, b := range StatementBreaks(tt.give) {
				s := fmt.Sprintf("%s %s>%s %s>%s %s", b.Account, b.PreviousID, b.StatementID, b.PreviousClosing.StringFixed(2), b.Opening.StringFixed(2), b.Difference.StringFixed(2))
				if strings.Contains(b.Reason, "same instant") {
					s += " same instant"
				}
				for _, part := range []string{b.PreviousID, b.StatementID, b.PreviousClosing.StringFixed(2), b.Opening.StringFixed(2), b.Difference.StringFixed(2)} {
					if !strings.Contains(b.Reason, part) {
						t.Errorf("reason %q does not name %s", b.Reason, part)
					}
				}
				got = append(got, s)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestResolveItems: a match is one unmatched line and movements summing to
// it exactly; each item unmatched in the run and named once.
func TestResolveItems(t *testing.T) {
	d := decimal.RequireFromString
	run := ReconRun{ID: "rec_1", Currency: "CNY", Result: Reconciliation{
		UnmatchedBank: []UnmatchedLine{{Line: BankLine{StatementID: "st", LineNo: 1, Amount: d("497.00")}}, {Line: BankLine{StatementID: "st", LineNo: 2, Amount: d("-25.00")}}},
		UnmatchedLedger: []UnmatchedMovement{{Movement: Movement{Key: "alipay:1", Amount: d("300.00"), TransactionIDs: []string{"t1"}}},
			{Movement: Movement{Key: "alipay:2", Amount: d("197.00"), TransactionIDs: []string{"t2", "t3"}}}},
	}}
	line1, line2 := []LineRef{{"st", 1}}, []LineRef{{"st", 2}}
	tests := []struct {
		name   string
		action string
		lines  []LineRef
		txs    []string
		want   string // "" when resolved
	}{
		{"match sums", ResolveMatch, line1, []string{"t1", "t3"}, ""},
		{"match short", ResolveMatch, line1, []string{"t1"}, "sum to 300.00, the line is 497.00"},
		{"match two lines", ResolveMatch, append(line1, line2...), []string{"t1", "t2"}, "one statement line"},
		{"movement twice", ResolveMatch, line1, []string{"t2", "t3"}, "already named"},
		{"line twice", ResolveWriteOff, append(line2, line2...), nil, "named twice"},
		{"line not unmatched", ResolveWriteOff, []LineRef{{"st", 3}}, nil, "not unmatched"},
		{"write off a fee", ResolveWriteOff, line2, nil, ""},
		{"write off nothing", ResolveWriteOff, nil, nil, "at least one"},
		{"bank held", ResolveBankHeld, nil, []string{"t2"}, ""},
		{"bank held a line", ResolveBankHeld, line2, []string{"t1"}, "movements only"},
		{"bank held nothing", ResolveBankHeld, nil, nil, "movements only"},
		{"unknown action", "ignore", line2, nil, "want match, write_off or bank_held"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run.ResolveItems(tt.action, tt.lines, tt.txs)
			if got := fmt.Sprint(err); tt.want == "" && err != nil || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Fatalf("ResolveItems: %v, want %q", err, tt.want)
			}
		})
	}
	run.Resolutions = []ReconResolution{{Lines: []BankLine{{StatementID: "st", LineNo: 1}}, Movements: []Movement{{TransactionIDs: []string{"t3"}}}}}
	lines, moves := run.Carried()
	if len(lines) != 1 || lines[0].LineNo != 2 || len(moves) != 1 || moves[0].Key != "alipay:1" {
		t.Fatalf("Carried: %v %v, want line 2 and alipay:1", lines, moves)
	}
}

// TestInTransitAtAClose: at a close, a matched pair counts only when its
// sides fall either side of it; an unmatched line counts when its
// statement closes by then, an unmatched movement when recorded by then
// (an unknown time: recorded before any close). ProveCash names the
// difference no item explains.
func TestInTransitAtAClose(t *testing.T) {
	c1 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	c2 := c1.Add(24 * time.Hour)
	closes := map[string]time.Time{"st-1": c1, "st-2": c2}
	d := decimal.RequireFromString
	l := func(st, amt string) BankLine { return BankLine{StatementID: st, Amount: d(amt)} }
	m := func(at time.Time, amt string) Movement { return Movement{Amount: d(amt), RecordedAt: at} }
	r := Reconciliation{
		Matched: []ReconMatch{
			{Line: l("st-1", "100"), Movement: m(c1.Add(-time.Hour), "100")}, // both by c1
			{Line: l("st-1", "30"), Movement: m(c1.Add(time.Hour), "30")},    // bank first
			{Line: l("st-2", "-7"), Movement: m(c1.Add(-time.Hour), "-7")},   // ledger first
		},
		UnmatchedBank:   []UnmatchedLine{{Line: l("st-1", "-5")}, {Line: l("st-2", "1")}, {Line: l("st-9", "2")}},
		UnmatchedLedger: []UnmatchedMovement{{Movement: m(c1.Add(-time.Minute), "20")}, {Movement: m(time.Time{}, "4")}, {Movement: m(c2, "50")}},
	}
	for _, tc := range []struct {
		at               time.Time
		inBank, inLedger string
	}{{c1, "25", "17"}, {c2, "-4", "74"}} {
		b, l := r.InTransit(tc.at, closes)
		if b.String() != tc.inBank || l.String() != tc.inLedger {
			t.Errorf("at %s: in bank %s, in ledger %s; want %s, %s", tc.at, b, l, tc.inBank, tc.inLedger)
		}
	}
	st := ImportedStatement{BankStatement: BankStatement{ID: "st-1", Account: "CN-1", Currency: "CNY", ClosingAt: c1}}
	if got := ProveCash(st, CashFigures{Bank: d("125"), Ledger: d("117"), InBank: d("25"), InLedger: d("17")}); got != nil {
		t.Errorf("balanced figures: %+v, want nil", got)
	}
	got := ProveCash(st, CashFigures{Bank: d("135"), Ledger: d("117"), InBank: d("25"), InLedger: d("17")})
	if got == nil || got.Difference.String() != "10" || !strings.Contains(got.Reason, "10.00") || !strings.Contains(got.Reason, "st-1") {
		t.Errorf("10 more in the bank: %+v", got)
	}
}

// TestCarriedWithVoids: a run carries the items of the resolutions voided
// while it was the latest, once each, unless resolved anew since: a voided
// resolution of the run itself names items it lists already; one of an
// earlier run, items no run carried since; another resolution on the run
// after the void keeps its items out.
func TestCarriedWithVoids(t *testing.T) {
	d := decimal.RequireFromString
	void := &ReconVoid{ReconciliationID: "rec_2", Reason: "wrong items"}
	line := func(n int) BankLine { return BankLine{StatementID: "st", LineNo: n, Amount: d("-1.00")} }
	move := func(key, tx string) Movement {
		return Movement{Key: key, Amount: d("1.00"), TransactionIDs: []string{tx}}
	}
	own := ReconResolution{ID: "res_own", Lines: []BankLine{line(1)}, Movements: []Movement{move("m1", "t1")}, Void: void}
	older := ReconResolution{ID: "res_old", Lines: []BankLine{line(9)}, Movements: []Movement{move("m9", "t9")}, Void: void}
	anew := ReconResolution{ID: "res_new", Lines: []BankLine{line(2)}, Movements: []Movement{move("m2", "t2")}}
	run := ReconRun{ID: "rec_2", Result: Reconciliation{
		UnmatchedBank:   []UnmatchedLine{{Line: line(1)}, {Line: line(2)}, {Line: line(3)}},
		UnmatchedLedger: []UnmatchedMovement{{Movement: move("m1", "t1")}, {Movement: move("m2", "t2")}},
	}}
	run.Resolutions = []ReconResolution{own, anew}
	run.Voided = []ReconResolution{own, older}
	lines, moves := run.Carried()
	var got []string
	for _, l := range lines {
		got = append(got, fmt.Sprint("line ", l.LineNo))
	}
	for _, m := range moves {
		got = append(got, m.Key)
	}
	if want := "[line 1 line 3 line 9 m1 m9]"; fmt.Sprint(got) != want {
		t.Fatalf("Carried: %v, want %s (the voided ones' items once, not those resolved anew)", got, want)
	}
}
