package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Verdicts of the segregated-fund report.
const (
	VerdictBalanced  = "balanced"
	VerdictShortfall = "shortfall"
	VerdictExcess    = "excess"
)

// ReportStore is what the report reads (implemented by adapters/postgres):
// nothing in it scans the journal.
type ReportStore interface {
	// Balances returns the non-zero debits - credits per account in
	// currency, now (nil) or as of an instant (the latest balance
	// checkpoint at or before it plus the postings since).
	Balances(ctx context.Context, currency string, asOf *time.Time) ([]domain.AccountNet, error)
	// HeadAsOf returns the journal chain's head (hex hash, position) as of
	// an instant: the last link chained at or before it (nil: now).
	HeadAsOf(ctx context.Context, asOf *time.Time) (string, int64, error)
	// Breaches returns the recorded breaches in currency posted at or
	// before asOf (nil: all), oldest first, capped, and how many in all.
	Breaches(ctx context.Context, currency string, asOf *time.Time) ([]domain.RecordedBreach, int, error)
	// BreachTotals returns the recorded breaches in currency posted at or
	// before asOf (nil: all), summed per house-pool account and direction.
	BreachTotals(ctx context.Context, currency string, asOf *time.Time) ([]domain.Breach, error)
	// HouseFundingNet returns the house-pool debits - credits in currency,
	// posted at or before asOf (nil: all), of finance's sanctioned entries
	// of house money into the client pool (client money funding, bad debt
	// write-offs) that recorded no breach.
	HouseFundingNet(ctx context.Context, currency string, asOf *time.Time) (decimal.Decimal, error)

	// LatestCheckpoint returns the latest checkpoint at or before asOf
	// (nil: of all), nil when there is none.
	LatestCheckpoint(ctx context.Context, asOf *time.Time) (*domain.Checkpoint, error)
	// PostingsSince counts the postings created in (after, upTo], up to limit.
	PostingsSince(ctx context.Context, after *time.Time, upTo time.Time, limit int64) (int64, error)
	// MakeCheckpoint writes the checkpoint at an instant once no writer
	// that could still commit a posting created at or before it without
	// saying it is late is open, and reports whether it did: not made,
	// (false, nil) when another checkpointer holds the lock, (false,
	// *domain.CheckpointDeferred) when a writer stayed open past the wait.
	MakeCheckpoint(ctx context.Context, at time.Time) (bool, error)
	// RebuildLateCheckpoints rebuilds the checkpoints that postings
	// committed after them, created at or before them, made stale (reports
	// and verify leave those out meanwhile) and returns how many.
	RebuildLateCheckpoints(ctx context.Context) (int, error)
	// BackfillBreaches records, once, the breaches of transactions posted
	// before breaches were recorded at posting time.
	BackfillBreaches(ctx context.Context) error
}

// Reports are the report use cases.
type Reports struct {
	Store      ReportStore
	Statements StatementStore
	Now        func() time.Time
}

// ReportLine is one total of a section of the report.
type ReportLine struct {
	Section     string // requirement | tax | resource | memo
	Account     string
	Description string
	Amount      decimal.Decimal
}

// ClientLine is one client's money in the requirement.
type ClientLine struct {
	Kind                                  string // renter | provider
	ID                                    string
	Wallet, Pending, Available, InTransit decimal.Decimal

	total    decimal.Decimal // summed by the report's tally, when hasTotal
	hasTotal bool
}

// Total is the client's part of the requirement.
func (c ClientLine) Total() decimal.Decimal {
	if c.hasTotal {
		return c.total
	}
	t := c.Wallet
	for _, d := range [...]decimal.Decimal{c.Pending, c.Available, c.InTransit} {
		if !d.IsZero() { // a renter's three, often a provider's in transit
			t = t.Add(d)
		}
	}
	return t
}

// Client kinds.
const (
	ClientRenter   = "renter"
	ClientProvider = "provider"
)

// SegregatedFundsReport is the client money reconciliation (DESIGN §8).
type SegregatedFundsReport struct {
	AsOf                 time.Time
	Currency             money.Currency
	Requirement          decimal.Decimal
	TaxWithheld          decimal.Decimal
	Resource             decimal.Decimal  // bank:client in the ledger
	BankStatementBalance *decimal.Decimal // the bank's, when a statement is imported
	Statements           []StoredStatement
	Difference           decimal.Decimal // against the bank's figure when there is one
	LedgerDifference     decimal.Decimal // against bank:client
	Verdict              string
	Breaches             []domain.RecordedBreach
	BreachesTotal        int
	JournalHeadHash      string
	JournalHeadPosition  int64
	Lines                []ReportLine
	Clients              []ClientLine
	// UnsweptCommission is the commission settlements earned that no sweep
	// has yet moved from bank:client to bank:operating (a deferred sweep):
	// part of the difference, shown as a memo line.
	UnsweptCommission decimal.Decimal
}

