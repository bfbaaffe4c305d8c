package app

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// LedgerEntries reads ledger transactions (the ledger's GetTransaction,
// and ListTransactions by transaction_ids).
type LedgerEntries interface {
	// Entry returns the transaction id names (apperr.ErrNotFound when the
	// ledger holds none).
	Entry(ctx context.Context, id string) (domain.LedgerEntry, error)
	// Entries returns the transactions ids name (at most
	// LedgerEntriesPerRead), in one call: an id the ledger holds nothing
	// under is left out of the answer.
	Entries(ctx context.Context, ids []string) ([]domain.LedgerEntry, error)
}

// LedgerEntriesPerRead is how many transactions one Entries call names
// (the ledger's MaxLookupKeys).
const LedgerEntriesPerRead = 100

// SessionLock is a lock one replica holds at a time (pkg/pg.SessionLock).
type SessionLock interface {
	// TryLock takes the lock unless another holds it (ok false).
	TryLock(ctx context.Context) (release func(), ok bool, err error)
}

// OutsideSettlement is finance recording a failed or returned payout as
// paid by hand: the ledger transaction it posted, why, and who.
type OutsideSettlement struct {
	PayoutID string
	// TransactionID names the one transaction that paid the whole net;
	// TransactionIDs the several ones (bank transfers) whose sum did.
	// Exactly one of the two is given.
	TransactionID  string
	TransactionIDs []string
	Reason         string
	By             string
}

// SettleOutside moves a failed or returned payout to settled_outside, final:
// finance paid its net by hand (a departed provider whose account no rail
// reaches) and names the ledger transaction that did it. The entry is read
// from the ledger and must move the payout's net out of its provider's
// available and out of bank:client (domain.CheckSettledOutside); under the
// payout's lock, it is claimed for this payout alone (a unique key: a
// transaction closing two payouts would leave one unpaid and read paid)
// and the move is kept in the payout's history. The workflow of a failed
// or returned payout has ended; once settled outside the payout can no
// longer be retried, so a retry never pays it again from a newer cycle's
// money. The same settlement again answers as it is; another transaction
// is a conflict.
func (a *Payouts) SettleOutside(ctx context.Context, s OutsideSettlement) (domain.Payout, error) {
	s.Reason = strings.TrimSpace(s.Reason)
	ids, err := a.settlementEntries(ctx, s)
	if err != nil {
		return domain.Payout{}, err
	}
	err = a.Store.Update(ctx, func(tx Tx) error {
		p, err := tx.Lock(ctx, s.PayoutID)
		if err != nil {
			return err
		}
		by, err := claimedBy(ctx, tx, p.ID)
		if err != nil {
			return err
		}
		if p.Status == domain.StatusSettledOutside {
			switch {
			case len(by) == 0:
				return fmt.Errorf("payout %s is settled_outside with no transaction recorded: %w", p.ID, apperr.ErrConflict)
			case slices.Equal(by, sorted(ids)):
				return nil // settled by the same call already: answered as it is
			}
			return fmt.Errorf("payout %s was settled outside by transaction %s: %w", p.ID, strings.Join(by, ", "), apperr.ErrConflict)
		}
		if p.Status != domain.StatusFailed && p.Status != domain.StatusReturned {
			return fmt.Errorf("payout %s is %s: only a failed or returned payout can be settled outside: %w", p.ID, p.Status, apperr.ErrPrecondition)
		}
		// Failed again holding entries of its settlement that stand (paid
		// by hand, not reversed): they are named again with the entries
		// for the rest. Left out, they stayed paid and claimed, and the
		// new entries paid the whole net again.
		if missing := slices.DeleteFunc(slices.Clone(by), func(t string) bool { return slices.Contains(ids, t) }); len(missing) > 0 {
			return fmt.Errorf("payout %s still claims ledger transaction %s (paid by hand, not reversed): name it with the entries paying the rest: %w",
				p.ID, strings.Join(missing, ", "), apperr.ErrConflict)
		}
		// Read again under the payout's lock and the entries' claim locks:
		// an entry reversed since the read above was taken. One reversed
		// after this read is acted on by ReleaseReversedClaims (its
		// ledger.reversed message), whose read of the claims waits for
		// these locks, so it sees this claim once committed (or, taken
		// first, ran before this read, which then sees the reversal).
		if err := tx.LockClaimEntries(ctx, ids); err != nil {
			return err
		}
		es := make([]domain.LedgerEntry, 0, len(ids))
		for _, id := range ids {
			e, err := a.Entries.Entry(ctx, id)
			if err != nil {
				return fmt.Errorf("read transaction %s again: %w", id, err)
			}
			es = append(es, e)
		}
		if why := domain.CheckSettledOutsideAll(p, es); why != "" {
			return fmt.Errorf("%s: %w", why, apperr.ErrConflict)
		}
		note := fmt.Sprintf("settled outside gpubill by finance: net paid by ledger transaction %s: %s", strings.Join(ids, ", "), s.Reason)
		now := a.Clock.Now()
		for _, id := range ids {
			if err := tx.ClaimSettledOutside(ctx, p.ID, id, s.Reason, s.By, now); err != nil {
				return err
			}
		}
		return tx.Move(ctx, &p, domain.StatusSettledOutside, note, now)
	})
	if err != nil {
		return domain.Payout{}, fmt.Errorf("settle payout %s outside: %w", s.PayoutID, err)
	}
	return a.Store.GetPayout(ctx, s.PayoutID)
}

