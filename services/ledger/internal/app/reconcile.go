package app

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/cursor"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Limits of the reconciliation API.
const (
	reconPageDefault = 50
	reconPageMax     = 500
	// chainLagMax bounds how long before the previous run's chain head a
	// transaction chained after it may have been created (a write's wait
	// for its database transaction, clocks apart). Bounded by the run's
	// own time instead, a transaction chained more than this after it was
	// created (chaining waits for every older database transaction to end,
	// an open psql session's too) fell between two runs, in neither.
	chainLagMax = time.Hour
	// reconKeyRetention is how long a run's idempotency key answers it (as
	// an idempotent API's keys do, Stripe's 24 h): long enough for every
	// retry of the daily schedule's activity (6 h at most), short enough
	// that a key reused the next day, statements imported since, is refused
	// rather than answering yesterday's run to a user expecting a new one.
	reconKeyRetention = 24 * time.Hour
	// reconItemsAnswerMax bounds the matched and unmatched items a run's
	// answer carries (ListItems pages the rest): ~141 B an item over gRPC
	// (~280 B in JSON), every item of a run of 30 000 outgrew a 4 MiB gRPC
	// receive limit, and a finance client got tens of MB in one answer.
	reconItemsAnswerMax = 1000
	// Pages of ListItems.
	reconItemsPageDefault = 500
	reconItemsPageMax     = 1000
	// reconFindingsAnswerMax bounds the statement breaks and the cash
	// differences a run's answer carries (Findings pages the rest): a
	// statement of a year of daily closes, each proof of cash failing, made
	// 365 of each (~500 B apiece in JSON), and a run taking years of them
	// answered megabytes.
	reconFindingsAnswerMax = 100
	reconFindingsPageMax   = 1000
	// reconResolutionsAnswerMax bounds the resolutions, and apart the
	// reopened ones, a run's answer carries (ResolutionPage pages the
	// rest): each holds up to resolveItemsMax items (~28 KB at most in
	// JSON), and finance may resolve a year's exceptions one by one.
	reconResolutionsAnswerMax = 50
	reconResolutionsPageMax   = 100
	// reconResolutionItemsAnswerMax bounds the items each resolution in
	// any answer carries (ResolutionItems pages the rest): a resolution
	// holds up to resolveItemsMax, and a run's answer of 50 such weighed
	// 1.6 MB in JSON (a page of 100 resolutions, ~3.2 MB). Ten keep a
	// typical match (a line and its few movements) whole.
	reconResolutionItemsAnswerMax = 10
	// Pages of ResolutionItems: a resolution's every item at most.
	reconResolutionItemsPageMax = resolveItemsMax
)

// reconAnswerRead is what an answer of a kept run reads of it: one more
// item than it carries (whether to give a token), the first of each
// other list (their counts say whether more are left).
var reconAnswerRead = domain.ReconRead{Items: reconItemsAnswerMax + 1, Breaks: reconFindingsAnswerMax,
	CashDifferences: reconFindingsAnswerMax, Resolutions: reconResolutionsAnswerMax, ResolutionItems: reconResolutionItemsAnswerMax}

// reconSummaryRead is what a summary answer of a kept run reads of it: its
// counts, none of its lists (a keyed replay read an answer's page of each,
// then dropped them).
var reconSummaryRead = domain.ReconRead{CountsOnly: true}

