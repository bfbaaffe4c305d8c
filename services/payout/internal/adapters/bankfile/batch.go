package bankfile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// batchTransfersMax bounds one pain.001 (a file the bank's SFTP intake
// and our own reader take whole); a cutoff with more queued builds
// another file for the next ones (the oldest go first).
const batchTransfersMax = 50000

// batchFilesMax bounds the files of one cutoff (its ids' two-digit
// number, and one transaction's work): 4 950 000 transfers; more wait for
// the next cutoff (GpubillBankCutoffNotBuilt pages a day later).
const batchFilesMax = 99

// fileTransfersMax is the most transfers one file of a cutoff takes.
func (r *Rail) fileTransfersMax() int {
	if r.transfersMax > 0 {
		return r.transfersMax
	}
	return batchTransfersMax
}

// batchLockKey serializes batch building across processes (a Postgres
// advisory lock): two workers at the same cutoff build one batch. A
// payout hold takes it shared (domain.BankBatchLockKey).
const batchLockKey = domain.BankBatchLockKey

// BatchID names the batch of a cutoff: pb-YYYYMMDD-HHMM in the cutoff's
// zone, the id of its first file (fileID).
func (r *Rail) BatchID(cutoff time.Time) string {
	return "pb-" + cutoff.In(r.loc()).Format("20060102-1504")
}

// fileID names file seq (from 1) of a cutoff: the first BatchID, the
// next BatchID-02 … BatchID-99, each a MsgId of its own (the bank refuses
// a second file under one as a duplicate), and two digits so that ids
// sort as their files (ListBatches pages by id).
func (r *Rail) fileID(cutoff time.Time, seq int) string {
	if seq == 1 {
		return r.BatchID(cutoff)
	}
	return fmt.Sprintf("%s-%02d", r.BatchID(cutoff), seq)
}

// Cut builds the batch of a cutoff from every transfer queued at or before
// it and not yet in a batch, but those of a provider finance holds
// (payout.holds: they stay queued, and go in the first cut after the
// release) or whose KYC finance rejected (payout.kyc, likewise): as many files as they need (each of at most fileTransfersMax
// transfers and a control sum ISO 20022 carries, the oldest first, under
// ids fileID 1, 2 …), all in one transaction, once per cutoff (a second
// call answers the files already built, built false), each transfer in at
// most one file. With nothing queued there is no batch (no ids). The files
// are kept in the database in the same transaction that marks their
// transfers batched, then delivered (Deliver). While a restore hold is
// open it cuts nothing (ErrHeld); a cutoff at or before the latest
// restore is never cut: a batch of its ids may have been cut after the
// recovery point and sent, and the bank refuses another file under one of
// them as a duplicate.
func (r *Rail) Cut(ctx context.Context, cutoff time.Time) (ids []string, built bool, err error) {
	var refused []string
	err = pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		existing, err := lockedBatchAt(ctx, tx, cutoff)
		if err != nil || len(existing) > 0 {
			ids = existing
			return err
		}
		held, restored, err := cutHold(ctx, tx)
		if err != nil {
			return err
		}
		if held {
			return ErrHeld
		}
		if !cutoff.After(restored) {
			return nil
		}
		// A cutoff cut late (the service was down over it) asks for the
		// first business day from today: its own day had passed, a date the
		// bank may refuse or move. Both dates are business days, and the
		// later one: Friday's cutoff cut on Saturday asks for Monday.
		exec := r.executionDate(cutoff)
		if today := r.executionDate(r.Clock.Now()); exec.Before(today) {
			exec = today
		}
		for len(ids) < batchFilesMax {
			// The next oldest transfers still queued: those of the files
			// built before are batched now.
			refs, cts, err := r.queuedTransfers(ctx, tx, cutoff, exec)
			if err != nil || len(cts) == 0 {
				built = err == nil && len(ids) > 0
				return err
			}
			if refs, cts, err = r.leaveOut(ctx, tx, refs, cts, &refused); err != nil {
				return err
			}
			if len(cts) == 0 {
				continue // every one failed (rejected): the next ones
			}
			n := controlSumFits(cts)
			id := r.fileID(cutoff, len(ids)+1)
			if err := r.storeBatch(ctx, tx, id, len(ids)+1, cutoff, exec, cts[:n]); err != nil {
				return err
			}
			if err := r.markBatched(ctx, tx, id, exec, refs[:n], cts[:n]); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		built = true
		r.Log.Warn("bank cutoff built its most files: a transfer still queued at it waits for the next cutoff",
			"cutoff", cutoff, "files", len(ids), "transfers_per_file_max", r.fileTransfersMax())
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("cut bank batch at %s: %w", cutoff.Format(time.RFC3339), err)
	}
	if built {
		r.Log.Info("bank batch built", "batch_ids", ids, "cutoff", cutoff)
	}
	for _, ref := range refused {
		if r.Notify != nil {
			r.Notify(ref)
		}
	}
	return ids, built, nil
}