// SegregatedFunds computes the report for one currency as of an instant
// (nil: now, from the maintained balances). The requirement counts renter
// wallets only where positive, and providers only where their own total is
// not below zero: one client's debt never offsets another's money. Once a bank statement closing at or before the instant is imported,
// the difference is taken against the bank's closing balance (the money
// really held) and the ledger's bank:client is shown beside it.
func (rp *Reports) SegregatedFunds(ctx context.Context, asOf *time.Time, currency string) (*SegregatedFundsReport, error) {
	cur, err := money.Lookup(currency)
	if err != nil {
		return nil, apperr.Invalid("currency", "%s", err.Error())
	}
	r := &SegregatedFundsReport{Currency: cur, AsOf: rp.Now().UTC()}
	if err := CheckAsOf(asOf, r.AsOf); err != nil {
		return nil, err
	}
	if asOf != nil {
		r.AsOf = asOf.UTC()
	}
	// The head first: as of now, every transaction it covers is in the figures.
	if r.JournalHeadHash, r.JournalHeadPosition, err = rp.Store.HeadAsOf(ctx, asOf); err != nil {
		return nil, err
	}
	nets, err := rp.Store.Balances(ctx, cur.Code, asOf)
	if err != nil {
		return nil, err
	}
	t, err := tallyBalances(nets)
	if err != nil {
		return nil, err
	}
	r.Clients, r.Resource, r.TaxWithheld = t.clients, t.resource, t.tax
	r.Requirement = t.walletsPos.Add(t.pending).Add(t.available).Add(t.inTransit)
	bts, err := rp.Store.BreachTotals(ctx, cur.Code, asOf)
	if err != nil {
		return nil, err
	}
	funded, err := rp.Store.HouseFundingNet(ctx, cur.Code, asOf)
	if err != nil {
		return nil, err
	}
	r.UnsweptCommission = unsweptCommission(t.houseNetDebit.Sub(funded), bts)
	if err := r.checkClientLines(); err != nil {
		return nil, err
	}
	if r.Statements, err = rp.Statements.LatestStatements(ctx, cur.Code, r.AsOf); err != nil {
		return nil, err
	}
	r.reconcile()
	r.Lines = r.summaryLines(t)
	if r.Breaches, r.BreachesTotal, err = rp.Store.Breaches(ctx, cur.Code, asOf); err != nil {
		return nil, err
	}
	if asOf == nil { // a report of now is the latest: /metrics shows its verdict
		recordSegregatedFunds(r)
	}
	return r, nil
}

// balanceTally is the report's balances sorted into client lines and the
// totals of each section. Clients in debit (a renter's wallet, a
// provider's pending + available + in transit) have no line and count
// nothing: their totals are the memos walletsNeg and providersNeg.
type balanceTally struct {
	clients                                               []ClientLine
	walletsPos, walletsNeg, pending, available, inTransit decimal.Decimal
	providersNeg, tax, resource                           decimal.Decimal
	houseNetDebit                                         decimal.Decimal // bank:operating and platform:*, debits - credits
	nPos, nNeg, nProvidersNeg                             int
}

// clientSums are a client line's amounts while they are added up.
type clientSums struct{ wallet, pending, available, inTransit, total exactSum }

// providerSections are the requirement's provider sections, summed over the
// providers that count, and the memo of those in debit.
type providerSections struct{ pending, available, inTransit, inDebit exactSum }

