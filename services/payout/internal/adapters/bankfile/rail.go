// Package bankfile is the bank-file payout rail: payouts to bank
// accounts go out in a daily ISO 20022 pain.001.001.09 batch (built once
// per cutoff, kept, served to finance and written to the bank's outbox
// directory), and come back as pain.002 status reports and camt.054
// debit notifications (uploaded, or read from an inbox directory) that
// move each transfer by its EndToEndId: accepted → in transit, booked →
// paid, rejected → failed with the ISO reason, returned → returned. It
// keeps its own book of transfers by rail reference in Postgres, so it is
// idempotent by reference like every rail (app.Rail).
package bankfile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/iso20022"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// Name is the rail's name in payout histories.
const Name = "bank-file"

// Transfer states in payout.bank_transfers.
const (
	stateQueued   = "queued"   // waiting for the next cutoff
	stateBatched  = "batched"  // in a pain.001 sent to the bank
	stateAccepted = "accepted" // the bank accepted it (pain.002 ACCP, ACSP, ACSC …)
	stateBooked   = "booked"   // debited from the client account (camt.054 BOOK)
	stateRejected = "rejected" // refused (pain.002 RJCT), or refused by the rail itself
	stateReturned = "returned" // booked, then came back (camt.054 with RtrInf)
	// The bank has it, or may have it, under terms the rail cannot apply
	// (after a restore: at another amount, a copy refused as a duplicate,
	// in a batch lost with the disaster): never cut into a batch, until
	// finance resolves it (review.go) or the bank books, rejects or
	// returns it.
	stateReview = "review"
	// Taken out of the queue before any cut by finance's cancel of its
	// payout (postgres.Store.WithdrawQueued): never sent, never cut.
	stateCanceled = "canceled"
)

// Config is the bank-file rail's settings.
type Config struct {
	// Debtor is the client-money bank account payouts are debited from:
	// its holder's name, account (IBAN or domestic number) and bank (BIC or
	// domestic bank code).
	Debtor iso20022.Party
	// InitiatingParty is the name the bank knows the sender by (default:
	// the debtor's name).
	InitiatingParty string
	// CutoffHour, CutoffMinute in Location: the daily batch is built at
	// this time from every transfer queued before it.
	CutoffHour, CutoffMinute int
	Location                 *time.Location
	// Holidays are the bank's non-business days besides Saturdays and
	// Sundays (dates in Location's calendar): no batch asks the bank to
	// execute on one.
	Holidays []time.Time
	// OutboxDir receives each batch's file (the bank's SFTP client sends
	// it); "" : files are only served by the API.
	OutboxDir string
	// InboxDir is read for the bank's files (processed ones move to
	// InboxDir/processed, malformed ones to InboxDir/rejected); "" : upload only.
	InboxDir string
	// Tick is how often Run looks for a due cutoff, undelivered batches and
	// new inbox files (default 30 s).
	Tick time.Duration
}

// tickDefault: a cutoff is built within this long after it passes.
const tickDefault = 30 * time.Second

var cutoffRE = regexp.MustCompile(`^([01][0-9]|2[0-3]):([0-5][0-9])$`)

// ParseCutoff reads "HH:MM".
func ParseCutoff(s string) (hour, minute int, err error) {
	m := cutoffRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, 0, fmt.Errorf("bank cutoff %q: want HH:MM", s)
	}
	// Two digits each, by the pattern.
	return int(m[1][0]-'0')*10 + int(m[1][1]-'0'), int(m[2][0]-'0')*10 + int(m[2][1]-'0'), nil
}

// Check refuses a configuration that cannot build a valid file.
func (c Config) Check() error {
	var missing []string
	for _, f := range []struct{ name, v string }{{"debtor name", c.Debtor.Name}, {"debtor account", c.Debtor.Account}, {"debtor bank (BIC or bank code)", c.Debtor.Agent}} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("bank-file rail: %s required", strings.Join(missing, ", "))
	}
	if c.OutboxDir != "" && c.OutboxDir == c.InboxDir {
		return errors.New("bank-file rail: the outbox and inbox directories must differ")
	}
	return nil
}

// Rail is the bank-file rail.
type Rail struct {
	Pool   *pgxpool.Pool
	Clock  clock.Clock
	Cfg    Config
	Log    *slog.Logger
	Notify app.Notifier // told of every transfer an import moved; may be nil

	// transfersMax bounds the transfers of one file (0: batchTransfersMax;
	// tests set a few).
	transfersMax int
}

// Rail is app's bank-file rail: a payout rail and finance's batches and imports.
var (
	_ app.Rail      = (*Rail)(nil)
	_ app.BankFiles = (*Rail)(nil)
)

