package domain

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
)

// Kinds of bank:client movement the bank reconciliation tells apart, each
// with the key a bank statement line refers to it by.
const (
	MovementDeposit         = "deposit"          // key: the deposit's external_ref
	MovementPayout          = "payout"           // key: the payout id (a retry's rail reference is id-N; ISO 20022 files carry them compacted)
	MovementTaxRemittance   = "tax_remittance"   // key: the remittance id (its ledger idempotency key)
	MovementCommissionSweep = "commission_sweep" // key: the cycle id: one transfer per cycle and currency
	MovementOther           = "other"            // key: the ledger transaction id
)

// Verdicts of a reconciliation run.
const (
	ReconReconciled = "reconciled" // every statement line matched, every ledger movement matched
	ReconExceptions = "exceptions" // something on either side is unmatched
)

// BankLine is one line of an imported client bank statement; Amount is
// signed (+ money in).
type BankLine struct {
	StatementID string
	LineNo      int
	BookedOn    time.Time
	Reference   string
	Amount      decimal.Decimal
}

// Movement is what the bank should show for ledger movements of
// bank:client: one transaction, or several that the bank sees as one
// transfer (a cycle's commission sweeps). Amount is signed (+ a debit of
// bank:client: money in).
type Movement struct {
	Kind           string
	Key            string
	Amount         decimal.Decimal
	TransactionIDs []string
	// RecordedAt is when the ledger recorded it (a group: its earliest
	// transaction); zero when unknown (items kept before it was).
	RecordedAt time.Time
}

// ClassifyMovement names the kind of a transaction that moves bank:client
// and the key a statement line refers to it by, from what the writers put
// in it: a deposit's external_ref, the payout service's payout_id, the tax
// service's remittance (its idempotency key), settlement's cycle_id.
func ClassifyMovement(txID string, kind TxKind, idempotencyKey string, metadata map[string]string) (string, string) {
	switch {
	case kind == TxDeposit && metadata["external_ref"] != "":
		return MovementDeposit, metadata["external_ref"]
	case kind == TxReversal:
		return MovementOther, txID
	case metadata["kind"] == "payout" && metadata["payout_id"] != "":
		return MovementPayout, metadata["payout_id"]
	case metadata["kind"] == "tax_remittance":
		return MovementTaxRemittance, idempotencyKey
	case (metadata["kind"] == "settlement" || metadata["kind"] == "commission_sweep") && metadata["cycle_id"] != "":
		return MovementCommissionSweep, metadata["cycle_id"]
	}
	return MovementOther, txID
}

// GroupMovements merges movements the bank sees as one transfer: a cycle's
// commission sweeps in one direction. Every other movement is a transfer
// of its own: a payout paid, returned, and paid again by a retry are three
// (merged, a retried payout's two payments were one movement of twice the
// amount, which no statement line ever matched). Order: first appearance.
func GroupMovements(ms []Movement) []Movement {
	var out []Movement
	at := map[string]int{}
	for _, m := range ms {
		k := m.Kind + "\x00" + m.Key + "\x00" + fmt.Sprint(m.Amount.Sign())
		if i, ok := at[k]; ok && m.Kind == MovementCommissionSweep {
			out[i].Amount = out[i].Amount.Add(m.Amount)
			out[i].TransactionIDs = append(out[i].TransactionIDs, m.TransactionIDs...)
			// The group is as old as its first part: a late settlement's
			// sweep joining one the bank never showed made the whole group
			// outstanding again, hiding the missed transfer for 4 more days.
			if m.RecordedAt.Before(out[i].RecordedAt) {
				out[i].RecordedAt = m.RecordedAt
			}
			continue
		}
		at[k] = len(out)
		m.TransactionIDs = slices.Clone(m.TransactionIDs)
		out = append(out, m)
	}
	return out
}

// ReconMatch is a statement line and the movement it shows.
type ReconMatch struct {
	Line     BankLine
	Movement Movement
}

