package bankfile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/bankinbox"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// action is what one status or movement in a bank file asks of a transfer.
type action struct {
	element, e2e, bankStatus, reason, info string
	to                                     string // target state; "" : no change asked (RCVD, ACTC, …)
	bulk                                   bool   // a group or PmtInf status: moves only transfers never answered individually
	dup                                    bool   // a rejection of a copy as a duplicate: the bank has the original
	amount                                 *decimal.Decimal
	currency                               string
	outcome, note                          string     // preset (ignored entries)
	lost                                   *lostBatch // statuses of a batch the rail does not have covering payments the report does not name (lost.go)
	ifLost                                 bool       // an entry only if lost is a batch lost with a restore (placeLost)
}

// MalformedError is a file the rail cannot read; Element names where.
type MalformedError = iso20022.MalformedError

// Import implements app.BankFiles.
func (r *Rail) Import(ctx context.Context, source, name string, file []byte) (app.BankFileImport, error) {
	kind, err := iso20022.Detect(file)
	if errors.Is(err, iso20022.ErrUnsupported) {
		return app.BankFileImport{}, &MalformedError{Element: "Document", Reason: fmt.Sprintf("%s is not a file this rail reads (pain.002, camt.054)", kind)}
	}
	if err != nil {
		return app.BankFileImport{}, err
	}
	h := sha256.Sum256(file)
	sum := hex.EncodeToString(h[:])
	prev, ok, err := r.imported(ctx, sum)
	switch {
	case err != nil:
		return prev, err
	case ok && namesNoTransfer(prev.Entries):
		return r.importAgain(ctx, sum, prev, file)
	case ok:
		return prev, nil
	}
	rep := app.BankFileImport{FileID: ids.New("bf"), Kind: string(kind), Name: bankinbox.StoredName(name), Source: source, ImportedAt: r.Clock.Now()}
	acts, err := r.actions(ctx, r.Pool, kind, file, &rep)
	if err != nil {
		return rep, err
	}
	moved, err := r.record(ctx, sum, file, &rep, acts)
	if errors.Is(err, errRaced) { // the same bytes imported meanwhile by another caller
		prev, _, err := r.imported(ctx, sum)
		return prev, err
	}
	if err != nil {
		return rep, fmt.Errorf("import bank file %s: %w", name, err)
	}
	r.reportImport(rep, moved)
	return rep, nil
}

// querier is the pool, or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// actions reads the file and returns what it asks of transfers (a batch's
// transfers read through q); the message ids go into rep.
func (r *Rail) actions(ctx context.Context, q querier, kind iso20022.Kind, file []byte, rep *app.BankFileImport) ([]action, error) {
	switch kind.Family() {
	case iso20022.FamilyPain002:
		sr, err := iso20022.ParsePain002(file)
		if err != nil {
			return nil, err
		}
		rep.MessageID, rep.OriginalMessageID = sr.MessageID, sr.OriginalMessageID
		acts, err := pain002Actions(ctx, q, sr)
		if err != nil {
			return nil, err
		}
		return r.placeLost(ctx, q, acts)
	case iso20022.FamilyCamt054:
		n, err := iso20022.ParseCamt054(file)
		if err != nil {
			return nil, err
		}
		rep.MessageID = n.MessageID
		return r.camt054Actions(n), nil
	default:
		return nil, &MalformedError{Element: "Document", Reason: fmt.Sprintf("%s is not a file this rail reads (pain.002, camt.054)", kind)}
	}
}

// lockImports serializes, until tx ends, the imports of bank files with
// each other and with what reads their entries (Submit, the release).
// Imports one at a time: each locks its transfers in the order its file
// lists them, and two files listing the same payments in other orders (a
// camt.054 uploaded while the inbox scan imports a pain.002) deadlocked,
// one import a 500. Submit under it: a transfer queued while an import
// found no transfer of its EndToEndId reads that entry once the import
// committed.
func lockImports(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.payout.bank_files'))`)
	return err
}

