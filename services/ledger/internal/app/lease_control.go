package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Lease control defaults.
const (
	// BurnWindow is how far back the burn rate looks: usage charged over the
	// last hour is the rate per hour.
	BurnWindow = time.Hour
	// RunwayWarnDefault is the runway under which a renter is warned
	// (GPUBILL_RUNWAY_WARN).
	RunwayWarnDefault = 2 * time.Hour
)

// LeaseControlConsumer records ledger.posted.renter message ids in the
// ledger's inbox (the durable consumer's name).
const LeaseControlConsumer = "ledger-lease-control"

// LeaseControlStore runs lease control's work in one transaction
// (adapters/postgres.LeaseStore).
type LeaseControlStore interface {
	WithLeaseTx(ctx context.Context, fn func(LeaseControlTx) error) error
}

// LeaseControlTx is lease control's work inside the transaction that also
// records the messages that prompted it.
type LeaseControlTx interface {
	// Claim records inbound message ids of consumer in the inbox and
	// returns those not seen before.
	Claim(ctx context.Context, consumer string, ids []string) (map[string]bool, error)
	// LoadWallets locks the wallets' lease control records and reads them
	// with their balance, credit limit and, where domain.BurnMatters, the
	// usage charged since burnSince (else zero).
	LoadWallets(ctx context.Context, keys []domain.WalletKey, burnSince, at time.Time) ([]domain.WalletStatus, error)
	// SaveLeases records the wallets' new lease control records.
	SaveLeases(ctx context.Context, ss []LeaseSave, at time.Time) error
	// Announce publishes the events and queues their webhooks.
	Announce(ctx context.Context, evs []domain.LeaseEvent) error
	// Resumable lists up to limit stopped wallets NextLease would resume
	// (money to spend again, or billed in another currency), oldest stop
	// first.
	Resumable(ctx context.Context, limit int) ([]domain.WalletKey, error)
	// Exhausted lists up to limit wallets charged since chargedSince that
	// NextLease would stop and lease control has not (nothing left to
	// spend, not stopped, or never evaluated).
	Exhausted(ctx context.Context, chargedSince time.Time, limit int) ([]domain.WalletKey, error)
}

// LeaseWebhookQueue is the queue of lease control announcements for the
// marketplace scheduler's webhook (adapters/postgres.LeaseWebhooks).
type LeaseWebhookQueue interface {
	// Claim takes up to limit due deliveries, oldest first, at most one per
	// renter, and leases them until now+lease.
	Claim(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]domain.LeaseWebhook, error)
	// Finish records one attempt of a claimed delivery: delivered, retry
	// at next, or given up (failed); nothing once its claim has lapsed and
	// another has claimed it.
	Finish(ctx context.Context, d domain.LeaseWebhook, status string, code int, errText string, next, at time.Time) error
}

// LeaseSave is a wallet's new lease control record.
type LeaseSave struct {
	Key   domain.WalletKey
	Lease domain.Lease
}

// WalletReader reads a renter's wallets (every currency it holds or is
// billed in; none when the ledger knows neither).
type WalletReader interface {
	Wallet(ctx context.Context, renter string, burnSince time.Time) ([]domain.WalletStatus, error)
}

// LeaseControl acts on a renter's wallet as it moves: a runway under Warn
// warns, nothing left to spend (minus the credit limit reached) asks the
// marketplace to stop the renter's GPUs, and money again lets them resume.
type LeaseControl struct {
	Clock   clock.Clock
	Warn    time.Duration
	Log     *slog.Logger
	Wallets WalletReader
	Store   LeaseControlStore
	// Epoch is the ledger schema's restore epoch, in every event's id.
	Epoch string
}

// WalletsMoved is one ledger.posted.renter message as the port read it:
// the renter wallets its transactions moved.
type WalletsMoved struct {
	ID      string
	Wallets []domain.WalletKey
}

// EvaluateMoved evaluates lease control, in one transaction that claims
// the messages' ids, for the wallets the fresh messages moved (a message
// seen before, or twice in one fetch, counts once; each wallet once, in
// the order first named).
func (lc *LeaseControl) EvaluateMoved(ctx context.Context, msgs []WalletsMoved) error {
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return lc.Store.WithLeaseTx(ctx, func(tx LeaseControlTx) error {
		fresh, err := tx.Claim(ctx, LeaseControlConsumer, ids)
		if err != nil {
			return err
		}
		seen := map[domain.WalletKey]bool{}
		var keys []domain.WalletKey
		for _, m := range msgs {
			if !fresh[m.ID] {
				continue
			}
			delete(fresh, m.ID)
			for _, k := range m.Wallets {
				if !seen[k] {
					seen[k] = true
					keys = append(keys, k)
				}
			}
		}
		return lc.Evaluate(ctx, tx, keys)
	})
}