// UnmatchedLine is a statement line no ledger movement explains.
type UnmatchedLine struct {
	Line   BankLine
	Reason string
}

// UnmatchedMovement is a ledger movement no statement line shows.
type UnmatchedMovement struct {
	Movement Movement
	Reason   string
	// Outstanding: a timing difference, not an exception (MarkOutstanding).
	Outstanding bool
}

// Reconciliation is the outcome of matching statement lines to movements.
type Reconciliation struct {
	Matched         []ReconMatch
	UnmatchedBank   []UnmatchedLine
	UnmatchedLedger []UnmatchedMovement
	// Breaks are where an account's statements do not follow on
	// (StatementBreaks): each run finds them again over every statement.
	Breaks []StatementBreak
	// CashDifferences are the closes at which the proof of cash does not
	// hold (ProveCash).
	CashDifferences []CashDifference
}

// Verdict is reconciled when every statement line matched, every ledger
// movement matched or is outstanding, each account's statements follow on,
// and the proof of cash holds at each close the run checked.
func (r Reconciliation) Verdict() string {
	if len(r.UnmatchedBank) == 0 && r.Outstanding() == len(r.UnmatchedLedger) && len(r.Breaks) == 0 && len(r.CashDifferences) == 0 {
		return ReconReconciled
	}
	return ReconExceptions
}

// Outstanding counts the unmatched ledger movements marked outstanding.
func (r Reconciliation) Outstanding() int {
	n := 0
	for _, u := range r.UnmatchedLedger {
		if u.Outstanding {
			n++
		}
	}
	return n
}

// OutstandingMax is how long before the latest statement's close a
// movement no line names is still outstanding: a transfer the ledger
// records on a Friday evening is booked by the bank on Monday, and a
// statement holds what was booked by the end of its date.
const OutstandingMax = 4 * 24 * time.Hour

// StatementLag is how long before a run the latest statement it expects
// closes: the daily run (06:00 in the tax zone) takes the statement of two
// days back, which closes at the end of its date (UTC), 16 to 42 hours
// before the run in any zone.
const StatementLag = 2 * 24 * time.Hour

// outstandingSince is the earliest a movement no line names may have been
// recorded and still be outstanding in a run at runAt whose latest
// statement closes at closeAt: OutstandingMax before that close, or before
// the close the run expects (runAt less StatementLag) when that is later.
// By the close alone, a bank feed that stopped kept every movement since
// its last statement outstanding, and each daily run reconciled, for good.
func outstandingSince(closeAt, runAt time.Time) time.Time {
	expected := runAt.Add(-StatementLag)
	if closeAt.After(expected) {
		expected = closeAt
	}
	return expected.Add(-OutstandingMax)
}

// MarkOutstanding marks the unmatched ledger movements that no statement
// line names and that were recorded at or after outstandingSince(closeAt,
// runAt): the bank may not have booked them yet, a timing difference a
// later statement clears. Counted as exceptions, every transfer of the last
// day kept the daily run at "exceptions", so a real one (an unknown bank
// line, a wrong amount, a movement the bank never booked) looked like any
// day's. A movement the latest close alone would leave outstanding but the
// run's time does not is an exception whose reason says the statements
// stopped.
func (r *Reconciliation) MarkOutstanding(closeAt, runAt time.Time) {
	since, byClose := outstandingSince(closeAt, runAt), closeAt.Add(-OutstandingMax)
	closed := closeAt.UTC().Format(time.RFC3339)
	for i := range r.UnmatchedLedger {
		u := &r.UnmatchedLedger[i]
		if u.Reason != reasonNoLine || u.Movement.RecordedAt.IsZero() || u.Movement.RecordedAt.Before(byClose) {
			continue
		}
		recorded := u.Movement.RecordedAt.UTC().Format(time.RFC3339)
		if u.Movement.RecordedAt.Before(since) {
			u.Reason = reasonNoLine + "; recorded " + recorded + ", and the latest statement closes " + closed +
				", more than 2 days before this run: no statement since shows whether the bank booked it (has the bank feed stopped?)"
			continue
		}
		u.Outstanding = true
		u.Reason = "outstanding: recorded " + recorded + ", less than 4 days before the latest statement's close (" + closed +
			") or after it, and less than 6 days before this run; no statement line names it yet"
	}
}