// record keeps the file (by its hash sum: errRaced if another caller kept
// it first) and applies its actions in one transaction, an entry per
// action in rep; it returns the payouts whose transfer moved. The file's
// bytes are kept when an entry names a transfer the rail does not have
// (readAgain reads it when one is queued).
func (r *Rail) record(ctx context.Context, sum string, file []byte, rep *app.BankFileImport, acts []action) ([]string, error) {
	var moved []string
	err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		moved, rep.Entries = nil, nil
		if err := lockImports(ctx, tx); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `insert into payout.bank_files (file_id, sha256, kind, message_id, original_message_id, name, source, imported_at)
			values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict (sha256) do nothing`,
			rep.FileID, sum, rep.Kind, rep.MessageID, rep.OriginalMessageID, rep.Name, rep.Source, rep.ImportedAt)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return errRaced
		}
		for _, a := range acts {
			var es []app.BankFileEntry
			if a.lost != nil {
				// Under the imports' lock: a transfer queued meanwhile is
				// either among the transfers it finds or finds its entry.
				var err error
				if es, err = r.applyLost(ctx, tx, a); err != nil {
					return fmt.Errorf("%s: %w", a.element, err)
				}
			} else {
				e, applied, err := r.apply(ctx, tx, a)
				if err != nil {
					return fmt.Errorf("%s: %w", a.element, err)
				}
				if applied {
					moved = append(moved, e.PayoutRef)
				}
				es = []app.BankFileEntry{e}
			}
			for _, e := range es {
				if _, err := tx.Exec(ctx, `insert into payout.bank_file_entries (file_id, seq, element, end_to_end_id, reference, bank_status, reason_code, outcome, note)
					values ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, rep.FileID, len(rep.Entries)+1, e.Element, e.EndToEndID, e.PayoutRef, e.BankStatus, e.ReasonCode, e.Outcome, e.Note); err != nil {
					return err
				}
				rep.Entries = append(rep.Entries, e)
			}
		}
		if namesNoTransfer(rep.Entries) {
			if _, err := tx.Exec(ctx, `update payout.bank_files set file = $2 where file_id = $1`, rep.FileID, file); err != nil {
				return err
			}
		}
		return nil
	})
	return moved, err
}

// namesNoTransfer says whether an entry names an EndToEndId the rail had
// no transfer of.
func namesNoTransfer(es []app.BankFileEntry) bool {
	return slices.ContainsFunc(es, func(e app.BankFileEntry) bool {
		return e.Outcome == app.EntryUnknownReference && e.EndToEndID != ""
	})
}

// importAgain is the import of a file imported before (prev) with entries
// that named no transfer: those that name one now are applied now, and the
// answer is the first import's report with them as they now stand (their
// note says when they were read again).
func (r *Rail) importAgain(ctx context.Context, sum string, prev app.BankFileImport, file []byte) (app.BankFileImport, error) {
	var again []app.BankFileEntry
	var moved []string
	err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		if err := lockImports(ctx, tx); err != nil {
			return err
		}
		// A file imported before its bytes were kept is kept now.
		if _, err := tx.Exec(ctx, `update payout.bank_files set file = $2 where file_id = $1 and file is null`, prev.FileID, file); err != nil {
			return err
		}
		var err error
		again, moved, err = r.readAgain(ctx, tx, prev.FileID, file, "")
		return err
	})
	if err != nil {
		return prev, fmt.Errorf("import bank file %s again: %w", prev.Name, err)
	}
	r.reportReadAgain(again, moved)
	rep, _, err := r.imported(ctx, sum)
	return rep, err
}

// readAgain applies, in tx, the entries of file fileID (its bytes) that
// named no transfer when it was imported and name one now: only those
// naming e2e, unless e2e is "". After a restore the bank's reports on a
// payout made after the point are imported as soon as finance copies them
// into the inbox, while the payout is made again, its transfer queued,
// only once its workflow runs; left unknown, the transfer went into the
// next file and was paid twice. Each entry read again is kept with its
// new outcome; it returns them and the payouts whose transfer moved.
func (r *Rail) readAgain(ctx context.Context, tx pgx.Tx, fileID string, file []byte, e2e string) ([]app.BankFileEntry, []string, error) {
	rows, err := tx.Query(ctx, `select seq, element, end_to_end_id from payout.bank_file_entries
		where file_id = $1 and outcome = 'unknown_reference' and end_to_end_id <> '' and ($2 = '' or end_to_end_id = $2) order by seq`, fileID, e2e)
	if err != nil {
		return nil, nil, err
	}
	type unknown struct {
		seq          int
		element, e2e string
	}
	us, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (unknown, error) {
		var u unknown
		return u, row.Scan(&u.seq, &u.element, &u.e2e)
	})
	if err != nil || len(us) == 0 {
		return nil, nil, err
	}
	kind, err := iso20022.Detect(file)
	if err != nil {
		return nil, nil, fmt.Errorf("bank file %s: %w", fileID, err)
	}
	// Through tx: a Submit waits for the imports' lock holding a
	// connection, and enough of them took every other one of the pool.
	acts, err := r.actions(ctx, tx, kind, file, &app.BankFileImport{})
	if err != nil {
		return nil, nil, fmt.Errorf("bank file %s: %w", fileID, err)
	}
	byEntry := map[[2]string]action{}
	for _, a := range acts {
		if a.outcome == "" {
			byEntry[[2]string{a.element, a.e2e}] = a
		}
	}
	var again []app.BankFileEntry
	var moved []string
	for _, u := range us {
		a, ok := byEntry[[2]string{u.element, u.e2e}]
		if !ok {
			// The file reads otherwise than when it was imported (a later
			// version of the reader): the entry stays unknown, and the
			// release is refused while its transfer is queued.
			r.Log.Error("bank file entry to read again is not in its file", "file_id", fileID, "element", u.element, "end_to_end_id", u.e2e)
			continue
		}
		e, applied, err := r.apply(ctx, tx, a)
		if err != nil {
			return nil, nil, fmt.Errorf("bank file %s %s: %w", fileID, u.element, err)
		}
		if e.Outcome == app.EntryUnknownReference {
			continue
		}
		e.Note += " (read again " + r.Clock.Now().UTC().Format(time.RFC3339) + ": no transfer had this EndToEndId when the file was imported)"
		if _, err := tx.Exec(ctx, `update payout.bank_file_entries set reference = $3, outcome = $4, note = $5 where file_id = $1 and seq = $2`,
			fileID, u.seq, e.PayoutRef, e.Outcome, e.Note); err != nil {
			return nil, nil, err
		}
		again = append(again, e)
		if applied {
			moved = append(moved, e.PayoutRef)
		}
	}
	return again, moved, nil
}

// readEarlierReports applies, in tx, the entries of earlier bank files
// that named e2e before its transfer existed (readAgain), oldest file
// first. A file imported before its bytes were kept cannot be read here:
// the release is refused while the transfer is queued, until the file is
// imported again.
func (r *Rail) readEarlierReports(ctx context.Context, tx pgx.Tx, e2e string) ([]app.BankFileEntry, []string, error) {
	rows, err := tx.Query(ctx, `select file_id, file from payout.bank_files
		where file_id in (select file_id from payout.bank_file_entries where end_to_end_id = $1 and outcome = 'unknown_reference')
		order by imported_at, file_id`, e2e)
	if err != nil {
		return nil, nil, err
	}
	type kept struct {
		id   string
		file []byte
	}
	ks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (kept, error) {
		var k kept
		return k, row.Scan(&k.id, &k.file)
	})
	if err != nil {
		return nil, nil, err
	}
	var again []app.BankFileEntry
	var moved []string
	for _, k := range ks {
		if k.file == nil {
			r.Log.Warn("a bank file imported before its transfer was queued names it, and its bytes were not kept: import it again",
				"file_id", k.id, "end_to_end_id", e2e)
			continue
		}
		es, ms, err := r.readAgain(ctx, tx, k.id, k.file, e2e)
		if err != nil {
			return nil, nil, err
		}
		again, moved = append(again, es...), append(moved, ms...)
	}
	return again, moved, nil
}

// reportReadAgain logs the entries read again (each not applied as a
// warning) and notifies the payouts that moved.
func (r *Rail) reportReadAgain(again []app.BankFileEntry, moved []string) {
	for _, e := range again {
		log := r.Log.Info
		if app.EntryNotApplied(e.Outcome) {
			log = r.Log.Warn
		}
		log("bank file entry read again: its transfer exists now", "element", e.Element, "end_to_end_id", e.EndToEndID,
			"reference", e.PayoutRef, "bank_status", e.BankStatus, "outcome", e.Outcome, "note", e.Note)
	}
	if r.Notify != nil {
		for _, ref := range moved {
			r.Notify(ref)
		}
	}
}

// reportImport logs the import (and each entry not applied) and notifies
// the payouts that moved.
func (r *Rail) reportImport(rep app.BankFileImport, moved []string) {
	unknown := 0
	for _, e := range rep.Entries {
		if app.EntryNotApplied(e.Outcome) {
			unknown++
			r.Log.Warn("bank file entry not applied", "file_id", rep.FileID, "element", e.Element, "end_to_end_id", e.EndToEndID,
				"bank_status", e.BankStatus, "outcome", e.Outcome, "note", e.Note)
		}
	}
	r.Log.Info("bank file imported", "file_id", rep.FileID, "kind", rep.Kind, "message_id", rep.MessageID, "entries", len(rep.Entries),
		"moved", len(moved), "not_applied", unknown)
	if r.Notify != nil {
		for _, ref := range moved {
			r.Notify(ref)
		}
	}
}

var errRaced = errors.New("bank file imported concurrently")

// imported returns the report of a file already imported (by its hash).
func (r *Rail) imported(ctx context.Context, sum string) (app.BankFileImport, bool, error) {
	var rep app.BankFileImport
	err := r.Pool.QueryRow(ctx, `select file_id, kind, message_id, original_message_id, name, source, imported_at from payout.bank_files where sha256 = $1`, sum).
		Scan(&rep.FileID, &rep.Kind, &rep.MessageID, &rep.OriginalMessageID, &rep.Name, &rep.Source, &rep.ImportedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return rep, false, nil
	}
	if err != nil {
		return rep, false, err
	}
	rep.Duplicate = true
	rows, err := r.Pool.Query(ctx, `select element, end_to_end_id, reference, bank_status, reason_code, outcome, note
		from payout.bank_file_entries where file_id = $1 order by seq`, rep.FileID)
	if err != nil {
		return rep, false, err
	}
	rep.Entries, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (app.BankFileEntry, error) {
		var e app.BankFileEntry
		return e, row.Scan(&e.Element, &e.EndToEndID, &e.PayoutRef, &e.BankStatus, &e.ReasonCode, &e.Outcome, &e.Note)
	})
	return rep, true, err
}

func firstReason(rs []iso20022.Reason) (code, info string) {
	if len(rs) == 0 {
		return "", ""
	}
	return rs[0].Code, rs[0].AdditionalInfo
}

// statusTarget is the state a pain.002 status moves a transfer to.
func statusTarget(s string) string {
	switch {
	case s == iso20022.StatusRejected:
		return stateRejected
	case iso20022.Accepted(s):
		return stateAccepted
	}
	return ""
}

// paymentActions lists what a status report says of each payment by name,
// and returns the payments it names and the PmtInf-level statuses that
// apply to the others of their PmtInf.
func paymentActions(sr iso20022.StatusReport) (acts []action, listed map[string]bool, pmtStatus map[string]iso20022.PaymentInfoStatus) {
	listed = map[string]bool{}
	pmtStatus = map[string]iso20022.PaymentInfoStatus{}
	// A rejection for a duplicate, at any level, refuses a copy of what the
	// bank already has (a file delivered again after a crash): the
	// original's payments stand. Taken as the payment's failure, it moved
	// the money back to available while the original still paid.
	for _, pi := range sr.PaymentInfos {
		for _, t := range pi.Transactions {
			code, info := firstReason(t.Reasons)
			listed[t.OriginalEndToEndID] = true
			if statusTarget(t.Status) == stateRejected && domain.DuplicateMessageReason(code) {
				// Not preset ignored: on a transfer queued again after a
				// restore it says the bank has the payment (apply), and one
				// naming no transfer yet is read again when it is queued.
				acts = append(acts, action{element: t.Path, e2e: t.OriginalEndToEndID, bankStatus: t.Status, reason: code, info: info, dup: true})
				continue
			}
			acts = append(acts, action{element: t.Path, e2e: t.OriginalEndToEndID, bankStatus: t.Status, reason: code, info: info, to: statusTarget(t.Status)})
		}
		if code, _ := firstReason(pi.Reasons); statusTarget(pi.Status) == stateRejected && domain.DuplicateMessageReason(code) {
			acts = append(acts, action{element: pi.Path + "/PmtInfSts", bankStatus: pi.Status, reason: code, outcome: app.EntryIgnored,
				note: "the bank refused a duplicate of payment information " + pi.OriginalPaymentInfoID + "; the original's payments stand"})
			continue
		}
		if pi.Status != "" && statusTarget(pi.Status) != "" {
			pmtStatus[pi.OriginalPaymentInfoID] = pi
		}
	}
	return acts, listed, pmtStatus
}

// pain002Actions lists what a status report asks: each payment's own
// status, then PmtInf- and group-level statuses for the payments of the
// batch the report does not name one by one.
func pain002Actions(ctx context.Context, q querier, sr iso20022.StatusReport) ([]action, error) {
	acts, listed, pmtStatus := paymentActions(sr)
	grp := statusTarget(sr.GroupStatus)
	gcode, ginfo := firstReason(sr.GroupReasons)
	const gElem = "CstmrPmtStsRpt/OrgnlGrpInfAndSts"
	if grp == stateRejected && domain.DuplicateMessageReason(gcode) {
		// The bank refuses a copy of a file it already has: the original's
		// payments stand.
		acts = append(acts, action{element: gElem + "/GrpSts", bankStatus: sr.GroupStatus, reason: gcode, outcome: app.EntryIgnored,
			note: "the bank refused a duplicate of batch " + sr.OriginalMessageID + "; the original's payments stand"})
		grp = ""
	}
	cover := unnamedCover(sr, listed)
	if grp == "" && len(pmtStatus) == 0 && cover == nil {
		return acts, nil
	}
	rows, err := q.Query(ctx, `select end_to_end_id, pmt_inf_id from payout.bank_transfers where batch_id = $1 order by end_to_end_id`, sr.OriginalMessageID)
	if err != nil {
		return nil, err
	}
	type tr struct{ e2e, pmtInf string }
	trs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (tr, error) {
		var t tr
		return t, row.Scan(&t.e2e, &t.pmtInf)
	})
	if err != nil {
		return nil, err
	}
	if len(trs) == 0 {
		// Placed by placeLost: a batch lost with a restore, or none of ours
		// (reported unknown if a status of it asks a state of payments).
		acts = append(acts, action{element: gElem + "/OrgnlMsgId", bankStatus: sr.GroupStatus, reason: gcode, outcome: app.EntryUnknownReference,
			note: "no payout batch " + sr.OriginalMessageID, lost: cover, ifLost: grp == "" && len(pmtStatus) == 0})
		return acts, nil
	}
	for i, pi := range sr.PaymentInfos {
		if _, ok := pmtStatus[pi.OriginalPaymentInfoID]; ok && !slices.ContainsFunc(trs, func(t tr) bool { return t.pmtInf == pi.OriginalPaymentInfoID }) {
			acts = append(acts, action{element: fmt.Sprintf("CstmrPmtStsRpt/OrgnlPmtInfAndSts[%d]/OrgnlPmtInfId", i), bankStatus: pi.Status,
				outcome: app.EntryUnknownReference, note: "no PmtInf " + pi.OriginalPaymentInfoID + " in batch " + sr.OriginalMessageID})
		}
	}
	for _, t := range trs {
		if listed[t.e2e] {
			continue
		}
		if pi, ok := pmtStatus[t.pmtInf]; ok {
			code, info := firstReason(pi.Reasons)
			acts = append(acts, action{element: pi.Path + "/PmtInfSts", e2e: t.e2e, bankStatus: pi.Status, reason: code, info: info, to: statusTarget(pi.Status), bulk: true})
			continue
		}
		if grp != "" {
			acts = append(acts, action{element: gElem + "/GrpSts", e2e: t.e2e, bankStatus: sr.GroupStatus, reason: gcode, info: ginfo, to: grp, bulk: true})
		}
	}
	return acts, nil
}

// camt054Actions lists what a notification's entries ask: a booked debit
// pays a transfer, a pending one shows it in transit, a credit with return
// information returns it. Entries on another account, reversals and
// credits without return information are reported, not applied. An entry
// the reader set aside as malformed is reported, the others applied: on
// another account ignored; on the client account unreadable (counted not
// applied, for finance: it may pay or return a payout). Refusing the file
// for it kept every other entry, a return of a paid payout among them,
// from being applied; each entry moves its own transfer (decide), so one
// not read changes nothing the others do.
func (r *Rail) camt054Actions(n iso20022.Notification) []action {
	var acts []action
	for _, an := range n.Accounts {
		ours := strings.EqualFold(strings.ReplaceAll(an.Account, " ", ""), strings.ReplaceAll(r.Cfg.Debtor.Account, " ", ""))
		for _, e := range an.Entries {
			status := e.CreditDebit + "/" + e.Status
			if !ours {
				acts = append(acts, action{element: e.Path, bankStatus: status, outcome: app.EntryIgnored, note: "not the client account " + r.Cfg.Debtor.Account})
				continue
			}
			if len(e.Transactions) == 0 {
				acts = append(acts, action{element: e.Path, bankStatus: status, outcome: app.EntryIgnored, note: "no transaction details (no EndToEndId)"})
				continue
			}
			for _, t := range e.Transactions {
				amt := t.Amount
				a := action{element: t.Path, e2e: t.EndToEndID, bankStatus: status, amount: &amt, currency: t.Currency}
				switch {
				case t.EndToEndID == "" || t.EndToEndID == "NOTPROVIDED":
					a.outcome, a.note = app.EntryIgnored, "no EndToEndId"
				case e.Reversal:
					// Not applied, but counted and logged: a reversal of a
					// paid payout's debit is its money back in the client
					// account while the payout reads paid.
					a.outcome, a.note = app.EntryConflict, "a reversal of an earlier entry of this payment: not applied; for finance to reconcile (the payout keeps its status)"
				case t.Return != nil:
					a.bankStatus = "RTRN/" + e.Status
					if e.Status == iso20022.EntryBooked && t.CreditDebit == iso20022.Credit {
						a.to, a.reason, a.info = stateReturned, t.Return.Code, t.Return.AdditionalInfo
					} else {
						a.reason, a.note = t.Return.Code, "a return not yet booked to the client account"
					}
				case t.CreditDebit == iso20022.Debit && e.Status == iso20022.EntryBooked:
					a.to = stateBooked
				case t.CreditDebit == iso20022.Debit && e.Status == iso20022.EntryPending:
					a.to = stateAccepted
				case t.CreditDebit == iso20022.Credit:
					a.outcome, a.note = app.EntryIgnored, "a credit without return information is not a payout's"
				}
				acts = append(acts, a)
			}
		}
		for _, me := range an.Unreadable {
			a := action{element: me.Element, outcome: app.EntryUnreadable,
				note: "malformed: " + me.Reason + "; not applied: if it books or returns a payout's payment, that payment moves only once the bank sends the entry again readable"}
			if !ours {
				a.outcome, a.note = app.EntryIgnored, "not the client account "+r.Cfg.Debtor.Account+"; malformed: "+me.Reason
			}
			acts = append(acts, a)
		}
	}
	return acts
}

// decide is the transfer's state machine under a bank file: whether a
// transfer in state from moves to to (applied), stays (unchanged), or the
// file contradicts what is known (conflict).
func decide(from, to string, bulk bool) string {
	if from == stateCanceled {
		// Canceled in the queue, its money back in available: the bank
		// cannot have it, and a report that says it does is finance's.
		return app.EntryConflict
	}
	if from == stateQueued {
		// The bank knows a transfer only from a file, so this one was
		// sent: a restore brought the book back to before its batch was
		// cut. Taken as a conflict, it stayed queued and the next file
		// paid it again.
		if to == stateBatched {
			return app.EntryApplied
		}
		from = stateBatched
	}
	if from == stateReview {
		// Held for finance's review, the bank has it: a report that
		// settles it (booked, rejected, returned) applies as to a batched
		// one; a status short of that leaves it with finance.
		switch to {
		case stateBooked, stateRejected, stateReturned:
			from = stateBatched
		default:
			return app.EntryUnchanged
		}
	}
	if from == to {
		return app.EntryUnchanged
	}
	switch to {
	case stateAccepted:
		if from == stateBatched {
			return app.EntryApplied
		}
		if from == stateRejected {
			return app.EntryConflict
		}
		return app.EntryUnchanged // booked or returned: accepted is old news
	case stateBooked:
		switch from {
		case stateBatched, stateAccepted:
			return app.EntryApplied
		case stateReturned:
			return app.EntryUnchanged
		}
		return app.EntryConflict
	case stateRejected:
		if from == stateBatched || (from == stateAccepted && !bulk) {
			return app.EntryApplied
		}
		if bulk {
			return app.EntryUnchanged // a group status does not override what the bank said of the payment itself
		}
		return app.EntryConflict
	case stateReturned:
		if from == stateRejected {
			return app.EntryConflict
		}
		return app.EntryApplied
	}
	return app.EntryUnchanged
}

// apply moves the transfer an action names, inside tx.
func (r *Rail) apply(ctx context.Context, tx pgx.Tx, a action) (app.BankFileEntry, bool, error) {
	e := app.BankFileEntry{Element: a.element, EndToEndID: a.e2e, BankStatus: a.bankStatus, ReasonCode: a.reason, Outcome: a.outcome, Note: a.note}
	if e.Outcome != "" {
		return e, false, nil
	}
	var ref, state, ccy string
	var amt decimal.Decimal
	err := tx.QueryRow(ctx, `select reference, state, currency, amount from payout.bank_transfers where end_to_end_id = $1 for update`, a.e2e).
		Scan(&ref, &state, &ccy, &amt)
	if errors.Is(err, pgx.ErrNoRows) {
		e.Outcome, e.Note = app.EntryUnknownReference, "no payout transfer with this EndToEndId"
		return e, false, nil
	}
	if err != nil {
		return e, false, err
	}
	e.PayoutRef = ref
	if a.dup {
		return r.applyDuplicate(ctx, tx, a, e, ref, state)
	}
	if a.amount != nil && !amountEqual(*a.amount, a.currency, amt, ccy) {
		return r.applyAmountMismatch(ctx, tx, a, e, ref, state, amt, ccy)
	}
	to := a.to
	if to == "" && state == stateQueued {
		// A status that asks no state (RCVD, ACTC, PDNG; a return not yet
		// booked) still says the bank has the transfer (decide): it leaves
		// the queue, watched by the unsettled-age alert until booked. Left
		// queued, the release of a restore hold sent it again.
		to = stateBatched
	}
	if to == "" {
		e.Outcome, e.Note = app.EntryUnchanged, "acknowledged; no change of state"
		return e, false, nil
	}
	e.Outcome = decide(state, to, a.bulk)
	if e.Outcome != app.EntryApplied {
		if e.Note == "" {
			e.Note = fmt.Sprintf("the transfer is %s; the file says %s", state, to)
		}
		if state == stateReview && e.Outcome == app.EntryUnchanged {
			e.Note += " (held for finance's review until booked, rejected or returned, or resolved)"
		}
		return e, false, nil
	}
	code, msg := "", ""
	if to == stateRejected || to == stateReturned {
		code, msg = domain.BankFailure(a.reason, a.info)
	}
	if _, err := tx.Exec(ctx, `update payout.bank_transfers set state = $2, reason_code = case when $3 = '' then reason_code else $3 end,
			failure_code = case when $4 = '' then failure_code else $4 end, failure_message = case when $5 = '' then failure_message else $5 end,
			updated_at = $6 where reference = $1`, ref, to, a.reason, code, msg, r.Clock.Now()); err != nil {
		return e, false, err
	}
	if state == stateReview {
		if err := r.closeReviewByBank(ctx, tx, ref, a.element+" "+a.bankStatus+": "+state+" → "+to); err != nil {
			return e, false, err
		}
	}
	e.Note = state + " → " + to
	return e, true, nil
}

// applyAmountMismatch reports an entry (e) whose amount or currency is
// not its transfer's (ref, in state, amt ccy): not applied. A queued
// transfer was sent in a file after a restore's point and made again with
// another net (usage after the point not sent again): left queued, the
// release sent it a second time; it leaves the queue for finance's review.
func (r *Rail) applyAmountMismatch(ctx context.Context, tx pgx.Tx, a action, e app.BankFileEntry, ref, state string, amt decimal.Decimal, ccy string) (app.BankFileEntry, bool, error) {
	e.Outcome, e.Note = app.EntryAmountMismatch, fmt.Sprintf("the bank says %s %s, the transfer is %s %s", a.amount.String(), a.currency, amt.String(), ccy)
	moved, err := r.toReview(ctx, tx, ref, app.ReviewAmountMismatch, a.element+" "+a.bankStatus+": "+e.Note)
	if err != nil {
		return e, false, err
	}
	if moved {
		e.Note += "; " + reviewNote(state, a.e2e, "the bank has it at another amount")
	}
	return e, false, nil
}

// applyDuplicate applies a rejection of a copy of payment a.e2e as a
// duplicate (entry e, its transfer ref in state). The bank refused the
// copy and has the original: a transfer batched or further keeps its
// state (taken as the payment's failure, its money went back to available
// while the original paid). A queued one was sent in a file after a
// restore's point, the original's status not in this report: it leaves
// the queue for finance's review (left queued, the release sent it again).
func (r *Rail) applyDuplicate(ctx context.Context, tx pgx.Tx, a action, e app.BankFileEntry, ref, state string) (app.BankFileEntry, bool, error) {
	e.Note = "the bank refused a duplicate of payment " + a.e2e + "; the original stands"
	moved, err := r.toReview(ctx, tx, ref, app.ReviewDuplicateRejection,
		a.element+" "+a.bankStatus+" "+a.reason+": the bank refused a copy as a duplicate: it has the original, its status not given")
	if err != nil {
		return e, false, err
	}
	if !moved {
		e.Outcome = app.EntryIgnored
		return e, false, nil
	}
	e.Outcome = app.EntryReview
	e.Note += "; " + reviewNote(state, a.e2e, "the bank has it (sent in a file after a restore's point), its status not given")
	return e, false, nil
}

// ScanInbox imports the files in the inbox directory, oldest name first
// (bankinbox.Inbox: imported, to processed/; malformed or over
// inboxFileBytesMax, to rejected/ with a .error file saying why; failing
// for its own reason, left for the next pass while the files after it are
// read); a failure that is not the file's own (the database down) stops
// the pass, every file left for the next one. One replica reads the
// inbox at a time (inboxLockKey): while another holds it, this pass does
// nothing.
func (r *Rail) ScanInbox(ctx context.Context) error {
	if r.Cfg.InboxDir == "" {
		return nil
	}
	release, mine, err := pg.SessionLock{Pool: r.Pool, Key: inboxLockKey}.TryLock(ctx)
	if err != nil || !mine {
		return err
	}
	defer release()
	in := bankinbox.Inbox{Dir: r.Cfg.InboxDir, What: "bank inbox", Import: r.importInboxFile,
		Malformed: func(err error) bool { var me *MalformedError; return errors.As(err, &me) },
		Failed:    inboxFilesFailed, Rejected: inboxFilesRejected, Log: r.Log}
	return in.Scan(ctx)
}

// inboxLockKey names the session advisory lock a replica holds while it
// reads the inbox (pg_try_advisory_lock(hashtext(key))). Two replicas
// reading one inbox directory at once each read every file, and one's
// move to processed/ failed the other's read or move of the same file
// (counted in gpubill_bank_inbox_files_failed_total, every tick). The
// ledger's statement inbox holds a lock of its own name.
const inboxLockKey = "gpubill.payout.bank_inbox"

// importInboxFile reads and imports the inbox file at path.
func (r *Rail) importInboxFile(ctx context.Context, name, path string) error {
	b, err := readInboxFile(path)
	if err != nil {
		return bankinbox.Unreadable(err)
	}
	_, err = r.Import(ctx, app.SourceInbox, name, b)
	return err
}

// readInboxFile reads an inbox file (tests make one fail).
var readInboxFile = readLimited

// inboxFilesFailed counts the inbox files left in place by a failure of
// their own, each attempt (every tick while it lasts). A counter without
// labels exists at 0 from the start.
var inboxFilesFailed = promauto.NewCounter(prometheus.CounterOpts{
	Name: "gpubill_bank_inbox_files_failed_total",
	Help: "Bank inbox files not imported for a failure of their own (unreadable, or refused by the database), each attempt: " +
		"the file stays in the inbox and the files after it are read; the payout log (bank inbox file not imported) says why.",
})

// inboxFilesRejected counts the inbox files moved to rejected/ (each once):
// malformed as a whole (not XML, a header or an account missing, not a
// message the rail reads) or over the size limit. None of their entries
// is applied: a return in one leaves its payout paid, its provider not
// credited, until the bank sends the file again readable.
var inboxFilesRejected = promauto.NewCounter(prometheus.CounterOpts{
	Name: "gpubill_bank_inbox_files_rejected_total",
	Help: "Bank inbox files moved to rejected/ as malformed (nothing in them applied); the .error file beside each and the payout log " +
		"(bank inbox file rejected) say why.",
})

// inboxFileBytesMax bounds a file read from the inbox (as iso20022 does).
const inboxFileBytesMax = 64 << 20

func readLimited(path string) ([]byte, error) { return bankinbox.ReadFile(path, inboxFileBytesMax) }

// Run builds each cutoff's batch when it passes, delivers batches and
// reads the inbox every tick, until ctx ends (a restore hold stops the
// first two, not the inbox). Failures are logged and retried at the next
// tick (nothing is lost: queued transfers stay queued, undelivered
// batches stay marked, inbox files stay in place).
func (r *Rail) Run(ctx context.Context) error {
	tick := r.Cfg.Tick
	if tick <= 0 {
		tick = tickDefault
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	wasHeld := false
	for {
		_, _, err := r.Cut(ctx, r.LastCutoff(r.Clock.Now()))
		// A restore hold is said once (its gauge and alert go on saying it).
		if held := errors.Is(err, ErrHeld); held != wasHeld {
			if held {
				r.Log.Warn("bank-file rail held after a restore: no batch is cut or delivered until finance releases it", "err", err)
			}
			wasHeld = held
		}
		if err != nil && !errors.Is(err, ErrHeld) && ctx.Err() == nil {
			r.Log.Error("bank batch", "err", err)
		}
		if err := r.Deliver(ctx); err != nil && !errors.Is(err, ErrHeld) && ctx.Err() == nil {
			r.Log.Error("bank batch delivery", "err", err)
		}
		if err := r.ScanInbox(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error("bank inbox", "err", err)
		}
		if err := r.resync(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error("bank rail resync", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Resync limits: a transfer the bank moved that long ago whose payout has
// not followed is announced again, a bounded number per tick.
const (
	resyncGrace = 2 * time.Minute
	resyncMax   = 100
)

// resync announces again the transfers whose payout has not followed what
// the bank said (the announcement was lost, or the payout's workflow had
// ended when a return came): its workflow is woken or started again. A
// payout held as rail_amount_mismatch (its transfer booked or accepted at
// another amount: resolved paid at the bank's) is not behind: it stays
// where it is for finance, and woken every tick, the oldest first, a
// hundred of them crowded out the payouts that are; only the bank
// rejecting or returning its transfer moves it on. Only a payout that can
// still follow its transfer's state is behind: a returned transfer whose
// payout was settled outside (or failed, canceled) was announced again
// every tick forever, crowding out the others as well.
func (r *Rail) resync(ctx context.Context) error {
	if r.Notify == nil {
		return nil
	}
	rows, err := r.Pool.Query(ctx, `select t.reference from payout.bank_transfers t join payout.payouts p on p.rail_reference = t.reference
		where t.updated_at < $1 and ((t.state = 'returned' and p.status in ('submitted', 'in_transit', 'paid'))
			or (t.state = 'rejected' and p.status in ('submitted', 'in_transit'))
			or (t.state = 'booked' and p.status in ('submitted', 'in_transit') and p.failure_code <> $3)
			or (t.state = 'accepted' and p.status = 'submitted' and p.failure_code <> $3))
		order by t.updated_at limit $2`, r.Clock.Now().Add(-resyncGrace), resyncMax, domain.FailRailAmountMismatch)
	if err != nil {
		return err
	}
	refs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, ref := range refs {
		r.Notify(ref)
	}
	return nil
}