// tallyBalances sorts the accounts' balances into one line per client
// (renters and providers apart: an id may be both; renters first, then by
// id) and the section totals.
func tallyBalances(nets []domain.AccountNet) (*balanceTally, error) {
	t := &balanceTally{clients: make([]ClientLine, 0, len(nets)/2+1)}
	sums := make([]clientSums, 0, len(nets)/2+1)
	renters, providers := make(map[string]int, len(nets)/4), make(map[string]int, len(nets)/4)
	client := func(byID map[string]int, kind, id string) *clientSums {
		i, ok := byID[id]
		if !ok {
			i = len(t.clients)
			byID[id] = i
			t.clients = append(t.clients, ClientLine{Kind: kind, ID: id})
			sums = append(sums, clientSums{})
		}
		return &sums[i]
	}
	var walletsPos, walletsNeg, tax, house exactSum
	for _, n := range nets {
		acc, err := domain.ParseAddress(n.Account)
		if err != nil {
			return nil, fmt.Errorf("account %q in the ledger: %w", n.Account, err)
		}
		bal := acc.NormalBalance(n.NetDebit, decimal.Zero)
		var c *clientSums
		switch {
		case acc.Class == domain.ClassRenter && bal.IsPositive():
			walletsPos.add(bal)
			c = client(renters, ClientRenter, acc.Party)
			c.wallet.add(bal)
		case acc.Class == domain.ClassRenter && bal.IsNegative():
			walletsNeg.add(bal)
		case acc.Class == domain.ClassProvider && acc.Sub == domain.ProviderPending:
			c = client(providers, ClientProvider, acc.Party)
			c.pending.add(bal)
		case acc.Class == domain.ClassProvider && acc.Sub == domain.ProviderAvailable:
			c = client(providers, ClientProvider, acc.Party)
			c.available.add(bal)
		case acc.Class == domain.ClassProvider && acc.Sub == domain.ProviderInTransit:
			c = client(providers, ClientProvider, acc.Party)
			c.inTransit.add(bal)
		case acc.Class == domain.ClassTax:
			tax.add(bal)
		case n.Account == domain.BankClient:
			t.resource = bal
		case acc.Pool == domain.PoolHouse:
			house.add(n.NetDebit)
		}
		if c != nil {
			c.total.add(bal)
		}
	}
	t.nPos, t.nNeg = walletsPos.terms, walletsNeg.terms
	t.walletsPos, t.walletsNeg, t.tax, t.houseNetDebit = walletsPos.value(), walletsNeg.value(), tax.value(), house.value()
	t.closeClientLines(sums)
	return t, nil
}