// controlSumFits is how many of cts, from the first, one file carries:
// those whose sum, the group's CtrlSum, fits ISO 20022's 18 digits (at
// the most fraction digits of their currencies); at least the first (it
// fits alone: leaveOut checked it).
func controlSumFits(cts []iso20022.CreditTransfer) int {
	sum, fraction := decimal.Zero, int32(0)
	for i, ct := range cts {
		cur, err := money.Lookup(ct.Currency)
		if err != nil { // leaveOut checked it: BuildPain001 says why
			return max(i, 1)
		}
		sum, fraction = sum.Add(ct.Amount), max(fraction, cur.MinorUnits)
		if !iso20022.AmountFits(sum, fraction) {
			return max(i, 1)
		}
	}
	return len(cts)
}

// leaveOut fails each transfer a pain.001 cannot carry (a creditor name
// with a control character stored before methods refused one): it fails
// alone (invalid_account, its payout's money back in available) instead of
// failing the cutoff's whole batch, every provider's bank payout with it,
// at every cutoff. It returns the transfers left and adds the refused
// references to refused.
func (r *Rail) leaveOut(ctx context.Context, tx pgx.Tx, refs []string, cts []iso20022.CreditTransfer, refused *[]string) ([]string, []iso20022.CreditTransfer, error) {
	keptRefs, kept := refs[:0:0], cts[:0:0]
	for i, ct := range cts {
		cerr := iso20022.CheckCreditTransfer(ct)
		if cerr == nil {
			keptRefs, kept = append(keptRefs, refs[i]), append(kept, ct)
			continue
		}
		if _, err := tx.Exec(ctx, `update payout.bank_transfers set state = 'rejected', failure_code = $2, failure_message = $3, updated_at = $4
			where reference = $1 and state = 'queued'`, refs[i], domain.FailInvalidAccount, "a bank file cannot carry it: "+cerr.Error(), r.Clock.Now()); err != nil {
			return nil, nil, err
		}
		r.Log.Error("bank transfer left out of the batch: a bank file cannot carry it", "reference", refs[i], "err", cerr)
		*refused = append(*refused, refs[i])
	}
	return keptRefs, kept, nil
}

