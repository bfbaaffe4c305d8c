package bankfile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// A batch cut and sent after a restore's recovery point is lost with the
// disaster: the restored book has no batch of its id, and its transfers
// are queued again (or not made again yet). A pain.002 on it that names
// its payments one by one moves each by its EndToEndId. A status given at
// group level (GrpSts) or payment information level (PmtInfSts) is, by
// ISO 20022, the status of every payment of the group or block, accepted
// (ACCP, ACSC …) or rejected (RJCT) alike, and of a copy refused as a
// duplicate the original is at the bank; but the rail no longer knows
// which payments the lost batch carried, so such a status moved nothing
// and the release of the restore hold sent them all again. Every transfer
// that may have been in it leaves the queue for finance's review instead:
// queued at or before its cutoff (restored queued), or queued since the
// restore while held (a payout made again), and later ones queued while
// held (reviewIfLostBatch). A transfer queued after the cutoff and before
// the restore was not in it.

// lostBatch is what a pain.002 on a batch the rail does not have says of
// the payments it does not name: the status covering them per currency
// ("" : every currency), set by unnamedCover; placeLost adds where the
// batch stands against the latest restore hold.
type lostBatch struct {
	batchID string
	covers  map[string]cover // by currency; "" : the group's, every currency
	named   map[string]bool  // EndToEndIds the report names one by one

	cutoff, heldSince time.Time
	releasedAt        *time.Time
}

// cover is a group or PmtInf status covering payments a report does not
// name.
type cover struct{ element, status, reason string }

// of is the status covering a transfer in currency ccy, if any.
func (l *lostBatch) of(ccy string) (cover, bool) {
	if c, ok := l.covers[ccy]; ok {
		return c, true
	}
	c, ok := l.covers[""]
	return c, ok
}

// status is the covering statuses in one: the group's, else each
// currency's ("CNY ACCP, USD RJCT").
func (l *lostBatch) status() string {
	if c, ok := l.covers[""]; ok {
		return c.status
	}
	ccys := slices.Sorted(maps.Keys(l.covers))
	out := make([]string, len(ccys))
	for i, ccy := range ccys {
		out[i] = ccy + " " + l.covers[ccy].status
	}
	return strings.Join(out, ", ")
}

// covers says whether a group or PmtInf status covers payments the report
// does not name: any status but PART (a summary that gives none of them),
// unless the report names as many payments as the original had
// (OrgnlNbOfTxs, when given).
func covers(status string, originalTxs, named int) bool {
	return status != "" && status != iso20022.StatusPartiallyAccepted && (originalTxs == 0 || named < originalTxs)
}

// unnamedCover is the statuses of sr covering payments of its batch that
// it does not name (listed: those it names), nil if none.
func unnamedCover(sr iso20022.StatusReport, listed map[string]bool) *lostBatch {
	l := &lostBatch{batchID: sr.OriginalMessageID, covers: map[string]cover{}, named: listed}
	if covers(sr.GroupStatus, sr.OriginalTransactions, len(listed)) {
		code, _ := firstReason(sr.GroupReasons)
		l.covers[""] = cover{element: "CstmrPmtStsRpt/OrgnlGrpInfAndSts/GrpSts", status: sr.GroupStatus, reason: code}
	}
	for _, pi := range sr.PaymentInfos {
		if !covers(pi.Status, pi.OriginalTransactions, len(pi.Transactions)) {
			continue
		}
		code, _ := firstReason(pi.Reasons)
		c := cover{element: pi.Path + "/PmtInfSts", status: pi.Status, reason: code}
		// The rail's PmtInfId is the batch id, currency and date; cut to
		// 35 characters it no longer says the currency: every one.
		ccy := ""
		if rest, ok := strings.CutPrefix(pi.OriginalPaymentInfoID, sr.OriginalMessageID+"-"); ok && len(rest) > 3 && rest[3] == '-' {
			ccy = rest[:3]
		}
		if _, ok := l.covers[ccy]; !ok {
			l.covers[ccy] = c
		}
	}
	if len(l.covers) == 0 {
		return nil
	}
	return l
}

// batchCutoff is the cutoff of a batch id of this rail: of any file of
// it (fileID).
func (r *Rail) batchCutoff(id string) (time.Time, bool) {
	const layout = "pb-20060102-1504"
	base, seq := id, 1
	if len(id) == len(layout)+len("-02") {
		n, err := strconv.Atoi(id[len(layout)+1:])
		if err != nil {
			return time.Time{}, false
		}
		base, seq = id[:len(layout)], n
	}
	t, err := time.ParseInLocation(layout, base, r.loc())
	if err != nil || seq < 1 || seq > batchFilesMax || r.fileID(t, seq) != id {
		return time.Time{}, false
	}
	return t, true
}

// placeLost keeps, of the actions' lost batches, those lost with the
// latest restore: a batch id of this rail whose cutoff is at or before the
// hold's start (a batch cut after it is in the book). Any other batch the
// rail does not have is none of its own: its entry stays unknown_reference,
// or is dropped when it was there only for the lost batch (ifLost).
func (r *Rail) placeLost(ctx context.Context, q querier, acts []action) ([]action, error) {
	kept := acts[:0]
	for _, a := range acts {
		lost, err := r.lostWithRestore(ctx, q, a.lost)
		if err != nil {
			return nil, err
		}
		if lost == nil && a.ifLost {
			continue
		}
		a.lost, a.ifLost = lost, false
		kept = append(kept, a)
	}
	return kept, nil
}