// SweepMax bounds the wallets of each kind one sweep evaluates again: a
// sweep that finds more leaves the rest to the next (those it evaluated no
// longer qualify).
const SweepMax = 1000

// SweepLookback is how far back the sweep looks for charged wallets: ten
// sweeps, so a charge is still found after a few failed or delayed ones
// (wallet_burn keeps two hours); each charged wallet costs the sweep
// three key lookups, so not the whole burn window.
const SweepLookback = 10 * time.Minute

// Sweep evaluates lease control again for the wallets a lost message left
// where they were. A stop is lifted, and asked, by the write that moves
// the wallet, through its ledger.posted.renter message; one the LEDGER
// stream discarded before lease control read it (a limits stream at its
// cap, the consumer behind) moved nothing: a stopped renter topped up
// stayed stopped with money to spend (it makes no other write), and a
// renter charged past its limit kept its GPUs until its next charge (none
// while a lease runs when usage is reported at its end). The sweep selects
// only wallets whose evaluation changes their state, by the evaluation's
// own rule: stopped ones with money to spend, and ones charged in the last
// SweepLookback with nothing left to spend that are not stopped. A warning
// follows the charges that move a wallet; a debit other than a charge (a
// manual transfer, a reversal) past the limit waits for the next charge.
func (lc *LeaseControl) Sweep(ctx context.Context) error {
	return lc.Store.WithLeaseTx(ctx, func(tx LeaseControlTx) error {
		resume, err := tx.Resumable(ctx, SweepMax)
		if err != nil {
			return err
		}
		stop, err := tx.Exhausted(ctx, lc.Clock.Now().UTC().Add(-SweepLookback), SweepMax)
		if err != nil {
			return err
		}
		return lc.Evaluate(ctx, tx, append(resume, stop...))
	})
}

// Evaluate moves lease control for the wallets named (those a ledger write
// just touched) and announces each crossing once.
func (lc *LeaseControl) Evaluate(ctx context.Context, tx LeaseControlTx, keys []domain.WalletKey) error {
	if len(keys) == 0 {
		return nil
	}
	now := lc.Clock.Now().UTC()
	ws, err := tx.LoadWallets(ctx, keys, now.Add(-BurnWindow), now)
	if err != nil {
		return err
	}
	var saves []LeaseSave
	var announced []domain.LeaseEvent
	for _, w := range ws {
		next, evs := domain.NextLease(w.Lease, w.Wallet, lc.warn(), now)
		if next == w.Lease {
			continue
		}
		for i := range evs {
			evs[i].Epoch = lc.Epoch
		}
		saves = append(saves, LeaseSave{Key: domain.WalletKey{RenterID: w.RenterID, Currency: w.Currency}, Lease: next})
		announced = append(announced, evs...)
	}
	if err := tx.SaveLeases(ctx, saves, now); err != nil {
		return err
	}
	if err := tx.Announce(ctx, announced); err != nil {
		return err
	}
	for _, ev := range announced {
		w := ev.Wallet
		verb := leaseVerb[ev.Kind]
		if w.Closed && ev.Kind == domain.EventStopRequested {
			verb = "renter's GPUs asked to stop, renter closed"
		}
		lc.Log.Info("lease control: "+verb, "renter", w.RenterID, "currency", w.Currency,
			"balance", w.Balance.String(), "credit_limit", w.CreditLimit.String(), "burn_per_hour", w.BurnPerHour.String(),
			"runway_hours", w.RunwayString(), "closed", w.Closed, "event_id", ev.ID())
	}
	return nil
}

var leaseVerb = map[domain.LeaseEventKind]string{
	domain.EventRunwayLow:     "renter warned, runway low",
	domain.EventStopRequested: "renter's GPUs asked to stop, wallet at its credit limit",
	domain.EventResumeAllowed: "renter may resume, wallet topped up",
}

func (lc *LeaseControl) warn() time.Duration {
	if lc.Warn > 0 {
		return lc.Warn
	}
	return RunwayWarnDefault
}

// Wallet returns a renter's wallets, as of now.
func (lc *LeaseControl) Wallet(ctx context.Context, renter string) ([]domain.WalletStatus, time.Time, error) {
	now := lc.Clock.Now().UTC()
	if err := ids.CheckPartyID(renter); err != nil { // a 400 naming the field, not "no wallet yet"
		return nil, now, apperr.Invalid("renter_id", "%v", err)
	}
	ws, err := lc.Wallets.Wallet(ctx, renter, now.Add(-BurnWindow))
	if err != nil {
		return nil, now, err
	}
	if len(ws) == 0 {
		return nil, now, fmt.Errorf("renter %q has no wallet yet (no deposit, charge or renter record): %w", renter, apperr.ErrNotFound)
	}
	return ws, now, nil
}