// ReconciliationStore keeps reconciliation runs (adapters/postgres).
type ReconciliationStore interface {
	// StatementCurrencies lists the currencies with an imported statement.
	StatementCurrencies(ctx context.Context) ([]string, error)
	// BeginRun opens a run of the currency: a transaction in which no other
	// run of that currency proceeds until Commit or Rollback.
	BeginRun(ctx context.Context, currency string) (ReconRunTx, error)
	// ListRuns pages runs newest first ("" currency: any), before seq when
	// beforeSeq > 0, without their items.
	ListRuns(ctx context.Context, currency string, beforeSeq int64, limit int) ([]domain.ReconRun, error)
	// GetRun returns a run with its items and resolutions as bounded by b
	// (apperr.ErrNotFound if none).
	GetRun(ctx context.Context, id string, b domain.ReconRead) (*domain.ReconRun, error)
	// ListItems returns up to limit of a run's matched and unmatched items
	// in the run's order, after the one numbered afterNo, and the run's
	// currency (apperr.ErrNotFound if no run).
	ListItems(ctx context.Context, id string, afterNo, limit int) (string, []domain.ReconItem, error)
	// ListFindings returns a run (its id and currency) holding up to limit
	// of its statement breaks (kind domain.ReconItemStatementBreak) or cash
	// differences (domain.ReconItemCashDifference) in the run's order,
	// after the first skip (apperr.ErrNotFound if no run).
	ListFindings(ctx context.Context, id, kind string, skip, limit int) (*domain.ReconRun, error)
	// ListResolutions returns up to limit of a run's resolutions (reopened:
	// its reopened ones) oldest first, after after (nil: from the first),
	// and the run's currency (apperr.ErrNotFound if no run), each with its
	// first itemsUpTo items (0: every one) and its item count.
	ListResolutions(ctx context.Context, id string, reopened bool, after *domain.ResolutionPos, limit, itemsUpTo int) (string, []domain.ReconResolution, error)
	// ListResolutionItems returns up to limit of the items of run id's
	// resolution resID in their order, after the one numbered afterNo, and
	// the run's currency (apperr.ErrNotFound if the run has no such
	// resolution).
	ListResolutionItems(ctx context.Context, id, resID string, afterNo, limit int) (string, []domain.ReconItem, error)
}

