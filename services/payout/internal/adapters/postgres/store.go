// Package postgres holds payout's Postgres store (schema "payout"): payouts,
// methods, settings, webhooks and their sealed secrets, rail notifications,
// and the payout cache kept fresh by LISTEN.
package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Schema is payout's Postgres schema.
const Schema = "payout"

// SQLStateSettledOutsideStands is the error payout/0035's trigger raises
// for a failed or returned payout moved to created (retried) while a claim
// of its settlement outside stands (payout.settled_outside). Move answers
// it a failed precondition; app.Retry refuses such a retry before it, so
// only a replica of a version before that rule meets it (a 500 there).
const SQLStateSettledOutsideStands = "GBP01"

// unstartedBatchMax bounds one pass of the workflow starter.
const unstartedBatchMax = 500

// Store reads and writes payout's tables.
type Store struct {
	Pool *pgxpool.Pool
	// Event, when set, makes the outbox message announcing a status change
	// (written in the transaction of the change).
	Event func(p domain.Payout, from string, c domain.Change) (outbox.Message, error)
	// Cache, when set, serves PollPayout.
	Cache *PayoutCache
	// Box seals and opens webhook secrets.
	Box *SecretBox
}

// Tx runs fn in a transaction.
func (s *Store) Tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.Pool, fn)
}