// lostWithRestore is l, placed against the latest restore hold, if its
// batch was lost with that restore; nil otherwise.
func (r *Rail) lostWithRestore(ctx context.Context, q querier, l *lostBatch) (*lostBatch, error) {
	if l == nil {
		return nil, nil
	}
	cutoff, ok := r.batchCutoff(l.batchID)
	if !ok {
		return nil, nil
	}
	rows, err := q.Query(ctx, `select held_since, released_at from payout.bank_file_holds order by hold_id desc limit 1`)
	if err != nil {
		return nil, err
	}
	type hold struct {
		since    time.Time
		released *time.Time
	}
	h, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (hold, error) {
		var h hold
		return h, row.Scan(&h.since, &h.released)
	})
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && cutoff.After(h.since)) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l.cutoff, l.heldSince, l.releasedAt = cutoff, h.since, h.released
	return l, nil
}

// applyLost applies, in tx, the statuses of a lost batch (a.lost) covering
// payments the report does not name: every queued transfer that may have
// been in it, and that the report does not name, leaves the queue for
// finance's review. It returns the batch's entry (lost_batch) and one
// entry per transfer moved.
func (r *Rail) applyLost(ctx context.Context, tx pgx.Tx, a action) ([]app.BankFileEntry, error) {
	l := a.lost
	// A batch id names its cutoff to the minute: a transfer queued within
	// it may be in the batch.
	rows, err := tx.Query(ctx, `select reference, end_to_end_id, currency from payout.bank_transfers
		where state = 'queued' and (queued_at < $1 or (queued_at > $2 and ($3::timestamptz is null or queued_at < $3)))
		order by queued_at, reference for update`, l.cutoff.Add(time.Minute), l.heldSince, l.releasedAt)
	if err != nil {
		return nil, err
	}
	type queued struct{ ref, e2e, ccy string }
	qs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (queued, error) {
		var q queued
		return q, row.Scan(&q.ref, &q.e2e, &q.ccy)
	})
	if err != nil {
		return nil, err
	}
	restore := l.heldSince.UTC().Format(time.RFC3339)
	var es []app.BankFileEntry
	for _, q := range qs {
		c, ok := l.of(q.ccy)
		if !ok || l.named[q.e2e] {
			continue
		}
		why := fmt.Sprintf("it may be in payout batch %s, cut after the recovery point of the restore of %s and lost with it; the bank's %s %s "+
			"there is, by ISO 20022, the status of each of its payments, which the rail can no longer name", l.batchID, restore, c.status, c.reason)
		moved, err := r.toReview(ctx, tx, q.ref, app.ReviewLostBatch, c.element+": "+why)
		if err != nil {
			return nil, err
		}
		if moved {
			es = append(es, app.BankFileEntry{Element: c.element, EndToEndID: q.e2e, PayoutRef: q.ref, BankStatus: c.status, ReasonCode: c.reason,
				Outcome: app.EntryReview, Note: reviewNote(stateQueued, q.e2e, why)})
		}
	}
	batch := app.BankFileEntry{Element: a.element, BankStatus: l.status(), ReasonCode: a.reason, Outcome: app.EntryLostBatch,
		Note: fmt.Sprintf("no payout batch %s: cut after the recovery point of the restore of %s and lost with it, and this report gives a status "+
			"of payments of it it does not name: %d transfers that may have been in it left the queue for finance's review, "+
			"and a transfer queued while the rail is held goes there too", l.batchID, restore, len(es))}
	return append([]app.BankFileEntry{batch}, es...), nil
}

// reviewIfLostBatch moves a transfer just queued (ref) to review, in tx,
// when a report imported since the latest restore hold's start gave a
// status of a lost batch covering payments it does not name: the payout
// made again after the restore may have been among them. While the rail
// is held, any transfer queued; once released, the transfer of a payout
// created before the release (its workflow submitted it only after it:
// behind, or its settled event replayed late), which sent in the next
// file was paid twice; a payout created after the release was in no batch
// lost with the restore. It returns the review's note ("" : not moved).
func (r *Rail) reviewIfLostBatch(ctx context.Context, tx pgx.Tx, ref string) (string, error) {
	var batch, status, reason string
	var since time.Time
	err := tx.QueryRow(ctx, `select f.original_message_id, e.bank_status, e.reason_code, h.held_since
		from (select * from payout.bank_file_holds order by hold_id desc limit 1) h
		join payout.bank_files f on f.imported_at >= h.held_since
		join payout.bank_file_entries e on e.file_id = f.file_id and e.outcome = 'lost_batch'
		where h.released_at is null or exists (select 1 from payout.payouts p where p.payout_id in ($1, $2) and p.created_at < h.released_at)
		order by f.imported_at, f.file_id, e.seq limit 1`, ref, domain.RailReferencePayout(ref)).Scan(&batch, &status, &reason, &since)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	why := fmt.Sprintf("queued after the restore of %s, and the bank's report on payout batch %s, lost with it, "+
		"gives a status (%s %s) of payments it does not name: this payout, made again, may be one of them", since.UTC().Format(time.RFC3339), batch, status, reason)
	moved, err := r.toReview(ctx, tx, ref, app.ReviewLostBatch, why)
	if err != nil || !moved {
		return "", err
	}
	return why, nil
}