// ReconRunTx reads what a run needs and stores it, in one transaction.
type ReconRunTx interface {
	// Previous is the currency's last run with its unmatched items (nil: none).
	Previous(ctx context.Context) (*domain.ReconRun, error)
	// KeyHolder holds the idempotency key until Commit or Rollback (no
	// other run of any currency takes it meanwhile) and returns the first
	// run of any currency stored with it (nil: none).
	KeyHolder(ctx context.Context, key string) (*domain.ReconKeyHolder, error)
	// Keyed is the currency's run stored with the idempotency key, with its
	// items as bounded by b (nil: none).
	Keyed(ctx context.Context, key string, b domain.ReconRead) (*domain.ReconRun, error)
	// FreshLines returns the statements of the currency no run has taken,
	// oldest closing first, and their lines in statement and line order.
	FreshLines(ctx context.Context) ([]string, []domain.BankLine, error)
	// Statements returns every statement of the currency, without lines.
	Statements(ctx context.Context) ([]domain.ImportedStatement, error)
	ChainHead(ctx context.Context) (string, int64, error)
	// Movements are the currency's bank:client movements (one per
	// transaction, classified) chained at positions (after, upto]. Only
	// postings created at most lag before the transaction at position
	// after are read: every transaction chained after it was created after
	// it less the time a write waits for its database transaction (the
	// chain takes them in the order their database transactions began).
	Movements(ctx context.Context, after, upto int64, lag time.Duration) ([]domain.Movement, error)
	// LatestClose is when the latest of the currency's statements that
	// this run (taken) or an earlier one took closes (false: none yet).
	LatestClose(ctx context.Context, taken []string) (time.Time, bool, error)
	// CashAt reads the proof of cash's figures at closeAt (a statement's
	// close) but for the items of this run, which the caller adds: the
	// accounts' closing balances by then among the statements taken (by
	// this run: taken, or an earlier one), bank:client then as of the chain
	// head at headPosition, and in transit then the items of earlier runs
	// (matched ones whose sides fall either side of closeAt) and of every
	// resolution by hand.
	CashAt(ctx context.Context, closeAt time.Time, taken []string, headPosition int64) (domain.CashFigures, error)
	// Balances: the sum of each account's latest statement closing balance
	// (nil: none) and bank:client in the ledger now.
	Balances(ctx context.Context) (*decimal.Decimal, decimal.Decimal, error)
	// Save stores the run (its Seq set), its statements and its items.
	Save(ctx context.Context, run *domain.ReconRun) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// Reconciliations are the bank reconciliation use cases.
type Reconciliations struct {
	Store       ReconciliationStore
	Resolutions ResolutionStore
	Now         func() time.Time
}

func (r *Reconciliations) now() time.Time { return r.Now().UTC().Truncate(time.Microsecond) }

// Run reconciles one currency, or every currency with a statement when
// currency is "": the statements no run has taken and the bank:client
// movements chained since the currency's previous run, with what that run
// left unmatched, matched by domain.Reconcile, and kept.
func (r *Reconciliations) Run(ctx context.Context, currency, trigger, requestedBy string) ([]*domain.ReconRun, error) {
	return r.RunKeyed(ctx, currency, trigger, requestedBy, "")
}

// RunKeyed is Run with an idempotency key ("" none): a currency whose run
// holds the key answers that run as it was, the others run and keep the
// key. The daily schedule's activity passes one per scheduled run: each of
// its retries (an answer lost after the run was stored) stored a new run
// with every unmatched item again. The key answers only the request that
// stored it (the same currency, or every currency), and only for
// reconKeyRetention: another request under it, or any after that, is
// apperr.ErrConflict naming the key and the run holding it (a reuse
// answered the old run silently, or stored a second run of another
// currency under the key). The caller is part of the request, as a
// ledger transaction's body is of its key's: another caller's request
// under the key (another finance user, the service identity) is refused
// too; it was answered the run of the caller that stored it. Statements imported since do not refuse it: a
// retry must answer the run its lost answer stored.
func (r *Reconciliations) RunKeyed(ctx context.Context, currency, trigger, requestedBy, key string) ([]*domain.ReconRun, error) {
	return r.runKeyed(ctx, currency, trigger, requestedBy, key, reconAnswerRead)
}

// RunKeyedSummary is RunKeyed for an answer of each run's counts alone
// (summary_only): a run the key holds is read without its lists. A new
// run is answered as RunKeyed's, its lists for the caller to drop.
func (r *Reconciliations) RunKeyedSummary(ctx context.Context, currency, trigger, requestedBy, key string) ([]*domain.ReconRun, error) {
	return r.runKeyed(ctx, currency, trigger, requestedBy, key, reconSummaryRead)
}

// runKeyed is RunKeyed reading a run the key holds as read says.
func (r *Reconciliations) runKeyed(ctx context.Context, currency, trigger, requestedBy, key string, read domain.ReconRead) ([]*domain.ReconRun, error) {
	if len(key) > domain.IdempotencyKeyMax {
		return nil, apperr.Invalid("idempotency_key", "at most %d bytes", domain.IdempotencyKeyMax)
	}
	var curs []string
	if currency == "" {
		var err error
		if curs, err = r.Store.StatementCurrencies(ctx); err != nil {
			return nil, err
		}
	} else {
		c, err := money.Lookup(currency)
		if err != nil {
			return nil, apperr.Invalid("currency", "%s", err.Error())
		}
		curs = []string{c.Code}
	}
	out := make([]*domain.ReconRun, 0, len(curs))
	for _, c := range curs {
		run, err := r.runOne(ctx, c, currency, trigger, requestedBy, key, read)
		if err != nil {
			return out, fmt.Errorf("reconcile %s: %w", c, err)
		}
		bound(run)
		out = append(out, run)
	}
	return out, nil
}

// runOne runs currency's reconciliation for a request of requested ("":
// every currency), under key ("" none), a run the key holds read as read
// says.
func (r *Reconciliations) runOne(ctx context.Context, currency, requested, trigger, requestedBy, key string, read domain.ReconRead) (*domain.ReconRun, error) {
	rd, err := r.Store.BeginRun(ctx, currency)
	if err != nil {
		return nil, err
	}
	defer rd.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit: a no-op
	if key != "" {
		// Under the currency's run lock and the key's: a run with the key
		// is committed or not, and none other takes it meanwhile.
		if err := r.checkKey(ctx, rd, key, requested, requestedBy); err != nil {
			return nil, err
		}
		// Only what the answer carries: a replay of a run of a year's
		// statement read every item of it to answer its first.
		if run, err := rd.Keyed(ctx, key, read); err != nil || run != nil {
			return run, err
		}
	}
	run, err := r.reconcile(ctx, rd, currency, trigger, requestedBy, key)
	if err != nil {
		return nil, err
	}
	run.RequestedCurrency = requested
	if err := rd.Save(ctx, run); err != nil {
		return nil, err
	}
	if err := rd.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit reconciliation: %w", err)
	}
	return run, nil
}