// Name implements app.Rail.
func (r *Rail) Name() string { return Name }

func (r *Rail) loc() *time.Location {
	if r.Cfg.Location != nil {
		return r.Cfg.Location
	}
	return time.UTC
}

// LastCutoff is the latest cutoff at or before t.
func (r *Rail) LastCutoff(t time.Time) time.Time {
	lt := t.In(r.loc())
	c := time.Date(lt.Year(), lt.Month(), lt.Day(), r.Cfg.CutoffHour, r.Cfg.CutoffMinute, 0, 0, r.loc())
	if c.After(lt) {
		c = c.AddDate(0, 0, -1)
	}
	return c
}

// executionDate is the date a batch cut at cutoff asks the bank to pay
// on: the cutoff's date in the rail's zone, or the first business day
// after it when that is a weekend day or a holiday (banks reject such a
// date or roll it, and providers were told their payout arrives on it).
func (r *Rail) executionDate(cutoff time.Time) time.Time {
	lt := cutoff.In(r.loc())
	return nextBusinessDay(time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, time.UTC), r.Cfg.Holidays)
}

// EndToEndID is the EndToEndId a rail reference travels under: the
// reference itself when it fits ISO's 35 characters, else the payout id
// compacted (its "po_" prefix and the UUID's hyphens dropped; an attempt
// suffix "-N" kept): po_0193…-2 → 0193…-2.
func EndToEndID(ref string) (string, error) {
	const idLenMax = 35
	if len(ref) <= idLenMax {
		return ref, nil
	}
	_, rest, ok := strings.Cut(ref, "_")
	if !ok {
		rest = ref
	}
	const uuidLen = 36
	if len(rest) < uuidLen {
		return "", fmt.Errorf("rail reference %s does not fit an EndToEndId", ref)
	}
	e2e := strings.ReplaceAll(rest[:uuidLen], "-", "") + rest[uuidLen:]
	if len(e2e) > idLenMax || e2e == "" {
		return "", fmt.Errorf("rail reference %s does not fit an EndToEndId", ref)
	}
	return e2e, nil
}

// refuse is a transfer this rail can never pay: kept rejected so a query
// answers the same definite failure.
func refuse(code, msg string) (string, string, string) { return stateRejected, code, msg }

// Submit implements app.Rail: the transfer is queued for the next cutoff
// (idempotent by reference: a second submission changes nothing and is
// counted). A transfer the rail cannot carry (not a bank account, a
// currency banks do not transfer) fails at once, definitely. A bank report
// imported before the transfer existed that names it (after a restore) is
// applied to it at once (readEarlierReports).
func (r *Rail) Submit(ctx context.Context, t app.Transfer) (app.RailStatus, error) {
	if t.Reference == "" || !t.Amount.IsPositive() {
		return app.RailStatus{}, fmt.Errorf("bank-file submit: reference and a positive amount required")
	}
	e2e, err := EndToEndID(t.Reference)
	if err != nil {
		return app.RailStatus{}, err
	}
	m := t.Method.Normalized()
	state, code, msg := stateQueued, "", ""
	cur, cerr := money.Lookup(t.Currency)
	switch {
	case m.Type != domain.MethodBank:
		state, code, msg = refuse(domain.FailUnsupported, "the bank-file rail pays bank accounts only, not "+m.Type)
	case cerr != nil || len(cur.Code) != 3 || cur.MinorUnits > 5:
		state, code, msg = refuse(domain.FailUnsupported, "currency "+t.Currency+" is not transferred by bank")
	case !cur.Round(t.Amount).Equal(t.Amount):
		state, code, msg = refuse(domain.FailInvalidAmount, "amount finer than the currency's minor unit")
	case !iso20022.AmountFits(t.Amount, cur.MinorUnits):
		// Queued, the cut would only leave it out (leaveOut), a day later:
		// refused here, at once, before any file.
		state, code, msg = refuse(domain.FailInvalidAmount, "amount over the 18 digits an ISO 20022 bank file carries")
	case m.AccountNumber == "" || m.BankCode == "" || strings.TrimSpace(m.AccountName) == "":
		state, code, msg = refuse(domain.FailInvalidAccount, "the bank account needs a holder name, number and bank code")
	}
	now := r.Clock.Now()
	var again []app.BankFileEntry
	var moved []string
	review := ""
	err = pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		if err := lockImports(ctx, tx); err != nil {
			return err
		}
		var submissions int
		if err := tx.QueryRow(ctx, `insert into payout.bank_transfers (reference, end_to_end_id, provider_id, currency, amount,
				creditor_name, creditor_account, creditor_agent, state, failure_code, failure_message, queued_at, updated_at)
			values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12)
			on conflict (reference) do update set submissions = payout.bank_transfers.submissions + 1
			returning submissions`,
			t.Reference, e2e, t.ProviderID, cur.Code, t.Amount, iso20022.ClipName(m.AccountName), m.AccountNumber, strings.ToUpper(m.BankCode),
			state, code, msg, now).Scan(&submissions); err != nil {
			return err
		}
		var err error
		if again, moved, err = r.readEarlierReports(ctx, tx, e2e); err != nil {
			return err
		}
		if submissions > 1 { // queued before: a lost batch's report found it then, if held
			return nil
		}
		review, err = r.reviewIfLostBatch(ctx, tx, t.Reference)
		return err
	})
	if err != nil {
		return app.RailStatus{}, fmt.Errorf("bank-file submit %s: %w", t.Reference, err)
	}
	r.reportReadAgain(again, moved)
	if review != "" {
		r.Log.Warn("bank transfer held for finance's review as it is queued", "reference", t.Reference, "end_to_end_id", e2e, "why", review)
	}
	return r.Query(ctx, t.Reference)
}

