package app

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Page sizes.
const (
	pageSizeDefault = 100
	pageSizeMax     = 1000
)

// The listings' names in their page tokens (pkg/cursor).
const (
	accountsListing       = "ledger.accounts"
	journalListing        = "ledger.transactions"
	accountJournalListing = "ledger.account_transactions"
	cycleBalancesListing  = "ledger.cycle_balances"
)

func pageSize(n int32) int {
	switch {
	case n <= 0:
		return pageSizeDefault
	case n > pageSizeMax:
		return pageSizeMax
	}
	return int(n)
}

// Balance is an account's balance in one currency on its normal side.
type Balance struct {
	Currency string
	Amount   decimal.Decimal
}

// Format renders the amount with the currency's minor units.
func (b Balance) Format() string {
	if c, err := money.Lookup(b.Currency); err == nil {
		return c.Format(b.Amount)
	}
	return b.Amount.String()
}

// AccountView is an account with its balances.
type AccountView struct {
	Account  domain.Account
	Balances []Balance
}

func view(acc domain.Account, ts []domain.Totals) AccountView {
	v := AccountView{Account: acc, Balances: []Balance{}}
	for _, t := range ts {
		v.Balances = append(v.Balances, Balance{Currency: t.Currency, Amount: acc.NormalBalance(t.Debits, t.Credits)})
	}
	return v
}