// checkKey refuses key (apperr.ErrConflict) when a run holds it for
// another request than one of requested by requestedBy, or for longer than
// reconKeyRetention.
func (r *Reconciliations) checkKey(ctx context.Context, rd ReconRunTx, key, requested, requestedBy string) error {
	h, err := rd.KeyHolder(ctx, key)
	if err != nil || h == nil {
		return err
	}
	scope := func(c string) string {
		if c == "" {
			return "every currency"
		}
		return c
	}
	if h.RequestedCurrency != nil && *h.RequestedCurrency != requested {
		return fmt.Errorf("idempotency key %q is held by reconciliation %s, run for a request of %s: a request of %s needs a key of its own: %w",
			key, h.RunID, scope(*h.RequestedCurrency), scope(requested), apperr.ErrConflict)
	}
	if h.RequestedBy != requestedBy {
		// The holder's identity is not named: the key is all the caller
		// sent, and a key says nothing of who else uses it.
		return fmt.Errorf("idempotency key %q is held by reconciliation %s, run for another caller: a request needs a key of its own: %w",
			key, h.RunID, apperr.ErrConflict)
	}
	if age := r.now().Sub(h.CreatedAt); age > reconKeyRetention {
		return fmt.Errorf("idempotency key %q is held by reconciliation %s of %s, older than the %s a key answers its run: a new run needs a new key: %w",
			key, h.RunID, h.CreatedAt.Format(time.RFC3339), reconKeyRetention, apperr.ErrConflict)
	}
	return nil
}

// reconcile makes the currency's run in rd, not stored yet.
func (r *Reconciliations) reconcile(ctx context.Context, rd ReconRunTx, currency, trigger, requestedBy, key string) (*domain.ReconRun, error) {
	prev, err := rd.Previous(ctx)
	if err != nil {
		return nil, err
	}
	hash, pos, err := rd.ChainHead(ctx)
	if err != nil {
		return nil, err
	}
	run := &domain.ReconRun{ID: ids.New("rec"), Currency: currency, Trigger: trigger, RequestedBy: requestedBy, Key: key,
		CreatedAt: r.now(), HeadHash: hash, HeadPosition: pos}
	var lines []domain.BankLine
	var moves []domain.Movement
	after := int64(0)
	if prev != nil {
		run.PreviousID = prev.ID
		after = prev.HeadPosition
		// Less what finance resolved by hand: carried, a line no
		// reference matches stayed an exception in every run.
		lines, moves = prev.Carried()
		// What the run takes over again of the resolutions voided while
		// prev was the latest, as a read of the run lists them
		// (runResolutions; bound keeps an answer's first): its own
		// answer carried none.
		run.Reopened, run.ReopenedN = prev.Voided, len(prev.Voided)
	}
	stIDs, fresh, err := rd.FreshLines(ctx)
	if err != nil {
		return nil, err
	}
	run.StatementIDs, lines = stIDs, append(lines, fresh...)
	newMoves, err := rd.Movements(ctx, after, pos, chainLagMax)
	if err != nil {
		return nil, err
	}
	moves = append(moves, newMoves...)
	if run.BankClosing, run.LedgerBankClient, err = rd.Balances(ctx); err != nil {
		return nil, err
	}
	sts, err := rd.Statements(ctx)
	if err != nil {
		return nil, err
	}
	run.Result = domain.Reconcile(lines, moves)
	// Over every statement, not only this run's: a gap stays an exception
	// run after run until the missing statement is imported, whenever it is.
	run.Result.Breaks = domain.StatementBreaks(sts)
	closeAt, ok, err := rd.LatestClose(ctx, run.StatementIDs)
	if err != nil {
		return nil, err
	}
	if ok {
		// Before any statement nothing is outstanding: there is no
		// statement the bank could have shown a movement on yet. Judged by
		// the run's time too: with no new statement, a movement stays
		// outstanding only while the statement showing it may be on its way.
		run.Result.MarkOutstanding(closeAt, run.CreatedAt)
	}
	if run.Result.CashDifferences, err = r.proveCash(ctx, rd, run, sts, closeAt, ok); err != nil {
		return nil, err
	}
	run.Tally()
	return run, nil
}