// PutMethod replaces a provider's payout method and keeps the change
// (masked) in the method history. It refuses (ErrPrecondition) while a
// payout of the provider is being submitted, past the gate and not yet
// answered by its rail: a retry after an unknown result submits under the
// same reference to the rail of the method it reads, and a rail only knows
// its own references, so a new method of another type could pay the
// provider twice, once on each rail. Its rows are locked first, so the
// gate (Prepare, which marks a payout submitting) waits for the change or
// the change sees the mark.
//
// The same method again changes nothing and answers the stored one (changed
// false): a client's retry of a PUT that succeeded was refused while the
// payouts it woke were being submitted, and one that went through recorded
// a change, announced it on every waiting payout and moved updated_at,
// which :retry reads as "the method changed since it failed" (a failed
// payout resent to the same account).
//
// A payout already submitted (submitted or in transit) goes on to the
// method it was submitted with (a bank transfer queued for its cutoff
// copied the account): the change does not reach it, and is not refused
// for it. Each such payout's history notes that it still goes to the old
// method, and inFlight names them for the answer: the change answered the
// new method only while a queued transfer was paid to the old account.
func (s *Store) PutMethod(ctx context.Context, m domain.ProviderMethod) (_ domain.ProviderMethod, _ bool, inFlight []string, _ error) {
	out, changed := m, true
	err := s.Tx(ctx, func(tx pgx.Tx) error {
		inFlight = nil
		// One change of a provider's method at a time (two identical PUTs
		// side by side: the second sees the first's row).
		if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtext('gpubill.payout.method'), hashtext($1))`, m.ProviderID); err != nil {
			return err
		}
		old := domain.ProviderMethod{ProviderID: m.ProviderID}
		err := tx.QueryRow(ctx, `select type, account_name, account_number, alipay_id, wechat_openid, bank_code, updated_at
			from payout.methods where provider_id = $1`, m.ProviderID).Scan(&old.Type, &old.AccountName, &old.AccountNumber, &old.AlipayID,
			&old.WechatOpenID, &old.BankCode, &old.UpdatedAt)
		switch {
		case err == nil && old.Method == m.Method:
			out, changed = old, false
			return nil
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		var busy string
		err = tx.QueryRow(ctx, `with mine as (select payout_id, status, submitting from payout.payouts
				where provider_id = $1 and status in ('action_required', 'created') order by payout_id for update)
			select coalesce(min(payout_id) filter (where status = 'created' and submitting), '') from mine`, m.ProviderID).Scan(&busy)
		if err != nil {
			return err
		}
		if busy != "" {
			return fmt.Errorf("payout %s is being submitted to its rail: change the payout method once it is submitted (its status says so): %w",
				busy, apperr.ErrPrecondition)
		}
		if _, err := tx.Exec(ctx, `insert into payout.methods (provider_id, type, account_name, account_number, alipay_id, wechat_openid, bank_code, updated_at)
			values ($1, $2, $3, $4, $5, $6, $7, $8) on conflict (provider_id) do update set type = excluded.type,
			account_name = excluded.account_name, account_number = excluded.account_number, alipay_id = excluded.alipay_id,
			wechat_openid = excluded.wechat_openid, bank_code = excluded.bank_code, updated_at = excluded.updated_at`,
			m.ProviderID, m.Type, m.AccountName, m.AccountNumber, m.AlipayID, m.WechatOpenID, m.BankCode, m.UpdatedAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `insert into payout.method_history (provider_id, summary, changed_at) values ($1, $2, $3)`,
			m.ProviderID, m.Summary(), m.UpdatedAt); err != nil {
			return err
		}
		// Payouts not yet on their way keep the change in their history
		// (and announce it: event and webhooks).
		rows, err := tx.Query(ctx, `select `+payoutCols+` from payout.payouts
			where provider_id = $1 and status in ('action_required', 'created') and not submitting order by payout_id for update`, m.ProviderID)
		if err != nil {
			return err
		}
		waiting, err := pgx.CollectRows(rows, scanPayout)
		if err != nil {
			return err
		}
		for _, p := range waiting {
			if _, err := tx.Exec(ctx, `update payout.payouts set version = version + 1, updated_at = $2 where payout_id = $1`, p.ID, m.UpdatedAt); err != nil {
				return err
			}
			p.Version++
			if err := s.record(ctx, tx, &p, p.Status, domain.Change{Status: p.Status, Note: "payout method set: " + m.Summary(), At: m.UpdatedAt}); err != nil {
				return err
			}
		}
		inFlight, err = s.noteMethodNotTaken(ctx, tx, m)
		return err
	})
	if !changed {
		inFlight = nil
	}
	return out, changed, inFlight, err
}

// noteMethodNotTaken notes on each of a provider's payouts already
// submitted (submitted or in transit) that the method m set does not reach
// it, and returns their ids.
func (s *Store) noteMethodNotTaken(ctx context.Context, tx pgx.Tx, m domain.ProviderMethod) ([]string, error) {
	rows, err := tx.Query(ctx, `select `+payoutCols+` from payout.payouts
		where provider_id = $1 and status in ('submitted', 'in_transit') order by payout_id for update`, m.ProviderID)
	if err != nil {
		return nil, err
	}
	sent, err := pgx.CollectRows(rows, scanPayout)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(sent))
	for _, p := range sent {
		old := p.MethodSum
		if old == "" {
			old = "the method it was submitted with"
		}
		note := "payout method set to " + m.Summary() + ": this payout, already submitted, still goes to " + old
		// updated_at kept: it is the last status change the in-flight age
		// counts from (a method change says nothing of the rail).
		if _, err := tx.Exec(ctx, `update payout.payouts set version = version + 1 where payout_id = $1`, p.ID); err != nil {
			return nil, err
		}
		p.Version++
		if err := s.record(ctx, tx, &p, p.Status, domain.Change{Status: p.Status, Note: note, At: m.UpdatedAt}); err != nil {
			return nil, err
		}
		ids = append(ids, p.ID)
	}
	return ids, nil
}

// GetMethod returns a provider's payout method, or ErrNotFound.
func (s *Store) GetMethod(ctx context.Context, provider string) (domain.ProviderMethod, error) {
	m := domain.ProviderMethod{ProviderID: provider}
	err := s.Pool.QueryRow(ctx, `select type, account_name, account_number, alipay_id, wechat_openid, bank_code, updated_at
		from payout.methods where provider_id = $1`, provider).Scan(&m.Type, &m.AccountName, &m.AccountNumber, &m.AlipayID,
		&m.WechatOpenID, &m.BankCode, &m.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return m, fmt.Errorf("payout method of %s: %w", provider, apperr.ErrNotFound)
	}
	return m, err
}

// PutKYC sets a provider's KYC status. The provider's own (byProvider) is
// refused over finance's rejection: its "pending" wiped the verdict, and
// its payouts went to the gate again.
//
// A rejection stops the provider's payouts as a hold does (PutHold), under
// the same locks: the bank-file rail's batch lock (shared), then the
// payouts' rows, so the gate either reads the rejection or has marked the
// payout submitting before this reads it (answered in flight), and a cut
// either reads it (its queued transfers stay out of the bank file) or
// batched them before (answered in flight). It returns the payouts it
// stops (waiting: not yet past the gate, or their bank transfer queued for
// a cutoff, each such payout noted) and those it cannot (inFlight). A
// rejection changed by finance answers the same and notes the queued ones
// released. Any other change answers none.
func (s *Store) PutKYC(ctx context.Context, provider, status, reference string, byProvider bool, at time.Time) (waiting, inFlight []string, err error) {
	err = s.Tx(ctx, func(tx pgx.Tx) error {
		waiting, inFlight = nil, nil
		if err := s.LockBankQueue(ctx, tx); err != nil {
			return err
		}
		var was string
		err := tx.QueryRow(ctx, `select status from payout.kyc where provider_id = $1 for update`, provider).Scan(&was)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if byProvider && was == domain.KYCRejected {
			return fmt.Errorf("KYC of %s is rejected by finance: only finance can change its verdict: %w", provider, apperr.ErrPrecondition)
		}
		var queued []domain.Payout
		stops := status == domain.KYCRejected || was == domain.KYCRejected
		if stops {
			if waiting, inFlight, queued, err = s.lockProvider(ctx, tx, provider); err != nil {
				return err
			}
		}
		// Guarded as well for a provider's first KYC written as finance
		// rejects it (no row to lock above). rejected_at is the first save
		// of a rejection, kept while it stays rejected: a rejection saved
		// again is no new one, and the age of the transfers it keeps
		// queued counts from it (gpubill_payout_kyc_rejected_queued_age_seconds);
		// from the last save, re-saving it daily hid them for ever.
		tag, err := tx.Exec(ctx, `insert into payout.kyc (provider_id, status, reference, updated_at, rejected_at)
			values ($1, $2, $3, $4, case when $2 = 'rejected' then $4::timestamptz end)
			on conflict (provider_id) do update set status = excluded.status, reference = excluded.reference, updated_at = excluded.updated_at,
				rejected_at = case when excluded.status <> 'rejected' then null
					when payout.kyc.status = 'rejected' then payout.kyc.rejected_at else excluded.rejected_at end
			where not $5 or payout.kyc.status <> 'rejected'`, provider, status, reference, at, byProvider)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("KYC of %s is rejected by finance: only finance can change its verdict: %w", provider, apperr.ErrPrecondition)
		}
		if !stops {
			return nil
		}
		released := status != domain.KYCRejected
		if released && len(queued) > 0 {
			// Its queued transfers wait for a cutoff from now
			// (gpubill_bank_transfers_queued_age_seconds).
			if _, err := tx.Exec(ctx, `update payout.bank_transfers set hold_released_at = $2 where provider_id = $1 and state = 'queued'`,
				provider, at); err != nil {
				return err
			}
		}
		for _, p := range queued {
			waiting = append(waiting, p.ID)
			note := domain.KYCRejectedQueuedNote
			switch {
			case released && p.Reason != domain.KYCRejectedQueuedNote:
				continue // noted otherwise (a hold's): nothing to say
			case released:
				note = domain.KYCReleasedQueuedNote
			case p.Reason == note:
				continue // rejected already
			}
			if err := s.noteQueued(ctx, tx, &p, note, at); err != nil {
				return err
			}
		}
		return nil
	})
	return waiting, inFlight, err
}

// KYCStatus reads a provider's KYC status ("" when none).
func (s *Store) KYCStatus(ctx context.Context, provider string) (string, error) {
	var st string
	err := s.Pool.QueryRow(ctx, `select coalesce((select status from payout.kyc where provider_id = $1), '')`, provider).Scan(&st)
	return st, err
}

// PutHold holds (reason ≠ "") or releases (reason "") a provider's payouts
// and returns those the hold stops (waiting) and those it cannot stop
// (inFlight). Waiting: the payouts not yet past the gate, and the submitted
// ones whose bank transfer is queued for a cutoff not yet cut (the cut
// leaves a held provider's transfers queued; each such payout's status
// reason and history say it is held, and released, that it goes in the
// next bank file). In flight: those past the gate being submitted to their
// rail, and those submitted or in transit otherwise (sent to Alipay or
// WeChat Pay, in a bank file already cut, held for review after a
// restore): their status says how they end.
//
// The hold takes the bank-file rail's batch lock (shared) first: a cut
// holds it (exclusive) from before it reads the holds until its transfers
// are batched, so a transfer answered queued here is left out by every cut
// after this commits, and one a cut batched meanwhile is answered in
// flight. The payouts' rows are locked next, so the gate (Prepare, which
// locks the payout and reads the hold) either reads the hold or has marked
// the payout submitting before this reads it; a hold was answered as
// applying to a payout the gate had just passed.
func (s *Store) PutHold(ctx context.Context, provider, reason string, at time.Time) (waiting, inFlight []string, err error) {
	err = s.Tx(ctx, func(tx pgx.Tx) error {
		waiting, inFlight = nil, nil
		if err := s.LockBankQueue(ctx, tx); err != nil {
			return err
		}
		var queued []domain.Payout
		if waiting, inFlight, queued, err = s.lockProvider(ctx, tx, provider); err != nil {
			return err
		}
		if reason == "" {
			var tag pgconn.CommandTag
			tag, err = tx.Exec(ctx, `delete from payout.holds where provider_id = $1`, provider)
			if err == nil && tag.RowsAffected() == 1 {
				// Its queued transfers wait for a cutoff from now
				// (gpubill_bank_transfers_queued_age_seconds).
				_, err = tx.Exec(ctx, `update payout.bank_transfers set hold_released_at = $2 where provider_id = $1 and state = 'queued'`, provider, at)
			}
		} else {
			_, err = tx.Exec(ctx, `insert into payout.holds (provider_id, reason, held_at) values ($1, $2, $3)
			on conflict (provider_id) do update set reason = excluded.reason, held_at = excluded.held_at`, provider, reason, at)
		}
		if err != nil {
			return err
		}
		// Released, its provider's KYC rejected by finance still keeps
		// its queued transfers out of the cut (PutKYC): said so, not that
		// they go in the next bank file.
		var rejected bool
		if reason == "" && len(queued) > 0 {
			if err := tx.QueryRow(ctx, `select exists (select 1 from payout.kyc where provider_id = $1 and status = 'rejected')`,
				provider).Scan(&rejected); err != nil {
				return err
			}
		}
		for _, p := range queued {
			waiting = append(waiting, p.ID)
			note := domain.HeldQueuedNote(reason)
			switch {
			case reason == "" && !strings.HasPrefix(p.Reason, domain.HeldReasonPrefix):
				continue // not held: nothing to say
			case reason == "" && rejected:
				note = domain.KYCRejectedQueuedNote
			case reason == "":
				note = domain.HoldReleasedQueuedNote
			case p.Reason == note:
				continue // held already, for the same reason
			}
			if err := s.noteQueued(ctx, tx, &p, note, at); err != nil {
				return err
			}
		}
		return nil
	})
	return waiting, inFlight, err
}

// lockProvider locks a provider's payouts, as a hold or a KYC rejection
// needs them: those not yet past the gate (waiting), then those past it
// (inFlight: being submitted, or submitted or in transit but for those
// whose bank transfer is queued for a cutoff, returned as queued). The
// caller holds the batch lock (LockBankQueue).
func (s *Store) lockProvider(ctx context.Context, tx pgx.Tx, provider string) (waiting, inFlight []string, queued []domain.Payout, err error) {
	rows, err := tx.Query(ctx, `select payout_id, status = 'created' and submitting from payout.payouts
		where provider_id = $1 and status in ('action_required', 'created') order by payout_id for update`, provider)
	if err != nil {
		return nil, nil, nil, err
	}
	var id string
	var busy bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &busy}, func() error {
		if busy {
			inFlight = append(inFlight, id)
		} else {
			waiting = append(waiting, id)
		}
		return nil
	}); err != nil {
		return nil, nil, nil, err
	}
	queued, err = s.lockSent(ctx, tx, provider, &inFlight)
	return waiting, inFlight, queued, err
}

// noteQueued records note, a hold or its release, as the reason of a
// submitted payout whose bank transfer is queued, with a history row. Its
// expected arrival is cleared: held, it has none (the cut leaves it out);
// released, its workflow, woken, takes the rail's date from the release
// (a history row of its own). Held, it showed the date of the cutoff after
// its queuing, long passed.
func (s *Store) noteQueued(ctx context.Context, tx pgx.Tx, p *domain.Payout, note string, at time.Time) error {
	if _, err := tx.Exec(ctx, `update payout.payouts set status_reason = $2, expected_arrival = null, version = version + 1, updated_at = $3
		where payout_id = $1`, p.ID, note, at); err != nil {
		return err
	}
	p.Reason, p.ExpectedArrival, p.UpdatedAt = note, nil, at
	p.Version++
	return s.record(ctx, tx, p, p.Status, domain.Change{Status: p.Status, Note: note, At: at})
}

// LockBankQueue takes the bank-file rail's batch lock, shared (see PutHold).
func (s *Store) LockBankQueue(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `select pg_advisory_xact_lock_shared($1)`, domain.BankBatchLockKey)
	return err
}

// HoldQueued records on p, submitted, that its provider's hold keeps its
// queued bank transfer out of the bank file, as PutHold does for a
// transfer queued before the hold: a payout being submitted when the hold
// was placed was answered in flight and held by the cut without a word.
// The caller holds the batch lock (LockBankQueue) and p's lock, so the
// hold and the transfer's state read here stand until it commits.
//
// A KYC rejected by finance keeps it out likewise (noted so when its
// provider is not held): a payout being submitted when the KYC was
// rejected (answered in flight) whose rail had it before Submit read the
// KYC.
func (s *Store) HoldQueued(ctx context.Context, tx pgx.Tx, p *domain.Payout, at time.Time) error {
	var reason string
	var rejected bool
	err := tx.QueryRow(ctx, `select coalesce((select reason from payout.holds where provider_id = t.provider_id), ''),
			exists (select 1 from payout.kyc where provider_id = t.provider_id and status = 'rejected')
		from payout.bank_transfers t where t.provider_id = $1 and t.reference = $2 and t.state = 'queued'`, p.ProviderID, p.RailRef).Scan(&reason, &rejected)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // no longer queued
	}
	if err != nil {
		return err
	}
	var note string
	switch {
	case reason != "":
		note = domain.HeldQueuedNote(reason)
	case rejected:
		note = domain.KYCRejectedQueuedNote
	default:
		return nil // released meanwhile
	}
	if p.Status != domain.StatusSubmitted || (p.Reason == note && p.ExpectedArrival == nil) {
		return nil
	}
	return s.noteQueued(ctx, tx, p, note, at)
}

// WithdrawQueued takes p's bank transfer out of the bank-file queue
// (canceled: never cut) and reports whether it was queued. The caller
// holds the batch lock (LockBankQueue), so no cut takes it meanwhile.
// Refused while a restore hold is open: a transfer queued again by the
// restore may have been cut and sent after its point, and the bank pays
// it.
func (s *Store) WithdrawQueued(ctx context.Context, tx pgx.Tx, p domain.Payout, at time.Time) (bool, error) {
	var queued, restoreHeld bool
	if err := tx.QueryRow(ctx, `select exists (select 1 from payout.bank_transfers where reference = $1 and provider_id = $2 and state = 'queued'),
			exists (select 1 from payout.bank_file_holds where released_at is null)`, p.RailRef, p.ProviderID).Scan(&queued, &restoreHeld); err != nil || !queued {
		return false, err
	}
	if restoreHeld {
		return false, fmt.Errorf("payout %s: its bank transfer is queued after a restore, and the bank may have it (cut and sent after the restore's point): "+
			"cancel it once the restore hold is released (POST /v1/bank-files:release-restore-hold): %w", p.ID, apperr.ErrPrecondition)
	}
	tag, err := tx.Exec(ctx, `update payout.bank_transfers set state = 'canceled', updated_at = $2 where reference = $1 and state = 'queued'`, p.RailRef, at)
	return err == nil && tag.RowsAffected() == 1, err
}

// lockSent locks a provider's payouts submitted or in transit: it returns
// those whose bank transfer is queued for a cutoff (a hold keeps it out of
// the bank file) and adds the others' ids to inFlight. The caller holds the
// batch lock, so no cut moves a queued transfer meanwhile.
func (s *Store) lockSent(ctx context.Context, tx pgx.Tx, provider string, inFlight *[]string) ([]domain.Payout, error) {
	rows, err := tx.Query(ctx, `select `+payoutCols+`, exists (select 1 from payout.bank_transfers t
			where t.reference = p.rail_reference and t.provider_id = p.provider_id and t.state = 'queued')
		from payout.payouts p where provider_id = $1 and status in ('submitted', 'in_transit') order by payout_id for update`, provider)
	if err != nil {
		return nil, err
	}
	var queued []domain.Payout
	_, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (struct{}, error) {
		var p domain.Payout
		var q bool
		if err := r.Scan(&p.ID, &p.ProviderID, &p.CycleID, &p.Currency, &p.Gross, &p.Commission, &p.Tax, &p.Net, &p.Status, &p.Reason,
			&p.Method, &p.MethodSum, &p.FailureCode, &p.FailureMessage, &p.RailRef, &p.Attempt, &p.Submitting, &p.ExpectedArrival,
			&p.PaidAt, &p.AbsorbedInto, &p.Version, &p.CreatedAt, &p.UpdatedAt, &p.SubmitRail, &q); err != nil {
			return struct{}{}, err
		}
		if q {
			queued = append(queued, p)
		} else {
			*inFlight = append(*inFlight, p.ID)
		}
		return struct{}{}, nil
	})
	return queued, err
}

// gate reads what a provider's gate needs inside tx.
func gate(ctx context.Context, tx pgx.Tx, provider string) (in domain.GateInput, method string, err error) {
	err = tx.QueryRow(ctx, `select coalesce((select status from payout.kyc where provider_id = $1), ''),
		coalesce((select type from payout.methods where provider_id = $1), ''),
		coalesce((select reason from payout.holds where provider_id = $1), '')`, provider).Scan(&in.KYC, &method, &in.Held)
	in.HasMethod = method != ""
	return in, method, err
}

// CreateFromSettled creates the payout of a settled provider, cycle and
// currency once (a redelivery changes nothing); it reports whether it was
// new. Earlier payouts of the provider and currency still waiting
// (action_required: under the minimum, or waiting for KYC or a method) join
// it: their statements and amounts move into the new payout and they are
// canceled with the new payout's id, so one payout carries what is waiting.
// Their money never left provider:{id}:available. It returns the ids of
// the payouts that joined (their workflows have nothing left to wait for).
func (s *Store) CreateFromSettled(ctx context.Context, tx pgx.Tx, p domain.Payout, min domain.Minimums) (joined []string, err error) {
	var exists bool
	if err := tx.QueryRow(ctx, `select exists (select 1 from payout.payouts where provider_id = $1 and cycle_id = $2 and currency = $3)`,
		p.ProviderID, p.CycleID, p.Currency).Scan(&exists); err != nil || exists {
		return nil, err
	}
	waiting, err := s.lockWaiting(ctx, tx, p.ProviderID, p.Currency)
	if err != nil {
		return nil, err
	}
	p.Statements = []domain.Statement{{CycleID: p.CycleID, Currency: p.Currency, Net: p.Net}}
	for _, w := range waiting {
		p.Gross, p.Commission, p.Tax, p.Net = p.Gross.Add(w.Gross), p.Commission.Add(w.Commission), p.Tax.Add(w.Tax), p.Net.Add(w.Net)
	}
	in, method, err := gate(ctx, tx, p.ProviderID)
	if err != nil {
		return nil, err
	}
	in.Currency, in.Amount = p.Currency, p.Net
	p.Status, p.Reason = min.Gate(in)
	p.Method, p.Attempt, p.Version, p.UpdatedAt = method, 1, 1, p.CreatedAt
	tag, err := tx.Exec(ctx, `insert into payout.payouts (payout_id, provider_id, cycle_id, currency, gross, commission,
			tax_withheld, net, status, status_reason, method, created_at, updated_at)
		values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12) on conflict (provider_id, cycle_id, currency) do nothing`,
		p.ID, p.ProviderID, p.CycleID, p.Currency, p.Gross, p.Commission, p.Tax, p.Net, p.Status, p.Reason, p.Method, p.CreatedAt)
	if err != nil || tag.RowsAffected() == 0 {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `insert into payout.payout_statements (payout_id, cycle_id, currency, net) values ($1, $2, $3, $4)`,
		p.ID, p.CycleID, p.Currency, p.Statements[0].Net); err != nil {
		return nil, err
	}
	for _, w := range waiting {
		if _, err := tx.Exec(ctx, `insert into payout.payout_statements (payout_id, cycle_id, currency, net)
			select $1, cycle_id, currency, net from payout.payout_statements where payout_id = $2`, p.ID, w.ID); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `update payout.payouts set absorbed_into = $2 where payout_id = $1`, w.ID, p.ID); err != nil {
			return nil, err
		}
		w.AbsorbedInto = p.ID
		joined = append(joined, w.ID)
		if err := s.Move(ctx, tx, &w, domain.StatusCanceled, "joined payout "+p.ID, p.CreatedAt); err != nil {
			return nil, err
		}
	}
	note := p.Reason
	if len(waiting) > 0 {
		note = fmt.Sprintf("%d waiting payout(s) joined; %s", len(waiting), p.Reason)
	}
	return joined, s.record(ctx, tx, &p, "", domain.Change{Status: p.Status, Note: note, At: p.CreatedAt})
}

// lockWaiting locks a provider's payouts in a currency that wait before
// submission (action_required) for what a new payout shares: KYC, a
// method, a hold, the minimum. Not those waiting for available to cover
// them (insufficient_available, after a reversal) or for the ledger to take
// their posting (ledger_refused): joined, the new payout carried their
// shortfall or refusal, and waited with its own money, settlement after
// settlement.
func (s *Store) lockWaiting(ctx context.Context, tx pgx.Tx, provider, currency string) ([]domain.Payout, error) {
	rows, err := tx.Query(ctx, `select `+payoutCols+` from payout.payouts
		where provider_id = $1 and currency = $2 and status = 'action_required' and not submitting
		  and not starts_with(status_reason, $3) and not starts_with(status_reason, $4)
		order by payout_id for update`, provider, currency, domain.ReasonInsufficientAvailable, domain.ReasonLedgerRefused)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanPayout)
}

// Move changes a payout's status inside tx (the state machine refuses an
// illegal change), keeps the change in its history with its time and
// reason, and writes the status-change event to the outbox.
func (s *Store) Move(ctx context.Context, tx pgx.Tx, p *domain.Payout, to, note string, at time.Time) error {
	if err := domain.CheckTransition(p.Status, to); err != nil {
		return fmt.Errorf("payout %s: %w", p.ID, err)
	}
	from := p.Status
	tag, err := tx.Exec(ctx, `update payout.payouts set status = $3, status_reason = $4, failure_code = $5, failure_message = $6,
			rail_reference = $7, expected_arrival = $8, paid_at = $9, attempt = $10, submitting = $11, method = $12,
			method_summary = $13, updated_at = $14, submit_rail = $15, version = version + 1
		where payout_id = $1 and status = $2`,
		p.ID, from, to, note, p.FailureCode, p.FailureMessage, p.RailRef, p.ExpectedArrival, p.PaidAt, p.Attempt, p.Submitting,
		p.Method, p.MethodSum, at, p.SubmitRail)
	if pe := (*pgconn.PgError)(nil); errors.As(err, &pe) && pe.Code == SQLStateSettledOutsideStands {
		return fmt.Errorf("%s: %w", pe.Message, apperr.ErrPrecondition)
	}
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("payout %s: status changed under us (was %s): %w", p.ID, from, apperr.ErrConflict)
	}
	p.Status, p.Reason, p.UpdatedAt = to, note, at
	p.Version++
	return s.record(ctx, tx, p, from, domain.Change{Status: to, Note: note, At: at})
}

// record appends c to the payout's history and queues its event.
func (s *Store) record(ctx context.Context, tx pgx.Tx, p *domain.Payout, from string, c domain.Change) error {
	if _, err := tx.Exec(ctx, `insert into payout.status_history (payout_id, seq, status, note, at)
		select $1, coalesce(max(seq), 0) + 1, $2, $3, $4 from payout.status_history where payout_id = $1`,
		p.ID, c.Status, c.Note, c.At); err != nil {
		return err
	}
	p.History = append(p.History, c)
	if s.Event == nil {
		return nil
	}
	m, err := s.Event(*p, from, c)
	if err != nil {
		return err
	}
	if err := outbox.Add(ctx, tx, Schema, m); err != nil {
		return err
	}
	net := p.Net.String()
	if cur, err := money.Lookup(p.Currency); err == nil {
		net = cur.Format(p.Net)
	}
	body, err := json.Marshal(domain.WebhookEvent{EventID: m.ID, Type: "payout.status_changed", PayoutID: p.ID, ProviderID: p.ProviderID,
		FromStatus: from, Status: c.Status, Note: c.Note, Net: net, Currency: p.Currency, FailureCode: p.FailureCode, At: c.At})
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `insert into payout.webhook_deliveries (webhook_id, event_id, payout_id, payload, next_attempt_at, created_at)
		select webhook_id, $2, $3, $4, $5, $5 from payout.webhooks where provider_id = $1 and deleted_at is null for share
		on conflict (webhook_id, event_id) do nothing`,
		p.ProviderID, m.ID, p.ID, body, c.At)
	return err
}

// Lock reads a payout for update inside tx.
func (s *Store) Lock(ctx context.Context, tx pgx.Tx, id string) (domain.Payout, error) {
	rows, err := tx.Query(ctx, `select `+payoutCols+` from payout.payouts where payout_id = $1 for update`, id)
	if err != nil {
		return domain.Payout{}, err
	}
	p, err := pgx.CollectExactlyOneRow(rows, scanPayout)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("payout %s: %w", id, apperr.ErrNotFound)
	}
	return p, err
}

// Gate re-reads a waiting payout's gate inside tx and returns what it says.
func (s *Store) Gate(ctx context.Context, tx pgx.Tx, p domain.Payout, min domain.Minimums) (status, reason, method string, err error) {
	in, method, err := gate(ctx, tx, p.ProviderID)
	if err != nil {
		return "", "", "", err
	}
	in.Currency, in.Amount = p.Currency, p.Net
	status, reason = min.Gate(in)
	return status, reason, method, nil
}

// SetWorkflowStarted marks the attempts whose workflow runs. Only those
// attempts: the starter marks a batch after starting all of it, by when a
// payout it read may have failed and been retried (ResetWorkflow); marking
// it by id alone left the retry without a workflow, created for ever.
func (s *Store) SetWorkflowStarted(ctx context.Context, started []app.PayoutAttempt) error {
	ids, attempts := make([]string, len(started)), make([]int, len(started))
	for i, a := range started {
		ids[i], attempts[i] = a.ID, a.Attempt
	}
	_, err := s.Pool.Exec(ctx, `update payout.payouts p set workflow_started = true
		from unnest($1::text[], $2::int[]) as a(payout_id, attempt)
		where p.payout_id = a.payout_id and p.attempt = a.attempt and not p.workflow_started`, ids, attempts)
	return err
}

// Unstarted lists payouts whose workflow is not started yet, oldest first,
// with the attempt that waits for it.
func (s *Store) Unstarted(ctx context.Context) ([]app.PayoutAttempt, error) {
	rows, err := s.Pool.Query(ctx, `select payout_id, attempt from payout.payouts where not workflow_started order by created_at limit $1`,
		unstartedBatchMax)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (app.PayoutAttempt, error) {
		var a app.PayoutAttempt
		return a, r.Scan(&a.ID, &a.Attempt)
	})
}

// WaitingIDs lists a provider's payouts not yet submitted (their workflows
// wait at the gate).
func (s *Store) WaitingIDs(ctx context.Context, provider string) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `select payout_id from payout.payouts where provider_id = $1 and status in ('action_required', 'created')`, provider)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// WaitingForAvailable lists a provider's payouts waiting because available
// did not cover them (domain.ReasonInsufficientAvailable).
func (s *Store) WaitingForAvailable(ctx context.Context, provider string) ([]string, error) {
	rows, err := s.Pool.Query(ctx, `select payout_id from payout.payouts where provider_id = $1 and status = 'action_required'
		and starts_with(status_reason, $2)`, provider, domain.ReasonInsufficientAvailable)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// PayoutByReference finds the payout a rail reference belongs to.
func (s *Store) PayoutByReference(ctx context.Context, ref string) (string, error) {
	var id string
	err := s.Pool.QueryRow(ctx, `select payout_id from payout.payouts where rail_reference = $1`, ref).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("rail reference %s: %w", ref, apperr.ErrNotFound)
	}
	return id, err
}

const payoutCols = `payout_id, provider_id, cycle_id, currency, gross, commission, tax_withheld, net, status, status_reason,
	method, method_summary, failure_code, failure_message, rail_reference, attempt, submitting, expected_arrival, paid_at,
	absorbed_into, version, created_at, updated_at, submit_rail`

func scanPayout(r pgx.CollectableRow) (domain.Payout, error) {
	var p domain.Payout
	return p, r.Scan(&p.ID, &p.ProviderID, &p.CycleID, &p.Currency, &p.Gross, &p.Commission, &p.Tax, &p.Net, &p.Status, &p.Reason,
		&p.Method, &p.MethodSum, &p.FailureCode, &p.FailureMessage, &p.RailRef, &p.Attempt, &p.Submitting, &p.ExpectedArrival,
		&p.PaidAt, &p.AbsorbedInto, &p.Version, &p.CreatedAt, &p.UpdatedAt, &p.SubmitRail)
}

// list reads the payouts, their histories and statements in one snapshot:
// read in three, a change committed between them answered a payout whose
// status its own history contradicted.
func (s *Store) list(ctx context.Context, where string, args ...any) ([]domain.Payout, error) {
	tx, err := s.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // read only: its error changes nothing
	rows, err := tx.Query(ctx, `select `+payoutCols+` from payout.payouts where `+where, args...)
	if err != nil {
		return nil, err
	}
	ps, err := pgx.CollectRows(rows, scanPayout)
	if err != nil || len(ps) == 0 {
		return ps, err
	}
	idx := make(map[string]int, len(ps))
	ids := make([]string, len(ps))
	for i, p := range ps {
		idx[p.ID], ids[i] = i, p.ID
	}
	hrows, err := tx.Query(ctx, `select payout_id, status, note, at from payout.status_history where payout_id = any($1) order by payout_id, seq`, ids)
	if err != nil {
		return nil, err
	}
	var id string
	var c domain.Change
	if _, err := pgx.ForEachRow(hrows, []any{&id, &c.Status, &c.Note, &c.At}, func() error {
		ps[idx[id]].History = append(ps[idx[id]].History, c)
		return nil
	}); err != nil {
		return nil, err
	}
	srows, err := tx.Query(ctx, `select payout_id, cycle_id, currency, net from payout.payout_statements where payout_id = any($1) order by payout_id, cycle_id`, ids)
	if err != nil {
		return nil, err
	}
	var st domain.Statement
	if _, err := pgx.ForEachRow(srows, []any{&id, &st.CycleID, &st.Currency, &st.Net}, func() error {
		ps[idx[id]].Statements = append(ps[idx[id]].Statements, st)
		return nil
	}); err != nil {
		return nil, err
	}
	return ps, nil
}

// GetPayout returns one payout or ErrNotFound: one round trip (the
// history and statements come as JSON arrays), since providers poll it.
func (s *Store) GetPayout(ctx context.Context, id string) (domain.Payout, error) {
	rows, err := s.Pool.Query(ctx, `select `+payoutCols+`,
			coalesce((select json_agg(json_build_object('s', status, 'n', note, 'a', at) order by seq)
				from payout.status_history h where h.payout_id = p.payout_id), '[]'),
			coalesce((select json_agg(json_build_object('c', cycle_id, 'u', currency, 'n', net::text) order by cycle_id)
				from payout.payout_statements st where st.payout_id = p.payout_id), '[]')
		from payout.payouts p where payout_id = $1`, id)
	if err != nil {
		return domain.Payout{}, err
	}
	p, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (domain.Payout, error) {
		var p domain.Payout
		var hist []struct {
			S, N string
			A    time.Time
		}
		var sts []struct{ C, U, N string }
		err := r.Scan(&p.ID, &p.ProviderID, &p.CycleID, &p.Currency, &p.Gross, &p.Commission, &p.Tax, &p.Net, &p.Status, &p.Reason,
			&p.Method, &p.MethodSum, &p.FailureCode, &p.FailureMessage, &p.RailRef, &p.Attempt, &p.Submitting, &p.ExpectedArrival,
			&p.PaidAt, &p.AbsorbedInto, &p.Version, &p.CreatedAt, &p.UpdatedAt, &p.SubmitRail, &hist, &sts)
		if err != nil {
			return p, err
		}
		for _, h := range hist {
			p.History = append(p.History, domain.Change{Status: h.S, Note: h.N, At: h.A})
		}
		for _, st := range sts {
			net, err := decimal.NewFromString(st.N)
			if err != nil {
				return p, fmt.Errorf("payout %s statement %s: %w", p.ID, st.C, err)
			}
			p.Statements = append(p.Statements, domain.Statement{CycleID: st.C, Currency: st.U, Net: net})
		}
		return p, nil
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Payout{}, fmt.Errorf("payout %s: %w", id, apperr.ErrNotFound)
	}
	return p, err
}

// ListPayouts lists a provider's payouts newest created first, ties by id
// (descending), limit of them after before. Not by id alone: a payout's id
// sorts by its cycle's first day (domain.PayoutID; one made before ids were
// derived, by its creation time), so a payout settled days late for an old
// cycle listed below payouts created before it, and a client polling the
// first page for new payouts never saw it.
//
// The position is always given, the start as (infinity, ""), never "no
// position, or (created_at, payout_id) < …": the generic plan Postgres keeps
// for this prepared statement can bound the payouts_provider_created scan
// (migration payout/0019) only by a plain row comparison; of the other form
// it read every payout of the provider before the position and sorted them
// (20 000 rows for a page of 20, against the page's 20: EXPLAIN on 120 000
// payouts).
func (s *Store) ListPayouts(ctx context.Context, provider, cycle, status string, before app.PayoutsPosition, limit int) ([]domain.Payout, error) {
	at := pgtype.Timestamptz{Time: before.CreatedAt, Valid: true}
	if before.ID == "" {
		at = pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	}
	return s.list(ctx, `provider_id = $1 and ($2 = '' or cycle_id = $2) and ($3 = '' or status = $3)
		and (created_at, payout_id) < ($4, $5) order by created_at desc, payout_id desc limit $6`, provider, cycle, status, at, before.ID, limit)
}

// SetReason updates why a waiting payout waits (KYC done, method still
// missing) and keeps the new reason in its history.
func (s *Store) SetReason(ctx context.Context, tx pgx.Tx, p *domain.Payout, reason string, at time.Time) error {
	if p.Reason == reason {
		return nil
	}
	if _, err := tx.Exec(ctx, `update payout.payouts set status_reason = $2, updated_at = $3, version = version + 1 where payout_id = $1`,
		p.ID, reason, at); err != nil {
		return err
	}
	p.Reason, p.UpdatedAt = reason, at
	p.Version++
	return s.record(ctx, tx, p, p.Status, domain.Change{Status: p.Status, Note: reason, At: at})
}

// SetFailure records p's failure code and message on a payout whose
// status does not change, and keeps note in its history (with its event).
func (s *Store) SetFailure(ctx context.Context, tx pgx.Tx, p *domain.Payout, note string, at time.Time) error {
	tag, err := tx.Exec(ctx, `update payout.payouts set failure_code = $3, failure_message = $4, status_reason = $5, updated_at = $6,
			version = version + 1
		where payout_id = $1 and status = $2`, p.ID, p.Status, p.FailureCode, p.FailureMessage, note, at)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("payout %s: status changed under us (was %s): %w", p.ID, p.Status, apperr.ErrConflict)
	}
	p.Reason, p.UpdatedAt = note, at
	p.Version++
	return s.record(ctx, tx, p, p.Status, domain.Change{Status: p.Status, Note: note, At: at})
}

// SetArrival records p's expected arrival date on a payout whose status
// does not change (its rail answered a new date), and keeps note in its
// history (with its event). updated_at is left at the payout's last status
// change: gpubill_payout_in_flight_age_seconds counts from it, and a rail
// pushing its date back again and again has still not paid.
func (s *Store) SetArrival(ctx context.Context, tx pgx.Tx, p *domain.Payout, note string, at time.Time) error {
	tag, err := tx.Exec(ctx, `update payout.payouts set expected_arrival = $3, version = version + 1
		where payout_id = $1 and status = $2`, p.ID, p.Status, p.ExpectedArrival)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("payout %s: status changed under us (was %s): %w", p.ID, p.Status, apperr.ErrConflict)
	}
	p.Version++
	return s.record(ctx, tx, p, p.Status, domain.Change{Status: p.Status, Note: note, At: at})
}

// SetSubmitting marks a created payout for submission: from now on it can
// no longer be canceled or held.
func (s *Store) SetSubmitting(ctx context.Context, tx pgx.Tx, id, method, rail string) error {
	_, err := tx.Exec(ctx, `update payout.payouts set submitting = true, submitting_since = now(), method = $2, submit_rail = $3,
		version = version + 1
		where payout_id = $1`, id, method, rail)
	return err
}

// MethodHistory lists a provider's payout method changes (masked), newest first.
func (s *Store) MethodHistory(ctx context.Context, provider string) ([]domain.Change, error) {
	rows, err := s.Pool.Query(ctx, `select summary, changed_at from payout.method_history where provider_id = $1 order by seq desc limit 100`, provider)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Change, error) {
		var c domain.Change
		return c, r.Scan(&c.Note, &c.At)
	})
}

// MethodChangedSince reports whether the provider's payout method changed
// after the payout's current attempt took it: after its first
// "submitted" since its latest "created" (a method cannot change while an
// attempt is being submitted; a later "submitted" row is no submission but
// a note on the submitted payout: its rail's new arrival date, a
// rail_amount_mismatch flag), else after t (an attempt that failed at
// submission: changes were refused until then).
func (s *Store) MethodChangedSince(ctx context.Context, tx pgx.Tx, provider, payoutID string, t time.Time) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, `with attempt as (select max(at) as began from payout.status_history where payout_id = $2 and status = 'created'),
			sent as (select min(h.at) as at from payout.status_history h, attempt
				where h.payout_id = $2 and h.status = 'submitted' and h.at >= coalesce(attempt.began, '-infinity'))
		select exists (select 1 from payout.methods where provider_id = $1 and updated_at > coalesce((select at from sent), $3))`,
		provider, payoutID, t).Scan(&ok)
	return ok, err
}

// CancelPosted records that the ledger took the return to available of a
// payout canceled in the bank-file queue (domain.CanceledInQueue), its
// attempt given; the first time only.
func (s *Store) CancelPosted(ctx context.Context, id string, attempt int, at time.Time) error {
	_, err := s.Pool.Exec(ctx, `update payout.payouts set cancel_posted_at = $3
		where payout_id = $1 and attempt = $2 and status = 'canceled' and cancel_posted_at is null`, id, attempt, at)
	return err
}

// ResetWorkflow makes the starter start the payout's workflow again (a retry).
func (s *Store) ResetWorkflow(ctx context.Context, tx pgx.Tx, id string) error {
	_, err := tx.Exec(ctx, `update payout.payouts set workflow_started = false where payout_id = $1`, id)
	return err
}

// PollPayout is GetPayout for polls (GET /v1/payouts/{id}): from Cache
// when it holds the payout, else one read, kept in Cache. A copy is
// current but for the milliseconds a change's notification takes to arrive
// (see PayoutCache); writers and their answers read with GetPayout.
func (s *Store) PollPayout(ctx context.Context, id string) (domain.Payout, error) {
	if s.Cache == nil {
		return s.GetPayout(ctx, id)
	}
	if p, ok := s.Cache.Get(id); ok {
		return p, nil
	}
	epoch, keep := s.Cache.Epoch()
	p, err := s.GetPayout(ctx, id)
	if err == nil && keep {
		s.Cache.Put(epoch, p)
	}
	return p, err
}

// ListVersion sums what changes when any payout of a provider changes: the
// count of its payouts and the sum of their versions.
func (s *Store) ListVersion(ctx context.Context, provider string) (count, versions int64, err error) {
	err = s.Pool.QueryRow(ctx, `select count(*), coalesce(sum(version), 0) from payout.payouts where provider_id = $1`, provider).Scan(&count, &versions)
	return count, versions, err
}

// MarkUnstartedAfterRestore marks, through q (the restore's transaction), every payout whose workflow still has
// work (waiting at the gate, not yet confirmed, paid within returnWindow
// and so still watched for a return, or canceled in the bank-file queue
// with its return to available not posted yet) as not started, for the
// starter to start it again on a Temporal that never saw it. It returns how
// many it marked. A payout canceled in the queue was left out: restored
// from a point after its cancel and before its workflow posted the return
// (Cancel's own post failed, the ledger down), its amount stayed in
// in_transit for good. A snapshot taken before migration payout/0026 has
// no cancel_posted_at (the restore failed on it): that migration, run at
// the service's start, marks every payout canceled in the queue.
func MarkUnstartedAfterRestore(ctx context.Context, q interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	QueryRow(context.Context, string, ...any) pgx.Row
}, now time.Time, returnWindow time.Duration) (int64, error) {
	var recorded bool
	if err := q.QueryRow(ctx, `select exists (select 1 from pg_attribute
		where attrelid = 'payout.payouts'::regclass and attname = 'cancel_posted_at' and not attisdropped)`).Scan(&recorded); err != nil {
		return 0, fmt.Errorf("mark payouts for a new workflow after restore: %w", err)
	}
	canceled, args := "", []any{domain.StatusActionRequired, domain.StatusCreated, domain.StatusSubmitted, domain.StatusInTransit,
		domain.StatusPaid, now.Add(-returnWindow)}
	if recorded {
		canceled, args = ` or status = $7 and rail_reference <> '' and cancel_posted_at is null`, append(args, domain.StatusCanceled)
	}
	tag, err := q.Exec(ctx, `update payout.payouts set workflow_started = false
		where workflow_started and (status in ($1, $2, $3, $4) or status = $5 and (paid_at is null or paid_at > $6)`+canceled+`)`, args...)
	if err != nil {
		return 0, fmt.Errorf("mark payouts for a new workflow after restore: %w", err)
	}
	return tag.RowsAffected(), nil
}