// lockedBatchAt takes the batch lock (until tx ends) and returns the ids
// of the files already built at cutoff, in order (none if none).
func lockedBatchAt(ctx context.Context, tx pgx.Tx, cutoff time.Time) ([]string, error) {
	if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock($1)`, int64(batchLockKey)); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, `select batch_id from payout.bank_batches where cutoff_at = $1 order by file_seq`, cutoff)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// queuedTransfers locks the transfers queued at or before cutoff (oldest
// first, at most fileTransfersMax: one file's) and returns their references and
// credit transfers executed on exec. A transfer of a provider finance
// holds, or whose KYC finance rejected, is left queued: the hold is placed
// and the KYC rejected under the batch lock (shared, postgres.Store.PutHold
// and PutKYC), which the cut holds, so one placed as the cut runs is read
// here or finds the transfer batched (answered in flight).
func (r *Rail) queuedTransfers(ctx context.Context, tx pgx.Tx, cutoff, exec time.Time) ([]string, []iso20022.CreditTransfer, error) {
	rows, err := tx.Query(ctx, `select t.reference, t.end_to_end_id, t.currency, t.amount, t.creditor_name, t.creditor_account, t.creditor_agent
		from payout.bank_transfers t where t.state = 'queued' and t.queued_at <= $1
		  and not exists (select 1 from payout.holds h where h.provider_id = t.provider_id)
		  and not exists (select 1 from payout.kyc k where k.provider_id = t.provider_id and k.status = 'rejected')
		order by t.queued_at, t.reference limit $2 for update of t`,
		cutoff, r.fileTransfersMax())
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var refs []string
	var cts []iso20022.CreditTransfer
	for rows.Next() {
		var ref string
		ct := iso20022.CreditTransfer{ExecutionDate: exec}
		if err := rows.Scan(&ref, &ct.EndToEndID, &ct.Currency, &ct.Amount, &ct.Creditor.Name, &ct.Creditor.Account, &ct.Creditor.Agent); err != nil {
			return nil, nil, err
		}
		ct.Remittance = "gpubill payout " + ref
		if len(ct.Remittance) > 140 {
			ct.Remittance = ct.Remittance[:140]
		}
		refs = append(refs, ref)
		cts = append(cts, ct)
	}
	return refs, cts, rows.Err()
}

// storeBatch builds the pain.001 of the transfers and keeps it as batch
// id, file seq of its cutoff.
func (r *Rail) storeBatch(ctx context.Context, tx pgx.Tx, id string, seq int, cutoff, exec time.Time, cts []iso20022.CreditTransfer) error {
	initiator := r.Cfg.InitiatingParty
	if initiator == "" {
		initiator = r.Cfg.Debtor.Name
	}
	file, err := iso20022.BuildPain001(iso20022.CreditTransferBatch{MessageID: id, CreatedAt: r.Clock.Now(), InitiatingParty: initiator,
		Debtor: r.Cfg.Debtor, Transfers: cts})
	if err != nil {
		return err // it names the batch
	}
	sum := decimal.Zero
	for _, ct := range cts {
		sum = sum.Add(ct.Amount)
	}
	h := sha256.Sum256(file)
	if _, err := tx.Exec(ctx, `insert into payout.bank_batches (batch_id, cutoff_at, file_seq, execution_date, transfers, control_sum, file, file_sha256, created_at)
		values ($1, $2, $3, $4, $5, $6, $7, $8, $9)`, id, cutoff, seq, exec, len(cts), sum, file, hex.EncodeToString(h[:]), r.Clock.Now()); err != nil {
		return fmt.Errorf("batch %s: %w", id, err)
	}
	return nil
}

// markBatched moves each queued transfer into batch id (its payment
// information block per currency); one that left the queue fails the cut.
func (r *Rail) markBatched(ctx context.Context, tx pgx.Tx, id string, exec time.Time, refs []string, cts []iso20022.CreditTransfer) error {
	for i, ref := range refs {
		tag, err := tx.Exec(ctx, `update payout.bank_transfers set state = 'batched', batch_id = $2, pmt_inf_id = $3, updated_at = $4
			where reference = $1 and state = 'queued'`, ref, id, iso20022.PaymentInfoID(id, cts[i].Currency, exec), r.Clock.Now())
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("batch %s: transfer %s left the queue under the batch lock", id, ref)
		}
	}
	return nil
}

// Deliver writes every batch not yet delivered to the outbox directory:
// the file is written under a temporary name, synced and renamed, so the
// bank's SFTP client never picks up half a file; a batch delivered again
// (a crash before it was marked) is the same bytes under the same name.
// While a restore hold is open it writes nothing (ErrHeld).
func (r *Rail) Deliver(ctx context.Context) error {
	if r.Cfg.OutboxDir == "" {
		return nil
	}
	var held bool
	if err := r.Pool.QueryRow(ctx, `select exists (select 1 from payout.bank_file_holds where released_at is null)`).Scan(&held); err != nil {
		return err
	}
	if held {
		return ErrHeld
	}
	rows, err := r.Pool.Query(ctx, `select batch_id, file from payout.bank_batches where delivered_at is null order by created_at, file_seq`)
	if err != nil {
		return err
	}
	type pending struct {
		id   string
		file []byte
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pending, error) {
		var p pending
		return p, r.Scan(&p.id, &p.file)
	})
	if err != nil {
		return err
	}
	for _, p := range ps {
		path, err := writeAtomic(r.Cfg.OutboxDir, p.id+".xml", p.file)
		if err != nil {
			return fmt.Errorf("deliver batch %s: %w", p.id, err)
		}
		if _, err := r.Pool.Exec(ctx, `update payout.bank_batches set delivered_at = $2, delivered_path = $3 where batch_id = $1`,
			p.id, r.Clock.Now(), path); err != nil {
			return err
		}
		r.Log.Info("bank batch delivered", "batch_id", p.id, "path", path)
	}
	return nil
}

// outboxFileMode lets the owner write and its group (the SFTP client's) read a batch file.
const outboxFileMode = 0o640

// writeAtomic writes dir/name through a temporary file in dir and a rename,
// synced: a file it reports written survives a crash.
func writeAtomic(dir, name string, b []byte) (_ string, err error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	defer func() {
		// After a successful rename there is nothing left to remove.
		if rerr := os.Remove(tmp); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, fmt.Errorf("temporary file left in the outbox: %w", rerr))
		}
	}()
	// CreateTemp makes the file 0600; the bank's SFTP client usually runs
	// as another user of the same group.
	if err := f.Chmod(outboxFileMode); err != nil {
		f.Close()
		return "", err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	final := filepath.Join(dir, name)
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	if err := syncDir(dir); err != nil {
		// Not marked delivered: the next Deliver writes the same bytes again.
		return "", fmt.Errorf("sync %s after the rename of %s: %w", dir, name, err)
	}
	return final, nil
}

// syncDir makes a rename in dir durable (a variable for the tests).
var syncDir = fsyncDir

// fsyncDir syncs directory dir. A filesystem that cannot sync a directory
// (EINVAL, ENOTSUP) keeps the renamed file all the same; any other failure
// may lose the rename in a crash, so it is the write's failure.
func fsyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	return nil
}

const batchCols = `batch_id, cutoff_at, execution_date, transfers, control_sum, file_sha256, created_at, delivered_at, delivered_path`

func scanBatch(row pgx.CollectableRow) (app.PayoutBatch, error) {
	var b app.PayoutBatch
	return b, row.Scan(&b.ID, &b.CutoffAt, &b.ExecutionDate, &b.Transfers, &b.ControlSum, &b.FileSHA256, &b.CreatedAt, &b.DeliveredAt, &b.DeliveredPath)
}

// ListBatches implements app.BankFiles: newest first, ids before "before".
func (r *Rail) ListBatches(ctx context.Context, before string, limit int) ([]app.PayoutBatch, error) {
	rows, err := r.Pool.Query(ctx, `select `+batchCols+` from payout.bank_batches where ($1 = '' or batch_id < $1)
		order by batch_id desc limit $2`, before, limit)
	if err != nil {
		return nil, err
	}
	bs, err := pgx.CollectRows(rows, scanBatch)
	if err != nil {
		return nil, err
	}
	for i := range bs {
		if bs[i].Totals, err = r.totals(ctx, bs[i].ID); err != nil {
			return nil, err
		}
	}
	return bs, nil
}

// GetBatch implements app.BankFiles.
func (r *Rail) GetBatch(ctx context.Context, id string) (app.PayoutBatch, error) {
	rows, err := r.Pool.Query(ctx, `select `+batchCols+` from payout.bank_batches where batch_id = $1`, id)
	if err != nil {
		return app.PayoutBatch{}, err
	}
	b, err := pgx.CollectExactlyOneRow(rows, scanBatch)
	if errors.Is(err, pgx.ErrNoRows) {
		return b, fmt.Errorf("payout batch %s: %w", id, apperr.ErrNotFound)
	}
	if err != nil {
		return b, err
	}
	b.Totals, err = r.totals(ctx, id)
	return b, err
}

func (r *Rail) totals(ctx context.Context, id string) ([]app.CurrencyTotal, error) {
	rows, err := r.Pool.Query(ctx, `select currency, count(*), sum(amount) from payout.bank_transfers where batch_id = $1 group by currency`, id)
	if err != nil {
		return nil, err
	}
	ts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (app.CurrencyTotal, error) {
		var t app.CurrencyTotal
		return t, row.Scan(&t.Currency, &t.Transfers, &t.Amount)
	})
	sort.Slice(ts, func(i, j int) bool { return ts[i].Currency < ts[j].Currency })
	return ts, err
}

// BatchFile implements app.BankFiles.
func (r *Rail) BatchFile(ctx context.Context, id string) ([]byte, error) {
	var b []byte
	err := r.Pool.QueryRow(ctx, `select file from payout.bank_batches where batch_id = $1`, id).Scan(&b)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("payout batch %s: %w", id, apperr.ErrNotFound)
	}
	return b, err
}