// closeClientLines sets each client line's amounts from its sums, leaves
// out the providers in debit (their totals go to the memo: one client's
// debt never offsets another's money; within one provider, a sub-balance
// below zero nets against its others, its own money) and sums the
// provider sections over the lines kept, then sorts the lines.
func (t *balanceTally) closeClientLines(sums []clientSums) {
	var ps providerSections
	kept := t.clients[:0]
	for i, c := range t.clients {
		s := &sums[i]
		c.Wallet, c.Pending, c.Available, c.InTransit = s.wallet.value(), s.pending.value(), s.available.value(), s.inTransit.value()
		c.total, c.hasTotal = s.total.value(), true
		if c.Kind == ClientProvider && c.total.IsNegative() {
			ps.inDebit.add(c.total)
			continue
		}
		ps.addSections(s)
		kept = append(kept, c)
	}
	t.clients = kept
	t.pending, t.available, t.inTransit = ps.pending.value(), ps.available.value(), ps.inTransit.value()
	t.providersNeg, t.nProvidersNeg = ps.inDebit.value(), ps.inDebit.terms
	slices.SortFunc(t.clients, func(a, b ClientLine) int {
		if a.Kind != b.Kind {
			return strings.Compare(b.Kind, a.Kind) // renters first
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// addSections adds a provider's pending, available and in transit to the
// sections; a sub-balance it has no account in adds nothing (not even a
// zero, which would give the section another exponent than its terms').
func (ps *providerSections) addSections(s *clientSums) {
	for _, d := range [...]struct{ to, from *exactSum }{{&ps.pending, &s.pending}, {&ps.available, &s.available}, {&ps.inTransit, &s.inTransit}} {
		if d.from.terms > 0 {
			d.to.add(d.from.value())
		}
	}
}

// unsweptCommission is the commission settlements earned and their sweeps
// have not yet taken out of bank:client (DESIGN §4; a sweep bank:client
// cannot fund is deferred, and bank:client holds the commission until it
// runs). Money crosses between the client and the house pools only by a
// settlement (commission credited out of provider pending), its sweep
// (bank:client to bank:operating) and their reversals, by finance's
// funding and write-offs (taken out by the caller), or by a breach; a
// posting within the house pool nets to zero in it. So the house pool's
// debits - credits, less the breaches', are swept - earned, from the
// balances alone (no scan of the journal). An entry between the house and
// the tax pool is no breach by that rule and would count here too.
func unsweptCommission(houseNetDebit decimal.Decimal, breaches []domain.Breach) decimal.Decimal {
	sanctioned := houseNetDebit
	for _, b := range breaches {
		sanctioned = sanctioned.Sub(b.HouseNetDebit())
	}
	return sanctioned.Neg()
}

// checkClientLines: the client lines add up to the requirement (one
// client's debt never offsets another's money: negative wallets and
// providers in debit have no line).
func (r *SegregatedFundsReport) checkClientLines() error {
	var s exactSum
	for _, c := range r.Clients {
		s.add(c.Total())
	}
	if sum := s.value(); !sum.Equal(r.Requirement) {
		return fmt.Errorf("segregated funds %s: client lines sum to %s, the requirement is %s", r.Currency.Code, sum, r.Requirement)
	}
	return nil
}

// reconcile sets the bank's balance (from the statements), the differences
// and the verdict: against the bank's closing balance once a statement is
// imported, else against the ledger's bank:client.
func (r *SegregatedFundsReport) reconcile() {
	if len(r.Statements) > 0 {
		b := decimal.Zero
		for _, st := range r.Statements {
			b = b.Add(st.Closing)
		}
		r.BankStatementBalance = &b
	}
	owed := r.Requirement.Add(r.TaxWithheld)
	r.LedgerDifference = r.Resource.Sub(owed)
	r.Difference = r.LedgerDifference
	if r.BankStatementBalance != nil {
		r.Difference = r.BankStatementBalance.Sub(owed)
	}
	switch {
	case r.Difference.IsZero():
		r.Verdict = VerdictBalanced
	case r.Difference.IsNegative():
		r.Verdict = VerdictShortfall
	default:
		r.Verdict = VerdictExcess
	}
}

// summaryLines are the totals per section, with memos for wallets and
// providers in debit, for commission not yet swept and for the bank's
// figure against the ledger's.
func (r *SegregatedFundsReport) summaryLines(t *balanceTally) []ReportLine {
	lines := []ReportLine{
		{"requirement", "renter:*:wallet", plural(t.nPos, "renter wallet") + " in credit", t.walletsPos},
		{"requirement", "provider:*:pending:*", "provider earnings held in open cycles", t.pending},
		{"requirement", "provider:*:available", "settled provider earnings awaiting payout", t.available},
		{"requirement", "provider:*:in_transit", "submitted payouts not yet confirmed", t.inTransit},
		{"tax", "tax:withheld:*", "tax withheld not yet remitted", t.tax},
		{"resource", domain.BankClient, "segregated client bank account per the ledger", r.Resource},
	}
	if t.nNeg > 0 {
		lines = append(lines, ReportLine{"memo", "renter:*:wallet", plural(t.nNeg, "renter wallet") +
			" in debit: not offset against other clients' money", t.walletsNeg})
	}
	if t.nProvidersNeg > 0 {
		lines = append(lines, ReportLine{"memo", "provider:*", plural(t.nProvidersNeg, "provider") +
			" in debit: not offset against other clients' money", t.providersNeg})
	}
	if !r.UnsweptCommission.IsZero() {
		lines = append(lines, ReportLine{"memo", "commission earned - swept",
			"settlement commission not yet swept to bank:operating", r.UnsweptCommission})
	}
	if r.BankStatementBalance != nil {
		lines = append(lines,
			ReportLine{"resource", "bank_statement", plural(len(r.Statements), "bank statement") + " closing at or before as_of (used for the difference)", *r.BankStatementBalance},
			ReportLine{"memo", "bank_statement - bank:client", "unreconciled difference between the bank and the ledger", r.BankStatementBalance.Sub(r.Resource)})
	}
	return lines
}

// Checkpoint pacing: a checkpoint covers instants at least checkpointSettle
// old (most writers' commits behind them are done: one that commits later
// is marked late and the checkpoints it is late into are rebuilt), and is
// made once checkpointPostingsMax postings or checkpointEvery have passed
// since the last one, so a report as of any instant adds at most about that
// many postings to its checkpoint.
const (
	checkpointSettle      = 2 * time.Minute
	checkpointEvery       = 24 * time.Hour
	checkpointPostingsMax = 500_000
)

// CheckpointStep rebuilds the checkpoints postings committed late made
// stale, then makes the next balance checkpoint when one is due, and
// reports whether it made one. A checkpoint put off because a writer stayed
// open past the wait is a *domain.CheckpointDeferred error (errors.As): not
// a failure, a later step makes it.
func (rp *Reports) CheckpointStep(ctx context.Context) (bool, error) {
	if _, err := rp.Store.RebuildLateCheckpoints(ctx); err != nil {
		return false, fmt.Errorf("rebuild balance checkpoints: %w", err)
	}
	upTo := rp.Now().UTC().Add(-checkpointSettle).Truncate(time.Microsecond)
	last, err := rp.Store.LatestCheckpoint(ctx, nil)
	if err != nil {
		return false, err
	}
	var after *time.Time
	if last != nil {
		if !last.At.Before(upTo) {
			return false, nil
		}
		after = &last.At
	}
	n, err := rp.Store.PostingsSince(ctx, after, upTo, checkpointPostingsMax)
	if err != nil {
		return false, err
	}
	if n == 0 || (n < checkpointPostingsMax && last != nil && upTo.Sub(last.At) < checkpointEvery) {
		return false, nil
	}
	made, err := rp.Store.MakeCheckpoint(ctx, upTo)
	if err != nil {
		return false, fmt.Errorf("balance checkpoint at %s: %w", upTo, err)
	}
	return made, nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