// claimedBy are the transactions payout id claims, sorted, in the ledger's
// form, as settlementIDs answers ids: a claim made before payout/0037 keeps
// its id as typed.
func claimedBy(ctx context.Context, tx Tx, id string) ([]string, error) {
	by, err := tx.SettledOutsideBy(ctx, id)
	if err != nil {
		return nil, err
	}
	for i := range by {
		by[i] = domain.LedgerTransactionID(by[i])
	}
	slices.Sort(by)
	return by, nil
}

// settlementEntries checks s's request (its reason, its transaction ids,
// a payout that exists, transactions the ledger holds) and answers its
// transaction ids.
func (a *Payouts) settlementEntries(ctx context.Context, s OutsideSettlement) ([]string, error) {
	ids, err := settlementIDs(s)
	switch {
	case err != nil:
		return nil, err
	case s.Reason == "":
		return nil, apperr.Invalid("reason", "required: how the net was paid (the bank, its reference)")
	case a.Entries == nil:
		return nil, fmt.Errorf("settle payout %s outside: no ledger reader configured", s.PayoutID)
	}
	if _, err := a.Store.GetPayout(ctx, s.PayoutID); err != nil {
		return nil, err // an unknown payout is a 404 whatever it names
	}
	for _, id := range ids {
		_, err := a.Entries.Entry(ctx, id)
		if errors.Is(err, apperr.ErrNotFound) {
			return nil, apperr.Invalid(settlementField(s), "the ledger holds no transaction %s", id)
		}
		if err != nil {
			return nil, fmt.Errorf("settle payout %s outside: read transaction %s: %w", s.PayoutID, id, err)
		}
	}
	return ids, nil
}

// SettleOutsideTransactionsMax bounds the ledger transactions one
// settlement outside names (each read from the ledger twice).
const SettleOutsideTransactionsMax = 20