// CheckAsOf refuses an as_of instant after now: the balances as of an
// instant not yet passed are today's, and would change (a report labelled
// year-end, made on its last afternoon, answered otherwise the next day).
func CheckAsOf(asOf *time.Time, now time.Time) error {
	if asOf != nil && asOf.After(now) {
		return apperr.Invalid("as_of", "%s is in the future (now %s): leave it out for the balances of now",
			asOf.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// GetAccount returns an account's balances, now or as of an instant.
func (a *App) GetAccount(ctx context.Context, address string, asOf *time.Time) (AccountView, error) {
	acc, err := domain.ParseAddress(address)
	if err != nil {
		return AccountView{}, apperr.Invalid("address", "%s", err.Error())
	}
	if err := CheckAsOf(asOf, a.Clock.Now()); err != nil {
		return AccountView{}, err
	}
	ok, err := a.Store.AccountExists(ctx, address)
	if err != nil {
		return AccountView{}, err
	}
	if !ok {
		return AccountView{}, fmt.Errorf("account %s has no postings: %w", address, apperr.ErrNotFound)
	}
	totals, err := a.Store.AccountTotals(ctx, []string{address}, asOf)
	if err != nil {
		return AccountView{}, err
	}
	return view(acc, totals[address]), nil
}

// ListAccounts pages through accounts by address prefix, with balances.
func (a *App) ListAccounts(ctx context.Context, prefix string, asOf *time.Time, size int32, token string) ([]AccountView, string, error) {
	if err := CheckAsOf(asOf, a.Clock.Now()); err != nil {
		return nil, "", err
	}
	if !utf8.ValidString(prefix) || strings.IndexByte(prefix, 0) >= 0 {
		return nil, "", apperr.Invalid("prefix", "not text (invalid UTF-8 or a NUL byte)")
	}
	after := ""
	if token != "" {
		pos, err := cursor.Decode(cursor.Scoped(accountsListing, prefix), token, 1)
		if err != nil {
			return nil, "", err
		}
		after = pos.String(0)
	}
	n := pageSize(size)
	addrs, err := a.Store.ListAccountAddresses(ctx, prefix, after, n+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(addrs) > n {
		addrs = addrs[:n]
		next = cursor.Encode(cursor.Scoped(accountsListing, prefix), addrs[n-1])
	}
	totals, err := a.Store.AccountTotals(ctx, addrs, asOf)
	if err != nil {
		return nil, "", err
	}
	out := make([]AccountView, 0, len(addrs))
	for _, addr := range addrs {
		acc, err := domain.ParseAddress(addr)
		if err != nil {
			acc = domain.Account{Address: addr}
		}
		out = append(out, view(acc, totals[addr]))
	}
	return out, next, nil
}

// GetTransaction returns one transaction.
func (a *App) GetTransaction(ctx context.Context, id string) (*domain.Transaction, error) {
	id, err := transactionID(id)
	if err != nil {
		return nil, err
	}
	return a.getTransaction(ctx, id)
}

// transactionID is id in the form the journal keeps: a UUID of 36
// characters, in lower case. uuid.Parse also takes no hyphens, a urn:uuid:
// prefix, and any two characters around one: passed on as given, one
// failed the database's cast (500) and another (upper case) matched no row
// (404) for a transaction that exists.
func transactionID(id string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return "", apperr.Invalid("transaction_id", "%q is not a transaction id", id)
	}
	return u.String(), nil
}

// MaxLookupKeys is how many idempotency keys one listing may name.
const MaxLookupKeys = 100

// ListTransactions pages through the journal, oldest first: every
// transaction in id (time) order, or those posting to one account in
// (created_at, id) order. A transaction takes its id and created_at before it
// commits, so one can commit after a later one was listed: a page token holds
// the snapshot its page was read under, and the next page starts with the
// transactions committed since that sort before it (domain.TxPage, in the
// order they were written), so a listing paged to its end has each
// transaction once. A page holds at most size: more late ones than that go
// on over the next pages (cutPage), and a token whose snapshot the journal
// has not had lately is a 400 on page_token. With keys it answers
// the transactions posted under them instead (of those posting to account
// when account is set), in one page.
func (a *App) ListTransactions(ctx context.Context, account string, keys []string, size int32, token string) ([]*domain.Transaction, string, error) {
	if len(keys) > 0 {
		txs, err := a.transactionsByKeys(ctx, account, keys, token)
		return txs, "", err
	}
	n := pageSize(size)
	var page domain.TxPage
	var next string
	var err error
	if account == "" {
		page, next, err = a.journalPage(ctx, n, token)
	} else {
		page, next, err = a.accountPage(ctx, account, n, token)
	}
	if err != nil {
		return nil, "", err
	}
	txIDs := make([]string, 0, len(page.Late)+len(page.Next))
	for _, c := range page.Late {
		txIDs = append(txIDs, c.ID)
	}
	for _, c := range page.Next {
		txIDs = append(txIDs, c.ID)
	}
	txs, err := a.Store.LoadTransactions(ctx, txIDs)
	return txs, next, err
}

// journalPage is a page of n of the whole journal after token's, and the
// next page's token ("" at the end).
func (a *App) journalPage(ctx context.Context, n int, token string) (domain.TxPage, string, error) {
	after := ""
	var from domain.TxLate
	if token != "" {
		pos, err := decodeLate(journalListing, token, 1, &from)
		if err != nil {
			return domain.TxPage{}, "", err
		}
		if after = pos.String(0); uuid.Validate(after) != nil {
			return domain.TxPage{}, "", cursor.Malformed()
		}
	}
	page, err := a.Store.ListTxIDs(ctx, after, from, n+1)
	if err != nil {
		return domain.TxPage{}, "", err
	}
	page, next, err := cutPage(page, from, n)
	if err != nil || next == nil {
		return page, "", err
	}
	if len(page.Next) > 0 {
		after = page.Next[len(page.Next)-1].ID
	}
	tok, err := encodeLate(journalListing, *next, after)
	return page, tok, err
}

// accountPage is a page of n of account's transactions after token's, and
// the next page's token ("" at the end).
func (a *App) accountPage(ctx context.Context, account string, n int, token string) (domain.TxPage, string, error) {
	if _, err := domain.ParseAddress(account); err != nil {
		return domain.TxPage{}, "", apperr.Invalid("account", "%s", err.Error())
	}
	listing := cursor.Scoped(accountJournalListing, account)
	var after *domain.TxCursor
	var from domain.TxLate
	if token != "" {
		pos, err := decodeLate(listing, token, 2, &from)
		if err != nil {
			return domain.TxPage{}, "", err
		}
		at, err := pos.Time(0)
		if err != nil {
			return domain.TxPage{}, "", err
		}
		if uuid.Validate(pos.String(1)) != nil {
			return domain.TxPage{}, "", cursor.Malformed()
		}
		after = &domain.TxCursor{CreatedAt: at, ID: pos.String(1)}
	}
	page, err := a.Store.ListTxIDsByAccount(ctx, account, after, from, n+1)
	if err != nil {
		return domain.TxPage{}, "", err
	}
	page, next, err := cutPage(page, from, n)
	if err != nil || next == nil {
		return page, "", err
	}
	if len(page.Next) > 0 {
		after = &page.Next[len(page.Next)-1]
	}
	tok, err := encodeLate(listing, *next, cursor.FormatTime(after.CreatedAt), after.ID)
	return page, tok, err
}

// transactionsByKeys answers the transactions posted under keys (a service
// asking whether its writes landed), of those posting to account when it
// is set, in id order.
func (a *App) transactionsByKeys(ctx context.Context, account string, keys []string, token string) ([]*domain.Transaction, error) {
	var v apperr.Validator
	v.Check(len(keys) <= MaxLookupKeys, "idempotency_keys", "at most %d keys, got %d", MaxLookupKeys, len(keys))
	v.Check(token == "", "page_token", "a listing by idempotency_keys is one page")
	for i, k := range keys {
		if k == "" {
			v.Add(fmt.Sprintf("idempotency_keys[%d]", i), "empty")
			break
		}
	}
	if account != "" {
		if _, err := domain.ParseAddress(account); err != nil {
			v.Add("account", "%s", err.Error())
		}
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	ids, err := a.Store.TxIDsByKeys(ctx, keys)
	if err != nil {
		return nil, err
	}
	txs, err := a.Store.LoadTransactions(ctx, ids)
	if err != nil || account == "" {
		return txs, err
	}
	out := txs[:0]
	for _, t := range txs {
		if slices.ContainsFunc(t.Postings, func(p domain.Posting) bool { return p.Account.Address == account }) {
			out = append(out, t)
		}
	}
	return out, nil
}

// TransactionsByIDs answers the transactions ids name (at most
// MaxLookupKeys, each a transaction id), in id order, each with its
// reverses / reversed_by links: an id the journal holds nothing under is
// left out. One query for a service reading many entries at once (payout's
// settled-outside check asked GetTransaction once per claimed entry, every
// pass, on every replica).
func (a *App) TransactionsByIDs(ctx context.Context, ids []string) ([]*domain.Transaction, error) {
	var v apperr.Validator
	v.Check(len(ids) <= MaxLookupKeys, "transaction_ids", "at most %d ids, got %d", MaxLookupKeys, len(ids))
	norm := make([]string, 0, len(ids))
	for i, id := range ids {
		n, err := transactionID(id)
		if err != nil {
			v.Add(fmt.Sprintf("transaction_ids[%d]", i), "%q is not a transaction id", id)
			break
		}
		norm = append(norm, n)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	slices.Sort(norm)
	return a.Store.LoadTransactions(ctx, slices.Compact(norm))
}

// CycleBalanceView is one provider's pending balance in a cycle.
type CycleBalanceView struct {
	ProviderID string
	Balance    Balance
}

// ListCycleBalances pages through the providers' pending balances of a cycle.
func (a *App) ListCycleBalances(ctx context.Context, cycleID string, size int32, token string) ([]CycleBalanceView, string, error) {
	if err := domain.CheckCycleID(cycleID); err != nil {
		return nil, "", apperr.Invalid("cycle_id", "%s", err.Error())
	}
	var afterAcc, afterCur string
	if token != "" {
		// Not scoped by the cycle (its accounts name it): settlement's
		// snapshot resumes from a token a ledger of the version before
		// issued, across an upgrade, and a refusal failed the cycle's close.
		pos, err := cursor.Decode(cycleBalancesListing, token, 2)
		if err != nil {
			return nil, "", err
		}
		afterAcc, afterCur = pos.String(0), pos.String(1)
	}
	n := pageSize(size)
	bs, err := a.Store.ListCycleBalances(ctx, cycleID, afterAcc, afterCur, n+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(bs) > n {
		bs = bs[:n]
		next = cursor.Encode(cycleBalancesListing, bs[n-1].Account, bs[n-1].Currency)
	}
	out := make([]CycleBalanceView, 0, len(bs))
	for _, b := range bs {
		acc, err := domain.ParseAddress(b.Account)
		if err != nil {
			return nil, "", err
		}
		out = append(out, CycleBalanceView{ProviderID: acc.Party, Balance: Balance{Currency: b.Currency, Amount: b.Amount}})
	}
	return out, next, nil
}

// StatementLines are the lines of a provider's statement (internal:
// settlement) from its pending account in a currency, the settlement's own
// transactions (exclude) left out. A line of one entry carries the entry's
// text only as far as the provider may read the entry (ProviderLine.ReadBy).
func (a *App) StatementLines(ctx context.Context, account, currency string, exclude []string) ([]domain.ProviderLine, error) {
	var v apperr.Validator
	addr, err := domain.ParseAddress(account)
	switch {
	case err != nil:
		v.Add("account", "%s", err.Error())
	case addr.Class != domain.ClassProvider || addr.Sub != domain.ProviderPending:
		v.Add("account", "want a provider's pending account (provider:{id}:pending:{cycle})")
	}
	cur, err := money.Lookup(currency)
	if err != nil {
		v.Add("currency", "%s", err.Error())
	}
	ids := make([]string, 0, len(exclude))
	for i, id := range exclude {
		if _, err := transactionID(id); err != nil {
			v.Add(fmt.Sprintf("exclude_transaction_ids[%d]", i), "not a transaction id")
			break
		}
		ids = append(ids, id)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	ls, err := a.Store.StatementLines(ctx, account, cur.Code, ids)
	if err != nil {
		return nil, err
	}
	own := domain.PartyPrefix(domain.ClassProvider, addr.Party)
	for i := range ls {
		ls[i] = ls[i].ReadBy(own)
	}
	return domain.FoldLines(ls, StatementLinesMax), nil
}

// StatementLinesMax bounds a statement's lines (domain.FoldLines).
const StatementLinesMax = 2000