// StatementBreak is a statement that does not follow on from the
// account's statement before it (by close): its opening balance is not
// that statement's closing balance (a statement between them is missing,
// or the two cover a period twice), or both close at the same instant (the
// same period covered twice). Lines of a missing statement are on no
// statement a run takes, so its movements (a bank fee) were never items.
type StatementBreak struct {
	Account           string
	PreviousID        string
	PreviousClosingAt time.Time
	PreviousClosing   decimal.Decimal
	StatementID       string
	ClosingAt         time.Time
	Opening           decimal.Decimal
	Difference        decimal.Decimal // Opening − PreviousClosing
	Reason            string
}

// StatementBreaks checks that each account's statements follow on, in the
// order of their close (of two closing at the same instant, the one
// imported first comes first, as the report takes the one imported last):
// not the order of import, so a statement imported late fills its gap.
func StatementBreaks(sts []ImportedStatement) []StatementBreak {
	sts = slices.Clone(sts)
	slices.SortStableFunc(sts, func(a, b ImportedStatement) int {
		if c := strings.Compare(a.Account, b.Account); c != 0 {
			return c
		}
		if c := a.ClosingAt.Compare(b.ClosingAt); c != 0 {
			return c
		}
		if c := a.ImportedAt.Compare(b.ImportedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	var out []StatementBreak
	for i := 1; i < len(sts); i++ {
		prev, st := sts[i-1], sts[i]
		sameClose := st.ClosingAt.Equal(prev.ClosingAt)
		if st.Account != prev.Account || (st.Opening.Equal(prev.Closing) && !sameClose) {
			continue
		}
		b := StatementBreak{Account: st.Account, PreviousID: prev.ID, PreviousClosingAt: prev.ClosingAt, PreviousClosing: prev.Closing,
			StatementID: st.ID, ClosingAt: st.ClosingAt, Opening: st.Opening, Difference: st.Opening.Sub(prev.Closing)}
		f := AmountFormat(st.Currency)
		b.Reason = fmt.Sprintf("statement %s of account %s opens at %s, but the statement before it, %s (closing %s), closes at %s: a difference of %s",
			st.ID, st.Account, f(st.Opening), prev.ID, prev.ClosingAt.UTC().Format(time.RFC3339), f(prev.Closing), f(b.Difference))
		if sameClose {
			b.Reason += "; both close at the same instant: the same period is covered twice"
		} else {
			b.Reason += "; a statement between them is missing, or the two cover a period twice"
		}
		out = append(out, b)
	}
	return out
}

// CashFigures are the figures of a proof of cash at a statement's close:
// Ledger + InBank − InLedger must be Bank, exactly.
type CashFigures struct {
	// Bank sums the closing balance of each of the currency's accounts:
	// its latest statement closing at or before the close.
	Bank decimal.Decimal
	// Ledger is bank:client in the ledger at the close (the postings
	// created by then, of the transactions the run's chain head holds).
	Ledger decimal.Decimal
	// InBank sums the lines of statements closing by then that the ledger
	// did not hold by then: unmatched, written off, or matched to a
	// movement recorded after the close; and the movements resolved
	// bank_held recorded after the close.
	InBank decimal.Decimal
	// InLedger sums the movements recorded by then that no line of a
	// statement closing by then shows: unmatched (outstanding or not),
	// written off, or matched to a line of a later statement. A movement
	// resolved bank_held is the bank's at every close: in InBank at a close
	// before the ledger recorded it, in neither after.
	InLedger decimal.Decimal
}

// Add is f with more in transit on each side.
func (f CashFigures) Add(inBank, inLedger decimal.Decimal) CashFigures {
	f.InBank, f.InLedger = f.InBank.Add(inBank), f.InLedger.Add(inLedger)
	return f
}

// Difference is what no item explains: Bank − (Ledger + InBank − InLedger).
func (f CashFigures) Difference() decimal.Decimal {
	return f.Bank.Sub(f.Ledger.Add(f.InBank).Sub(f.InLedger))
}

// CashDifference is a close at which the proof of cash does not hold: the
// bank's balance differs from bank:client by more than the items in
// transit explain (a credit the account holds that no line shows, a
// bank:client movement no run took). Matching lines to movements one by
// one never sees it: every item can match.
type CashDifference struct {
	StatementID string // the statement closing then (of the first account, when several do)
	Account     string
	ClosingAt   time.Time
	CashFigures
	Difference decimal.Decimal // CashFigures.Difference()
	Reason     string
}

// InTransit sums the run's items in transit at closeAt (CashFigures):
// lines of statements closing by then whose movement the ledger had not
// recorded by then, and movements recorded by then whose line is on no
// statement closing by then. closes maps a statement to its close (one
// missing: not closed by then). A movement recorded at an unknown time
// (items kept before times were) counts as recorded before any close; a
// group (a cycle's sweeps) as when its first part was.
func (r Reconciliation) InTransit(closeAt time.Time, closes map[string]time.Time) (inBank, inLedger decimal.Decimal) {
	lineBy := func(l BankLine) bool {
		at, ok := closes[l.StatementID]
		return ok && !at.After(closeAt)
	}
	movedBy := func(m Movement) bool { return !m.RecordedAt.After(closeAt) }
	for _, x := range r.Matched {
		switch l, m := lineBy(x.Line), movedBy(x.Movement); {
		case l && !m:
			inBank = inBank.Add(x.Line.Amount)
		case m && !l:
			inLedger = inLedger.Add(x.Movement.Amount)
		}
	}
	for _, u := range r.UnmatchedBank {
		if lineBy(u.Line) {
			inBank = inBank.Add(u.Line.Amount)
		}
	}
	for _, u := range r.UnmatchedLedger {
		if movedBy(u.Movement) {
			inLedger = inLedger.Add(u.Movement.Amount)
		}
	}
	return inBank, inLedger
}

// ProveCash checks the proof of cash at st's close: nil when the figures
// agree exactly, else the difference, naming the statement.
func ProveCash(st ImportedStatement, f CashFigures) *CashDifference {
	diff := f.Difference()
	if diff.IsZero() {
		return nil
	}
	af := AmountFormat(st.Currency)
	return &CashDifference{StatementID: st.ID, Account: st.Account, ClosingAt: st.ClosingAt, CashFigures: f, Difference: diff,
		Reason: fmt.Sprintf("at the close of statement %s of account %s (%s) the bank holds %s; bank:client in the ledger is %s, "+
			"plus %s of lines the ledger had not recorded by then, less %s of movements the bank had not shown by then, makes %s: "+
			"a difference of %s no item explains (money the bank holds or lacks that no line shows, or a bank:client movement no run took; "+
			"money the account held before gpubill did is recorded by an entry in the ledger, resolved bank_held)",
			st.ID, st.Account, st.ClosingAt.UTC().Format(time.RFC3339), af(f.Bank), af(f.Ledger), af(f.InBank), af(f.InLedger),
			af(f.Ledger.Add(f.InBank).Sub(f.InLedger)), af(diff))}
}

// AmountFormat formats amounts in the currency's minor units (as given
// when the currency is unknown).
func AmountFormat(currency string) func(decimal.Decimal) string {
	c, err := money.Lookup(currency)
	if err != nil {
		return func(d decimal.Decimal) string { return d.String() }
	}
	return c.Format
}

// reasonNoLine is the reason of a ledger movement no statement line names.
const reasonNoLine = "no statement line with this reference"

// railRetry is a payout's rail reference after a definite failure: the
// payout id, "-", the attempt.
var railRetry = regexp.MustCompile(`^(.+)-([0-9]+)$`)

// Reconcile matches each statement line to at most one movement (grouped
// with GroupMovements) and each movement to at most one line: a line
// matches a movement whose key its reference names and whose signed amount
// it equals exactly. Lines are taken in statement order; a reference that
// names a movement with another amount is an exception on both sides, each
// naming the other.
func Reconcile(lines []BankLine, movements []Movement) Reconciliation {
	groups := GroupMovements(movements)
	byKey := map[string][]int{}
	for i, g := range groups {
		byKey[g.Key] = append(byKey[g.Key], i)
		if c := compactPayoutID(g.Key); g.Kind == MovementPayout && c != g.Key {
			byKey[c] = append(byKey[c], i)
		}
	}
	matched := make([]bool, len(groups))
	near := make([]string, len(groups)) // why a movement is unmatched, when a line named it
	var r Reconciliation
	for _, l := range lines {
		cands := candidates(byKey, groups, l.Reference)
		hit := -1
		for _, i := range cands {
			if !matched[i] && groups[i].Amount.Equal(l.Amount) {
				hit = i
				break
			}
		}
		if hit >= 0 {
			matched[hit] = true
			r.Matched = append(r.Matched, ReconMatch{Line: l, Movement: groups[hit]})
			continue
		}
		reason := "no ledger movement of bank:client with this reference"
		var amounts []string
		for _, i := range cands {
			if !matched[i] {
				amounts = append(amounts, groups[i].Amount.String())
				if near[i] == "" {
					near[i] = fmt.Sprintf("statement %s line %d names it with amount %s", l.StatementID, l.LineNo, l.Amount.String())
				}
			}
		}
		if len(amounts) > 0 {
			reason = "the ledger movement with this reference is " + strings.Join(amounts, ", ") + ", not " + l.Amount.String()
		} else if len(cands) > 0 {
			reason = "its ledger movement is already matched to another line"
		}
		r.UnmatchedBank = append(r.UnmatchedBank, UnmatchedLine{Line: l, Reason: reason})
	}
	for i, g := range groups {
		if matched[i] {
			continue
		}
		reason := near[i]
		if reason == "" {
			reason = reasonNoLine
		}
		r.UnmatchedLedger = append(r.UnmatchedLedger, UnmatchedMovement{Movement: g, Reason: reason})
	}
	return r
}

// compactPayoutID is a payout id as a bank file's EndToEndId carries it
// when the id is longer than ISO 20022's 35 characters (the bank-file
// rail's rule): "po_" and the UUID's hyphens dropped. Other keys unchanged.
func compactPayoutID(id string) string {
	const idLenMax, uuidLen = 35, 36
	_, rest, ok := strings.Cut(id, "_")
	if len(id) <= idLenMax || !ok || len(rest) != uuidLen {
		return id
	}
	return strings.ReplaceAll(rest, "-", "")
}

// candidates are the movements a reference names: its key exactly (a
// payout's also compacted), or for a payout's rail reference of a retry
// (id-N) the payout id.
func candidates(byKey map[string][]int, groups []Movement, ref string) []int {
	out := slices.Clone(byKey[ref])
	if m := railRetry.FindStringSubmatch(ref); m != nil {
		for _, i := range byKey[m[1]] {
			if groups[i].Kind == MovementPayout {
				out = append(out, i)
			}
		}
	}
	return out
}

// Triggers of a reconciliation run.
const (
	ReconBySchedule = "schedule"
	ReconByRequest  = "request"
)

// ReconKeyHolder is the first run stored under an idempotency key (a
// request for every currency stores one run a currency under it).
type ReconKeyHolder struct {
	RunID    string
	Currency string
	// RequestedCurrency is the currency of the request that stored it (""
	// every one); nil for a run stored before requests were kept.
	RequestedCurrency *string
	// RequestedBy is the caller that stored it (role and subject).
	RequestedBy string
	CreatedAt   time.Time
}

// ReconRun is one kept reconciliation run of one currency.
type ReconRun struct {
	ID          string
	Seq         int64 // order of runs
	Currency    string
	Trigger     string
	RequestedBy string
	// Key is the request's idempotency key ("" none): a request with the
	// key of a run of its currency answers that run.
	Key string
	// RequestedCurrency is the currency the keyed request asked for ("" every
	// currency with a statement): the key answers only that request.
	RequestedCurrency string
	CreatedAt         time.Time
	PreviousID        string
	HeadHash          string
	HeadPosition      int64
	StatementIDs      []string
	// BankClosing sums the latest statement's closing balance of each of
	// the currency's accounts (nil: no statement yet).
	BankClosing      *decimal.Decimal
	LedgerBankClient decimal.Decimal
	Verdict          string
	MatchedCount     int
	UnmatchedBankN   int
	UnmatchedLedgerN int
	OutstandingN     int // of UnmatchedLedgerN
	BreakN           int // len(Result.Breaks) of a run holding every one
	CashDifferenceN  int // len(Result.CashDifferences) of a run holding every one
	// ResolutionN and ReopenedN count Resolutions and Reopened (a read
	// run's, which may hold only the first of them).
	ResolutionN int
	ReopenedN   int
	// Result holds the items; a listed run carries only the counts, an
	// answered one its first items when ItemsNext is set.
	Result Reconciliation
	// ItemsNext is the page token of the matched and unmatched items Result
	// leaves out (KeepItems), "" when it holds every one.
	ItemsNext string
	// BreaksNext, CashDifferencesNext, ResolutionsNext and ReopenedNext are
	// the page tokens of the statement breaks, cash differences,
	// resolutions and reopened resolutions an answered run leaves out, ""
	// when it holds every one.
	BreaksNext, CashDifferencesNext, ResolutionsNext, ReopenedNext string
	// Resolutions of its unmatched items by hand (a read run's only).
	Resolutions []ReconResolution
	// Voided: resolutions (of this run or an earlier one) voided while this
	// run was the currency's latest; the next run opens their items again.
	Voided []ReconResolution
	// Reopened: the previous run's Voided, whose items this run took over.
	Reopened []ReconResolution
}

// Tally sets the run's verdict and counts from its Result.
func (r *ReconRun) Tally() {
	r.Verdict = r.Result.Verdict()
	r.MatchedCount, r.UnmatchedBankN, r.UnmatchedLedgerN = len(r.Result.Matched), len(r.Result.UnmatchedBank), len(r.Result.UnmatchedLedger)
	r.OutstandingN, r.BreakN, r.CashDifferenceN = r.Result.Outstanding(), len(r.Result.Breaks), len(r.Result.CashDifferences)
}

// KeepItems keeps the first n of the run's matched and unmatched items in
// the run's order (matched, then unmatched in bank, then in ledger) and
// reports whether it left any out. The counts stay the run's.
func (r *ReconRun) KeepItems(n int) bool {
	if len(r.Result.Matched)+len(r.Result.UnmatchedBank)+len(r.Result.UnmatchedLedger) <= n {
		return false
	}
	r.Result.Matched = r.Result.Matched[:min(n, len(r.Result.Matched))]
	n -= len(r.Result.Matched)
	r.Result.UnmatchedBank = r.Result.UnmatchedBank[:min(n, len(r.Result.UnmatchedBank))]
	n -= len(r.Result.UnmatchedBank)
	r.Result.UnmatchedLedger = r.Result.UnmatchedLedger[:min(n, len(r.Result.UnmatchedLedger))]
	return true
}

// ReconRead bounds what a read of a kept run holds (0: every one): of its
// matched and unmatched items the first Items in the run's order, of its
// statement breaks and cash differences the first Breaks and
// CashDifferences, of its resolutions and reopened resolutions the first
// Resolutions of each, oldest first. An answer's read (a GET, a keyed
// replay) reads no more than it answers.
type ReconRead struct {
	Items, Breaks, CashDifferences, Resolutions int
	// ResolutionItems bounds the items read of each resolution and
	// reopened one (their first, in their order; 0: every one).
	ResolutionItems int
	// CountsOnly reads the run and its counts, none of its lists: a
	// summary answer's read (the lists above are then ignored).
	CountsOnly bool
}

// ResolutionPos is a resolution's place in a run's resolutions (oldest
// first, then by id): a page of them continues after it.
type ResolutionPos struct {
	CreatedAt time.Time
	ID        string
}

// Statuses of a run's matched and unmatched items (ReconItem), in the
// run's order.
const (
	ReconItemMatched           = "matched"
	ReconItemUnmatchedInBank   = "unmatched_in_bank"
	ReconItemUnmatchedInLedger = "unmatched_in_ledger"
)

// Kinds of a run's other findings, paged apart from its items.
const (
	ReconItemStatementBreak = "statement_break"
	ReconItemCashDifference = "cash_difference"
)

// ReconItem is one matched or unmatched item of a kept run, numbered from
// 1 in the run's order (matched, then unmatched in bank, then in ledger).
type ReconItem struct {
	No          int
	Status      string
	Line        BankLine // matched and unmatched in bank
	Movement    Movement // matched and unmatched in ledger
	Reason      string   // why it is unmatched
	Outstanding bool     // of an unmatched ledger movement (UnmatchedMovement)
}

// Actions of a resolution by hand.
const (
	ResolveMatch    = "match"     // one statement line shows these movements (their sum)
	ResolveWriteOff = "write_off" // accepted as they are (a fee, a manual entry)
	// ResolveBankHeld: ledger movements whose money the bank already holds
	// without a line of its own (an opening balance, a balance brought in,
	// recorded in the ledger after the fact). The proof of cash counts them
	// in the bank at every close, where a write-off keeps them in transit.
	ResolveBankHeld = "bank_held"
)

// LineRef names a statement line.
type LineRef struct {
	StatementID string
	LineNo      int
}

// ReconResolution is items of a run finance resolved by hand: no reference
// matches an Alipay T+1 settlement line (several top-ups keyed
// alipay:<trade_no>), a bank fee, or a manual entry's random key, so they
// were carried into every later run as exceptions, for good.
type ReconResolution struct {
	ID               string
	ReconciliationID string
	Currency         string
	Action           string
	Reason           string
	ResolvedBy       string
	CreatedAt        time.Time
	Lines            []BankLine
	Movements        []Movement
	// Void is set once it is voided: its items are open again.
	Void *ReconVoid
	// ItemN is how many lines and movements it has: Lines and Movements
	// may hold only its first (an answer's read), ItemsNext the page
	// token of the rest.
	ItemN     int
	ItemsNext string
}

// ReconVoid undoes a resolution by hand: finance resolved the wrong items.
// The resolution is kept as it was; its items are open again from the
// currency's next run after the void on.
type ReconVoid struct {
	// ReconciliationID is the currency's latest run when it was voided:
	// the run after it takes the items over.
	ReconciliationID string
	Reason           string
	VoidedBy         string
	VoidedAt         time.Time
}

// ResolveItems takes the items a resolution names from what the run left
// unmatched: every line and movement (by any of its transaction ids) named
// once and unmatched in the run; a match is one line and at least one
// movement whose amounts sum to the line's exactly; bank_held is movements
// only.
func (r ReconRun) ResolveItems(action string, lines []LineRef, txIDs []string) ([]BankLine, []Movement, error) {
	var outL []BankLine
	for i, ref := range lines {
		if slices.Contains(lines[:i], ref) {
			return nil, nil, fmt.Errorf("statement %s line %d is named twice", ref.StatementID, ref.LineNo)
		}
		at := slices.IndexFunc(r.Result.UnmatchedBank, func(u UnmatchedLine) bool {
			return u.Line.StatementID == ref.StatementID && u.Line.LineNo == ref.LineNo
		})
		if at < 0 {
			return nil, nil, fmt.Errorf("statement %s line %d is not unmatched in run %s", ref.StatementID, ref.LineNo, r.ID)
		}
		outL = append(outL, r.Result.UnmatchedBank[at].Line)
	}
	var outM []Movement
	taken := map[int]bool{}
	for _, id := range txIDs {
		at := slices.IndexFunc(r.Result.UnmatchedLedger, func(u UnmatchedMovement) bool { return slices.Contains(u.Movement.TransactionIDs, id) })
		if at < 0 {
			return nil, nil, fmt.Errorf("transaction %s is not of a movement unmatched in run %s", id, r.ID)
		}
		if taken[at] {
			return nil, nil, fmt.Errorf("transaction %s names a movement already named", id)
		}
		taken[at] = true
		outM = append(outM, r.Result.UnmatchedLedger[at].Movement)
	}
	switch action {
	case ResolveMatch:
		if len(outL) != 1 || len(outM) == 0 {
			return nil, nil, fmt.Errorf("a match is one statement line and at least one movement, not %d and %d", len(outL), len(outM))
		}
		sum := decimal.Zero
		for _, m := range outM {
			sum = sum.Add(m.Amount)
		}
		if !sum.Equal(outL[0].Amount) {
			f := AmountFormat(r.Currency)
			return nil, nil, fmt.Errorf("the movements sum to %s, the line is %s", f(sum), f(outL[0].Amount))
		}
	case ResolveWriteOff:
		if len(outL)+len(outM) == 0 {
			return nil, nil, fmt.Errorf("a write-off names at least one line or movement")
		}
	case ResolveBankHeld:
		// A line is money the bank shows: what it holds without one is
		// only ever a ledger movement's.
		if len(outL) != 0 || len(outM) == 0 {
			return nil, nil, fmt.Errorf("bank_held names movements only, at least one, not %d lines and %d movements", len(outL), len(outM))
		}
	default:
		return nil, nil, fmt.Errorf("want %s, %s or %s, not %q", ResolveMatch, ResolveWriteOff, ResolveBankHeld, action)
	}
	return outL, outM, nil
}

// Carried is what a run leaves to the next: its unmatched lines and
// movements less those a resolution not voided names, and the items of the
// resolutions voided while it was the latest (Voided), once each: open
// again, unless resolved anew since. A voided resolution of this run names
// items it lists already (with what the run knew of them); one of an
// earlier run, items no run has carried since, as the resolution kept them.
func (r ReconRun) Carried() ([]BankLine, []Movement) {
	lines, txs := map[LineRef]bool{}, map[string]bool{}
	for _, res := range r.Resolutions {
		if res.Void != nil {
			continue
		}
		for _, l := range res.Lines {
			lines[LineRef{l.StatementID, l.LineNo}] = true
		}
		for _, m := range res.Movements {
			for _, id := range m.TransactionIDs {
				txs[id] = true
			}
		}
	}
	named := func(m Movement) bool {
		return slices.ContainsFunc(m.TransactionIDs, func(id string) bool { return txs[id] })
	}
	var outL []BankLine
	for _, u := range r.Result.UnmatchedBank {
		if ref := (LineRef{u.Line.StatementID, u.Line.LineNo}); !lines[ref] {
			lines[ref] = true
			outL = append(outL, u.Line)
		}
	}
	var outM []Movement
	for _, u := range r.Result.UnmatchedLedger {
		if !named(u.Movement) {
			outM = append(outM, u.Movement)
			for _, id := range u.Movement.TransactionIDs {
				txs[id] = true
			}
		}
	}
	for _, res := range r.Voided {
		for _, l := range res.Lines {
			if ref := (LineRef{l.StatementID, l.LineNo}); !lines[ref] {
				lines[ref] = true
				outL = append(outL, l)
			}
		}
		for _, m := range res.Movements {
			if !named(m) {
				outM = append(outM, m)
				for _, id := range m.TransactionIDs {
					txs[id] = true
				}
			}
		}
	}
	return outL, outM
}