// settlementIDs are the transactions s names, in the ledger's form
// (domain.LedgerTransactionID), in its order: exactly one of its two
// forms, none empty, none twice. The duplicate check, the claims and the
// comparisons with the claims held all use that form: compared as typed,
// one entry named twice in two cases was read twice and its amount
// counted twice towards the net.
func settlementIDs(s OutsideSettlement) ([]string, error) {
	one := domain.LedgerTransactionID(s.TransactionID)
	switch {
	case one != "" && len(s.TransactionIDs) > 0:
		return nil, apperr.Invalid("transaction_ids", "give transaction_id (one transaction paid the net) or transaction_ids (several did), not both")
	case one != "":
		return []string{one}, nil
	case len(s.TransactionIDs) == 0:
		return nil, apperr.Invalid("transaction_id", "required: the ledger transaction that paid the net by hand (or transaction_ids, several)")
	case len(s.TransactionIDs) > SettleOutsideTransactionsMax:
		return nil, apperr.Invalid("transaction_ids", "at most %d transactions", SettleOutsideTransactionsMax)
	}
	ids := make([]string, 0, len(s.TransactionIDs))
	seen := map[string]bool{}
	for _, id := range s.TransactionIDs {
		id = domain.LedgerTransactionID(id)
		switch {
		case id == "":
			return nil, apperr.Invalid("transaction_ids", "an empty transaction id")
		case seen[id]:
			return nil, apperr.Invalid("transaction_ids", "transaction %s named twice", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	return ids, nil
}

// settlementField is the request field s names its transactions in.
func settlementField(s OutsideSettlement) string {
	if len(s.TransactionIDs) > 0 {
		return "transaction_ids"
	}
	return "transaction_id"
}

// sorted is a sorted copy of ids.
func sorted(ids []string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// SettledOutsideClaim is one ledger transaction a payout settled outside
// claims.
type SettledOutsideClaim struct {
	PayoutID      string
	TransactionID string
}

// SettledOutsideCheckEvery is how often RunSettledOutsideCheck asks the
// ledger about a window of the entries of the payouts settled outside.
const SettledOutsideCheckEvery = 5 * time.Minute

// SettledOutsideCheckWindow is how many claims one settled-outside pass
// reads (SettledOutsideCheckWindow/LedgerEntriesPerRead ledger calls), the
// least recently read first: a claim is read again within
// ceil(claims/SettledOutsideCheckWindow) passes (100 000 claims: 200
// passes, under 17 hours). A pass read every claim ever made (claims of
// final payouts stay for good), its cost growing without bound; a
// reversal is acted on at once through its ledger.reversed message
// (ReleaseReversedClaims), and the pass is the backstop for a message
// never sent (a ledger replica of a version before it during a rolling
// upgrade) or aged out of the stream while payout was down.
const SettledOutsideCheckWindow = 500

// RunSettledOutsideCheck runs CheckSettledOutside every interval until ctx
// ends; a pass that fails is logged (level ERROR), counted on /metrics by
// CheckSettledOutside, and run again on the next. A pass is cut at the
// interval: one hung on a ledger call held the check's lock, and no
// replica ran a pass again, nothing counted.
func (a *Payouts) RunSettledOutsideCheck(ctx context.Context, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		pass, cancel := context.WithTimeout(ctx, every)
		err := a.CheckSettledOutside(pass)
		cancel()
		if err != nil && ctx.Err() == nil {
			a.Log.Error("settled-outside check: the ledger entries of payouts settled outside not all read", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// CheckSettledOutside asks the ledger about a window of the transactions
// payouts hold a claim on (payout.settled_outside: a payout settled
// outside, or one failed again still holding the entries of its
// settlement that were not reversed): SettledOutsideCheckWindow claims,
// those never read first, then the least recently read,
// LedgerEntriesPerRead to a ledger call, on the one replica holding
// SettledOutsideCheckLock. A pass costs the same however many payouts were
// ever settled outside (it read them all, every pass). A payout one of
// whose transactions was reversed (POST /v1/transactions/{id}:reverse) is
// no longer paid, that entry's amount back in provider:{id}:available, and
// moves back to failed (failedAgain); ReleaseReversedClaims does it as
// soon as the reversal's ledger.reversed message comes, this pass is the
// backstop. A transaction not read (the call failing, or the ledger
// answering nothing for it) is an error (the others are still checked)
// and stays first for the next pass. Each failure is counted by step
// (gpubill_payout_settled_outside_check_failures_total,
// GpubillPayoutSettledOutsideCheckFailing): only logged, a payout whose
// hand payment was reversed read paid forever, unseen. A pass another
// replica runs is skipped here (nil).
func (a *Payouts) CheckSettledOutside(ctx context.Context) error {
	release, mine, err := a.settledOutsidePass(ctx)
	if err != nil || !mine {
		return err // !mine: another replica runs this pass
	}
	defer release()
	claims, err := a.Store.SettledOutsideClaimsDue(ctx, SettledOutsideCheckWindow)
	if err != nil {
		settledOutsideCheckFailures.WithLabelValues("claims").Inc()
		return fmt.Errorf("settled-outside check: list claims: %w", err)
	}
	reversed := map[string]map[string]string{} // payout → transaction → reversed by
	var order, read []string
	var errs []error
	for page := range slices.Chunk(claims, LedgerEntriesPerRead) {
		ids := make([]string, 0, len(page))
		for _, c := range page {
			ids = append(ids, c.TransactionID)
		}
		es, err := a.Entries.Entries(ctx, ids)
		if err != nil {
			settledOutsideCheckFailures.WithLabelValues("read").Add(float64(len(page)))
			errs = append(errs, fmt.Errorf("settled-outside check: read %d claimed transactions (%s ...): %w", len(page), ids[0], err))
			continue
		}
		byID := make(map[string]domain.LedgerEntry, len(es))
		for _, e := range es {
			byID[strings.ToLower(e.ID)] = e
		}
		for _, c := range page {
			e, ok := byID[strings.ToLower(c.TransactionID)]
			if !ok {
				settledOutsideCheckFailures.WithLabelValues("read").Inc()
				errs = append(errs, fmt.Errorf("payout %s settled outside by %s: the ledger answered no such transaction: %w",
					c.PayoutID, c.TransactionID, apperr.ErrNotFound))
				continue
			}
			read = append(read, c.TransactionID)
			if e.ReversedBy == "" {
				continue
			}
			if reversed[c.PayoutID] == nil {
				reversed[c.PayoutID] = map[string]string{}
				order = append(order, c.PayoutID)
			}
			reversed[c.PayoutID][c.TransactionID] = e.ReversedBy
		}
	}
	for _, id := range order {
		if err := a.failedAgain(ctx, id, reversed[id]); err != nil {
			settledOutsideCheckFailures.WithLabelValues("move").Inc()
			errs = append(errs, err)
			// Not marked read: its reversed entries come first next pass.
			read = slices.DeleteFunc(read, func(t string) bool { _, ok := reversed[id][t]; return ok })
		}
	}
	if len(read) > 0 {
		if err := a.Store.MarkSettledOutsideChecked(ctx, read, a.Clock.Now()); err != nil {
			settledOutsideCheckFailures.WithLabelValues("claims").Inc()
			errs = append(errs, fmt.Errorf("settled-outside check: mark %d claims read: %w", len(read), err))
		}
	}
	return errors.Join(errs...)
}

// settledOutsidePass takes the settled-outside check's lock for a pass:
// mine false (and no error) when another replica holds it. Each failure is
// counted.
func (a *Payouts) settledOutsidePass(ctx context.Context) (release func(), mine bool, err error) {
	if a.Entries == nil {
		settledOutsideCheckFailures.WithLabelValues("claims").Inc()
		return nil, false, errors.New("settled-outside check: no ledger reader configured")
	}
	if a.SettledOutsideCheckLock == nil {
		return func() {}, true, nil
	}
	release, mine, err = a.SettledOutsideCheckLock.TryLock(ctx)
	if err != nil {
		settledOutsideCheckFailures.WithLabelValues("claims").Inc()
		return nil, false, fmt.Errorf("settled-outside check: %w", err)
	}
	return release, mine, nil
}

// Reversal is a ledger.reversed message: transaction TransactionID
// reversed by ReversedBy.
type Reversal struct {
	TransactionID string
	ReversedBy    string
}

// ReleaseReversedClaims acts on reversals the ledger published
// (ledger.reversed.{transaction}, one message per reversal, through its
// outbox with the reversal): a payout claiming a reversed transaction
// moves back to failed, those claims released (failedAgain), without
// waiting for a settled-outside pass. The claims are read under the
// entries' claim locks (Store.ClaimHolders), so a claim committing meanwhile
// is seen. A reversal of a transaction no payout claims changes nothing;
// one applied again (a redelivery) finds its claim released and changes
// nothing. An error leaves the messages to be delivered again.
func (a *Payouts) ReleaseReversedClaims(ctx context.Context, rs []Reversal) error {
	if len(rs) == 0 {
		return nil
	}
	by := make(map[string]string, len(rs)) // lower(transaction) → reversed by
	ids := make([]string, 0, len(rs))
	for _, r := range rs {
		k := strings.ToLower(r.TransactionID)
		if _, ok := by[k]; !ok {
			ids = append(ids, r.TransactionID)
		}
		by[k] = r.ReversedBy
	}
	claims, err := a.Store.ClaimHolders(ctx, ids)
	if err != nil {
		settledOutsideCheckFailures.WithLabelValues("claims").Inc()
		return fmt.Errorf("reversals of %d ledger transactions: their claims: %w", len(ids), err)
	}
	reversed := map[string]map[string]string{}
	var order []string
	for _, c := range claims {
		if reversed[c.PayoutID] == nil {
			reversed[c.PayoutID] = map[string]string{}
			order = append(order, c.PayoutID)
		}
		reversed[c.PayoutID][c.TransactionID] = by[strings.ToLower(c.TransactionID)]
	}
	var errs []error
	for _, id := range order {
		if err := a.failedAgain(ctx, id, reversed[id]); err != nil {
			settledOutsideCheckFailures.WithLabelValues("move").Inc()
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SettledOutsideCheckLockKey names the session advisory lock the replica
// running a settled-outside check holds (pg_try_advisory_lock(hashtext)).
const SettledOutsideCheckLockKey = "gpubill.payout.settled_outside_check"

// failedAgain moves payout id, settled outside, back to failed: reversed
// (transaction → the one reversing it) names its claims the ledger
// reversed. Only those are released: an entry of its settlement that
// stands (paid part of the net by hand, not reversed) stays claimed, and
// :retry is refused while the payout holds one (a retry paid the whole
// net again: settled by 350.00 and 250.00, the 250.00 reversed, it paid
// 600.00 more out of available, 950.00 for a net of 600.00); finance
// settles it outside again naming the standing entries with entries for
// the rest, or reverses them. A payout already failed again whose
// standing entry is now reversed releases it alone. Its failure code and
// message stay the ones it failed with.
func (a *Payouts) failedAgain(ctx context.Context, id string, reversed map[string]string) error {
	var p domain.Payout
	var released, standing []string
	err := a.Store.Update(ctx, func(tx Tx) error {
		var err error
		p, err = tx.Lock(ctx, id)
		if err != nil || (p.Status != domain.StatusSettledOutside && p.Status != domain.StatusFailed) {
			return err // moved meanwhile: nothing to undo
		}
		now := a.Clock.Now()
		released, err = tx.ReleaseSettledOutside(ctx, id, reversed, now)
		if err != nil || len(released) == 0 {
			// None of the entries this pass read reversed is claimed now:
			// another replica's pass released them, and the payout may be
			// settled outside again by entries this pass never read.
			return err
		}
		if standing, err = tx.SettledOutsideBy(ctx, id); err != nil {
			return err
		}
		if p.Status == domain.StatusFailed {
			return nil // failed again already: its reversed entries released
		}
		var why []string
		for _, t := range released {
			why = append(why, fmt.Sprintf("ledger transaction %s was reversed by %s", t, reversed[t]))
		}
		next := "retry the payout or settle it outside again"
		if len(standing) > 0 {
			next = fmt.Sprintf("ledger transaction %s stands (paid part of the net by hand, still claimed): "+
				"settle the payout outside again naming it with entries for the rest, or reverse it; a retry is refused while it stands",
				strings.Join(standing, ", "))
		}
		note := fmt.Sprintf("settlement outside gpubill undone: %s; what they paid is back in %s: %s",
			strings.Join(why, "; "), domain.AvailableAccount(p.ProviderID), next)
		return tx.Move(ctx, &p, domain.StatusFailed, note, now)
	})
	if err != nil {
		return fmt.Errorf("payout %s settled outside, its entry reversed: back to failed: %w", id, err)
	}
	if len(released) > 0 {
		a.Log.Error("payout settled outside failed again: its ledger entry was reversed", "payout_id", id, "provider_id", p.ProviderID,
			"net", p.Net.String(), "currency", p.Currency, "released", strings.Join(released, ","), "standing", strings.Join(standing, ","))
	}
	return nil
}
