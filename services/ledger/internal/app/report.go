package app

import (
	"context"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Verdicts of the segregated-fund report.
const (
	VerdictBalanced  = "balanced"
	VerdictShortfall = "shortfall"
	VerdictExcess    = "excess"
)

// ReportLine is one component of the requirement or the resource.
type ReportLine struct {
	Section     string // requirement | tax | resource
	Account     string
	Description string
	Amount      decimal.Decimal
}

// ReportBreach is a segregation breach found in the journal.
type ReportBreach struct {
	TransactionID string
	EffectiveAt   time.Time
	domain.Breach
}

// SegregatedFundsReport is the client money reconciliation (DESIGN §8).
type SegregatedFundsReport struct {
	AsOf                 time.Time
	Currency             money.Currency
	Requirement          decimal.Decimal
	TaxWithheld          decimal.Decimal
	Resource             decimal.Decimal // bank:client in the ledger
	BankStatementBalance *decimal.Decimal
	Difference           decimal.Decimal
	Verdict              string
	Breaches             []ReportBreach
	JournalHeadHash      string
	Lines                []ReportLine
}

// Reports are the report use cases.
type Reports struct {
	App        *App
	Statements StatementStore
}

// SegregatedFunds computes the report for one currency as of an instant
// (nil: now, from the maintained balances). The requirement counts renter
// wallets only where positive: one client's debt never offsets another's
// money. Once a bank statement closing at or before the instant is imported,
// the difference is taken against the bank's closing balance (the money
// really held) and the ledger's bank:client is shown beside it.
func (rp *Reports) SegregatedFunds(ctx context.Context, asOf *time.Time, currency string) (*SegregatedFundsReport, error) {
	a := rp.App
	cur, err := money.Lookup(currency)
	if err != nil {
		return nil, apperr.Invalid("currency", "%s", err.Error())
	}
	r := &SegregatedFundsReport{Currency: cur}
	// The chain head is read first: every transaction it covers is in the figures.
	if r.JournalHeadHash, _, err = postgres.ChainHead(ctx, a.Pool); err != nil {
		return nil, err
	}
	at := a.now()
	if asOf != nil {
		at = asOf.UTC()
	}
	r.AsOf = at
	sts, err := rp.Statements.LatestStatements(ctx, cur.Code, at)
	if err != nil {
		return nil, err
	}
	if len(sts) > 0 {
		b := decimal.Zero
		for _, st := range sts {
			b = b.Add(st.Closing)
		}
		r.BankStatementBalance = &b
	}
	totals, err := postgres.CurrencyTotals(ctx, a.Pool, cur.Code, asOf)
	if err != nil {
		return nil, err
	}
	var walletsPos, walletsNeg, pending, available, inTransit, tax decimal.Decimal
	var nPos, nNeg int
	accs := make([]string, 0, len(totals))
	for acc := range totals {
		accs = append(accs, acc)
	}
	sort.Strings(accs)
	for _, addr := range accs {
		acc, err := domain.ParseAddress(addr)
		if err != nil {
			continue
		}
		t := totals[addr]
		bal := acc.NormalBalance(t.Debits, t.Credits)
		switch {
		case acc.Class == domain.ClassRenter:
			if bal.IsPositive() {
				walletsPos, nPos = walletsPos.Add(bal), nPos+1
			} else if bal.IsNegative() {
				walletsNeg, nNeg = walletsNeg.Add(bal), nNeg+1
			}
		case acc.Class == domain.ClassProvider && acc.Sub == domain.ProviderPending:
			pending = pending.Add(bal)
		case acc.Class == domain.ClassProvider && acc.Sub == domain.ProviderAvailable:
			available = available.Add(bal)
		case acc.Class == domain.ClassProvider && acc.Sub == domain.ProviderInTransit:
			inTransit = inTransit.Add(bal)
		case acc.Class == domain.ClassTax:
			tax = tax.Add(bal)
		case addr == domain.BankClient:
			r.Resource = bal
		}
	}
	r.Requirement = walletsPos.Add(pending).Add(available).Add(inTransit)
	r.TaxWithheld = tax
	held := r.Resource
	if r.BankStatementBalance != nil {
		held = *r.BankStatementBalance
	}
	r.Difference = held.Sub(r.Requirement.Add(r.TaxWithheld))
	switch {
	case r.Difference.IsZero():
		r.Verdict = VerdictBalanced
	case r.Difference.IsNegative():
		r.Verdict = VerdictShortfall
	default:
		r.Verdict = VerdictExcess
	}
	r.Lines = []ReportLine{
		{"requirement", "renter:*:wallet", plural(nPos, "renter wallet") + " in credit", walletsPos},
		{"requirement", "provider:*:pending:*", "provider earnings held in open cycles", pending},
		{"requirement", "provider:*:available", "settled provider earnings awaiting payout", available},
		{"requirement", "provider:*:in_transit", "submitted payouts not yet confirmed", inTransit},
		{"tax", "tax:withheld:*", "tax withheld not yet remitted", tax},
		{"resource", domain.BankClient, "segregated client bank account per the ledger", r.Resource},
	}
	if nNeg > 0 {
		r.Lines = append(r.Lines, ReportLine{"memo", "renter:*:wallet", plural(nNeg, "renter wallet") +
			" in debit: not offset against other clients' money", walletsNeg})
	}
	if r.BankStatementBalance != nil {
		r.Lines = append(r.Lines,
			ReportLine{"resource", "bank_statement", "imported bank statement balance of bank:client (used for the difference)", *r.BankStatementBalance},
			ReportLine{"memo", "bank_statement - bank:client", "unreconciled difference between statement and ledger", r.BankStatementBalance.Sub(r.Resource)})
	}
	// Breaches: only transactions touching a house account can cross pools.
	txIDs, err := postgres.TxIDsTouching(ctx, a.Pool, []string{domain.BankOperating, domain.PlatformCommission}, cur.Code, at)
	if err != nil {
		return nil, err
	}
	for start := 0; start < len(txIDs); start += pageSizeMax {
		end := min(start+pageSizeMax, len(txIDs))
		txs, err := postgres.LoadTransactions(ctx, a.Pool, txIDs[start:end])
		if err != nil {
			return nil, err
		}
		for _, t := range txs {
			for _, b := range domain.SegregationBreaches(t.Postings) {
				if b.Currency == cur.Code {
					r.Breaches = append(r.Breaches, ReportBreach{TransactionID: t.ID, EffectiveAt: t.EffectiveAt, Breach: b})
				}
			}
		}
	}
	return r, nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return itoa(n) + " " + what + "s"
}

func itoa(n int) string { return decimal.NewFromInt(int64(n)).String() }