// proveCash checks the proof of cash at the close of each statement the
// run took, or when it took none at the latest close an earlier run took
// (latest, when hasLatest), so a difference stays an exception run after
// run until it is explained: bank:client at the close, plus the lines the
// ledger had not recorded by then, less the movements the bank had not
// shown by then, is the accounts' closing balance, exactly. Matching line
// by line never sees money the bank holds or lacks that no line shows (an
// account opening with a balance the ledger never recorded), nor a
// bank:client movement no run took: every item can match.
func (r *Reconciliations) proveCash(ctx context.Context, rd ReconRunTx, run *domain.ReconRun, sts []domain.ImportedStatement,
	latest time.Time, hasLatest bool) ([]domain.CashDifference, error) {
	closes := make(map[string]time.Time, len(sts))
	for _, st := range sts {
		closes[st.ID] = st.ClosingAt
	}
	// One proof per close: each account's latest statement by then counts.
	var at []domain.ImportedStatement
	seen := map[time.Time]bool{}
	pick := func(st domain.ImportedStatement) {
		if c := st.ClosingAt.UTC(); !seen[c] {
			seen[c] = true
			at = append(at, st)
		}
	}
	sorted := slices.Clone(sts)
	slices.SortFunc(sorted, func(a, b domain.ImportedStatement) int {
		if c := a.ClosingAt.Compare(b.ClosingAt); c != 0 {
			return c
		}
		if c := strings.Compare(a.Account, b.Account); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	for _, st := range sorted {
		if slices.Contains(run.StatementIDs, st.ID) {
			pick(st)
		}
	}
	if len(run.StatementIDs) == 0 && hasLatest {
		for _, st := range sorted {
			if st.ClosingAt.Equal(latest) {
				pick(st)
				break
			}
		}
	}
	var out []domain.CashDifference
	for _, st := range at {
		fig, err := rd.CashAt(ctx, st.ClosingAt, run.StatementIDs, run.HeadPosition)
		if err != nil {
			return nil, fmt.Errorf("proof of cash at %s's close: %w", st.ID, err)
		}
		if d := domain.ProveCash(st, fig.Add(run.Result.InTransit(st.ClosingAt, closes))); d != nil {
			out = append(out, *d)
		}
	}
	return out, nil
}

// reconListing names the listing in its page tokens (pkg/cursor).
const reconListing = "ledger.reconciliations"

// List pages runs newest first; the token is the last run's order.
func (r *Reconciliations) List(ctx context.Context, currency string, pageSize int32, pageToken string) ([]domain.ReconRun, string, error) {
	var v apperr.Validator
	v.Check(pageSize >= 0 && pageSize <= reconPageMax, "page_size", "want 0..%d", reconPageMax)
	limit := int(pageSize)
	if limit == 0 {
		limit = reconPageDefault
	}
	if currency != "" {
		// Runs record the code: ?currency=cny matched none.
		c, err := money.Lookup(currency)
		v.Check(err == nil, "currency", "unknown currency %q", currency)
		currency = c.Code
	}
	if err := v.Err(); err != nil {
		return nil, "", err
	}
	listing := cursor.Scoped(reconListing, currency)
	var before int64
	if pageToken != "" {
		pos, err := cursor.Decode(listing, pageToken, 1)
		if err != nil {
			return nil, "", err
		}
		if before, err = pos.Int64(0); err != nil || before <= 0 {
			return nil, "", cursor.Malformed()
		}
	}
	runs, err := r.Store.ListRuns(ctx, currency, before, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(runs) > limit {
		runs = runs[:limit]
		next = cursor.Encode(listing, cursor.FormatInt64(runs[limit-1].Seq))
	}
	return runs, next, nil
}

// Get returns one run with the first of each of its lists (bound; Items,
// Findings and ResolutionPage page the rest).
func (r *Reconciliations) Get(ctx context.Context, id string) (*domain.ReconRun, error) {
	if id == "" {
		return nil, apperr.Invalid("reconciliation_id", "required")
	}
	run, err := r.Store.GetRun(ctx, id, reconAnswerRead)
	if err != nil {
		return nil, err
	}
	bound(run)
	return run, nil
}

// reconItemsListing names a run's items in their page tokens (pkg/cursor),
// scoped by the run's id.
const reconItemsListing = "ledger.reconciliation_items"

// Listings of a run's statement breaks, cash differences, resolutions and
// reopened resolutions in their page tokens, each scoped by the run's id.
const (
	reconBreaksListing      = "ledger.reconciliation_statement_breaks"
	reconCashListing        = "ledger.reconciliation_cash_differences"
	reconResolutionsListing = "ledger.reconciliation_resolutions"
	reconReopenedListing    = "ledger.reconciliation_reopened_resolutions"
	// A resolution's items, scoped by its run's id and its own.
	reconResolutionItemsListing = "ledger.reconciliation_resolution_items"
)

// findingsListing names the listing of a kind of ListFindings.
func findingsListing(kind, id string) string {
	if kind == domain.ReconItemStatementBreak {
		return cursor.Scoped(reconBreaksListing, id)
	}
	return cursor.Scoped(reconCashListing, id)
}

// resolutionsListing names the listing of a run's resolutions (reopened:
// its reopened ones).
func resolutionsListing(id string, reopened bool) string {
	if reopened {
		return cursor.Scoped(reconReopenedListing, id)
	}
	return cursor.Scoped(reconResolutionsListing, id)
}

// bound bounds an answered run to its first reconItemsAnswerMax matched
// and unmatched items, reconFindingsAnswerMax statement breaks and cash
// differences and reconResolutionsAnswerMax resolutions and reopened ones,
// with the page token of each list's rest.
func bound(run *domain.ReconRun) {
	if run.KeepItems(reconItemsAnswerMax) {
		run.ItemsNext = cursor.Encode(cursor.Scoped(reconItemsListing, run.ID), cursor.FormatInt64(reconItemsAnswerMax))
	}
	res := &run.Result
	if n := len(res.Breaks); n > reconFindingsAnswerMax || (n > 0 && run.BreakN > n) {
		res.Breaks = res.Breaks[:min(n, reconFindingsAnswerMax)]
		run.BreaksNext = cursor.Encode(findingsListing(domain.ReconItemStatementBreak, run.ID), cursor.FormatInt64(int64(len(res.Breaks))))
	}
	if n := len(res.CashDifferences); n > reconFindingsAnswerMax || (n > 0 && run.CashDifferenceN > n) {
		res.CashDifferences = res.CashDifferences[:min(n, reconFindingsAnswerMax)]
		run.CashDifferencesNext = cursor.Encode(findingsListing(domain.ReconItemCashDifference, run.ID), cursor.FormatInt64(int64(len(res.CashDifferences))))
	}
	run.ResolutionN, run.ReopenedN = max(run.ResolutionN, len(run.Resolutions)), max(run.ReopenedN, len(run.Reopened))
	for i := range run.Resolutions {
		BoundResolution(&run.Resolutions[i])
	}
	for i := range run.Reopened {
		BoundResolution(&run.Reopened[i])
	}
	if n := len(run.Resolutions); n > reconResolutionsAnswerMax || (n > 0 && run.ResolutionN > n) {
		run.Resolutions = run.Resolutions[:min(n, reconResolutionsAnswerMax)]
		run.ResolutionsNext = resolutionToken(run.ID, false, run.Resolutions[len(run.Resolutions)-1])
	}
	if n := len(run.Reopened); n > reconResolutionsAnswerMax || (n > 0 && run.ReopenedN > n) {
		run.Reopened = run.Reopened[:min(n, reconResolutionsAnswerMax)]
		run.ReopenedNext = resolutionToken(run.ID, true, run.Reopened[len(run.Reopened)-1])
	}
}

// BoundResolution bounds an answered resolution to its first
// reconResolutionItemsAnswerMax items (its lines, then its movements, in
// their order), with its item count and, when it has more, the page token
// of the rest. Whole or read bounded (ReconRead.ResolutionItems), and
// again: the same.
func BoundResolution(res *domain.ReconResolution) {
	n := len(res.Lines) + len(res.Movements)
	res.ItemN = max(res.ItemN, n)
	if len(res.Lines) >= reconResolutionItemsAnswerMax {
		res.Lines, res.Movements = res.Lines[:reconResolutionItemsAnswerMax], nil
	} else if n > reconResolutionItemsAnswerMax {
		res.Movements = res.Movements[:reconResolutionItemsAnswerMax-len(res.Lines)]
	}
	// Items are numbered from 1 in this order (insertResolution): the
	// token is the last one answered.
	if kept := len(res.Lines) + len(res.Movements); res.ItemN > kept {
		res.ItemsNext = cursor.Encode(resolutionItemsListing(res.ReconciliationID, res.ID), cursor.FormatInt64(int64(kept)))
	}
}

// resolutionItemsListing names the listing of run id's resolution resID's
// items.
func resolutionItemsListing(id, resID string) string {
	return cursor.Scoped(reconResolutionItemsListing, id, resID)
}

// ResolutionItems pages the items of run id's resolution resID in their
// order (lines, then movements), with the run's currency; the token is the
// last item's number. A line's Status is domain.ReconItemUnmatchedInBank,
// a movement's domain.ReconItemUnmatchedInLedger.
func (r *Reconciliations) ResolutionItems(ctx context.Context, id, resID string, pageSize int32, pageToken string) (string, []domain.ReconItem, string, error) {
	var v apperr.Validator
	v.Check(id != "", "reconciliation_id", "required")
	v.Check(resID != "", "resolution_id", "required")
	limit := pageLimit(&v, pageSize, reconResolutionItemsPageMax, reconResolutionItemsPageMax)
	if err := v.Err(); err != nil {
		return "", nil, "", err
	}
	listing := resolutionItemsListing(id, resID)
	after, err := itemAfter(listing, pageToken)
	if err != nil {
		return "", nil, "", err
	}
	currency, items, err := r.Store.ListResolutionItems(ctx, id, resID, after, limit+1)
	if err != nil {
		return "", nil, "", err
	}
	items, next := itemsPage(listing, items, limit)
	return currency, items, next, nil
}

// itemAfter is the item number a page token of an item listing (Items,
// ResolutionItems) names, the last one its page held; 0 for no token.
func itemAfter(listing, pageToken string) (int, error) {
	if pageToken == "" {
		return 0, nil
	}
	pos, err := cursor.Decode(listing, pageToken, 1)
	if err != nil {
		return 0, err
	}
	after, err := pos.Int64(0)
	if err != nil || after <= 0 || after > math.MaxInt32 {
		return 0, cursor.Malformed()
	}
	return int(after), nil
}

// itemsPage cuts items, read one past a page of limit, to the page and
// the token of the page after it (its last item's number; "" when none).
func itemsPage(listing string, items []domain.ReconItem, limit int) ([]domain.ReconItem, string) {
	if len(items) <= limit {
		return items, ""
	}
	items = items[:limit]
	return items, cursor.Encode(listing, cursor.FormatInt64(int64(items[limit-1].No)))
}

// resolutionToken is the page token of a run's resolutions after last.
func resolutionToken(id string, reopened bool, last domain.ReconResolution) string {
	return cursor.Encode(resolutionsListing(id, reopened), cursor.FormatTime(last.CreatedAt), last.ID)
}

// pageLimit checks a page size against its default and most.
func pageLimit(v *apperr.Validator, pageSize int32, def, most int) int {
	v.Check(pageSize >= 0 && int(pageSize) <= most, "page_size", "want 0..%d", most)
	if pageSize == 0 {
		return def
	}
	return int(pageSize)
}

// Findings pages a run's statement breaks (kind
// domain.ReconItemStatementBreak) or cash differences
// (domain.ReconItemCashDifference) in the run's order, in a run holding
// only them (and its id and currency); the token counts those read.
func (r *Reconciliations) Findings(ctx context.Context, id, kind string, pageSize int32, pageToken string) (*domain.ReconRun, string, error) {
	var v apperr.Validator
	v.Check(id != "", "reconciliation_id", "required")
	limit := pageLimit(&v, pageSize, reconFindingsAnswerMax, reconFindingsPageMax)
	if err := v.Err(); err != nil {
		return nil, "", err
	}
	listing := findingsListing(kind, id)
	var skip int64
	if pageToken != "" {
		pos, err := cursor.Decode(listing, pageToken, 1)
		if err != nil {
			return nil, "", err
		}
		if skip, err = pos.Int64(0); err != nil || skip <= 0 || skip > math.MaxInt32 {
			return nil, "", cursor.Malformed()
		}
	}
	run, err := r.Store.ListFindings(ctx, id, kind, int(skip), limit+1)
	if err != nil {
		return nil, "", err
	}
	res, next := &run.Result, ""
	if len(res.Breaks) > limit {
		res.Breaks, next = res.Breaks[:limit], cursor.Encode(listing, cursor.FormatInt64(skip+int64(limit)))
	}
	if len(res.CashDifferences) > limit {
		res.CashDifferences, next = res.CashDifferences[:limit], cursor.Encode(listing, cursor.FormatInt64(skip+int64(limit)))
	}
	return run, next, nil
}

// ResolutionPage pages a run's resolutions (reopened: its reopened ones)
// oldest first, with the run's currency; the token is the last one's
// place.
func (r *Reconciliations) ResolutionPage(ctx context.Context, id string, reopened bool, pageSize int32, pageToken string) (string, []domain.ReconResolution, string, error) {
	var v apperr.Validator
	v.Check(id != "", "reconciliation_id", "required")
	limit := pageLimit(&v, pageSize, reconResolutionsAnswerMax, reconResolutionsPageMax)
	if err := v.Err(); err != nil {
		return "", nil, "", err
	}
	listing := resolutionsListing(id, reopened)
	var after *domain.ResolutionPos
	if pageToken != "" {
		pos, err := cursor.Decode(listing, pageToken, 2)
		if err != nil {
			return "", nil, "", err
		}
		at, err := pos.Time(0)
		if err != nil || pos.String(1) == "" {
			return "", nil, "", cursor.Malformed()
		}
		after = &domain.ResolutionPos{CreatedAt: at, ID: pos.String(1)}
	}
	currency, out, err := r.Store.ListResolutions(ctx, id, reopened, after, limit+1, reconResolutionItemsAnswerMax)
	if err != nil {
		return "", nil, "", err
	}
	for i := range out {
		BoundResolution(&out[i])
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = resolutionToken(id, reopened, out[limit-1])
	}
	return currency, out, next, nil
}

// Items pages a run's matched and unmatched items in the run's order, with
// the run's currency; the token is the last item's number.
func (r *Reconciliations) Items(ctx context.Context, id string, pageSize int32, pageToken string) (string, []domain.ReconItem, string, error) {
	var v apperr.Validator
	v.Check(id != "", "reconciliation_id", "required")
	limit := pageLimit(&v, pageSize, reconItemsPageDefault, reconItemsPageMax)
	if err := v.Err(); err != nil {
		return "", nil, "", err
	}
	listing := cursor.Scoped(reconItemsListing, id)
	after, err := itemAfter(listing, pageToken)
	if err != nil {
		return "", nil, "", err
	}
	currency, items, err := r.Store.ListItems(ctx, id, after, limit+1)
	if err != nil {
		return "", nil, "", err
	}
	items, next := itemsPage(listing, items, limit)
	return currency, items, next, nil
}