// Query implements app.Rail.
func (r *Rail) Query(ctx context.Context, ref string) (app.RailStatus, error) {
	var state, code, msg, ccy, held string
	var queued time.Time
	var exec *time.Time
	var paid *decimal.Decimal
	// The amount the bank paid is known only from finance's resolution of a
	// transfer in review (its reports' amounts are checked at import): at
	// another amount than the transfer's, its payout is not taken as paid
	// at its net (app's railAmountMismatch). A queued transfer waits for the
	// first cutoff after the later of its queuing and its provider's last
	// release, and for none while its provider is held (the cut leaves it
	// out): a held transfer read the cutoff after its queuing, passed days
	// before the release. So does one whose provider's KYC finance
	// rejected (domain.KYCRejectedHeld).
	err := r.Pool.QueryRow(ctx, `select t.state, t.failure_code, t.failure_message, greatest(t.queued_at, t.hold_released_at),
			b.execution_date, t.currency, v.paid_amount, coalesce(h.reason, case when k.provider_id is not null then $2 end, '')
		from payout.bank_transfers t left join payout.bank_batches b using (batch_id)
		left join lateral (select paid_amount from payout.bank_transfer_reviews v
			where v.reference = t.reference and v.resolution = 'paid' order by v.review_id desc limit 1) v on true
		left join payout.holds h on h.provider_id = t.provider_id and t.state = 'queued'
		left join payout.kyc k on k.provider_id = t.provider_id and k.status = 'rejected' and t.state = 'queued'
		where t.reference = $1`, ref, domain.KYCRejectedHeld).Scan(&state, &code, &msg, &queued, &exec, &ccy, &paid, &held)
	if errors.Is(err, pgx.ErrNoRows) {
		return app.RailStatus{}, fmt.Errorf("bank-file %s: %w", ref, app.ErrUnknownReference)
	}
	if err != nil {
		return app.RailStatus{}, fmt.Errorf("bank-file query %s: %w", ref, err)
	}
	st := app.RailStatus{Rail: Name, Reference: ref, FailureCode: code, Message: msg}
	switch state {
	case stateQueued:
		st.State, st.Held = app.RailAccepted, held
		if held == "" {
			st.ExpectedArrival = r.executionDate(r.LastCutoff(queued).AddDate(0, 0, 1))
		}
	case stateBatched, stateReview:
		st.State = app.RailAccepted
	case stateAccepted:
		st.State = app.RailInTransit
	case stateBooked:
		st.State = app.RailPaid
	case stateRejected:
		st.State = app.RailFailed
	case stateReturned:
		st.State = app.RailReturned
	case stateCanceled:
		st.State = app.RailCanceled
	default:
		return app.RailStatus{}, fmt.Errorf("bank-file %s: unknown state %q", ref, state)
	}
	if exec != nil {
		st.ExpectedArrival = *exec
	}
	if paid != nil {
		st.Currency, st.Amount = ccy, *paid
	}
	return st, nil
}

// Submissions counts the submissions of a reference (tests: exactly one).
func (r *Rail) Submissions(ctx context.Context, ref string) (int, error) {
	var n int
	err := r.Pool.QueryRow(ctx, `select coalesce((select submissions from payout.bank_transfers where reference = $1), 0)`, ref).Scan(&n)
	return n, err
}

// amountEqual compares a bank's amount with a transfer's.
func amountEqual(a decimal.Decimal, ccyA string, b decimal.Decimal, ccyB string) bool {
	return strings.EqualFold(ccyA, ccyB) && a.Equal(b)
}
