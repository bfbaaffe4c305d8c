package app

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/pg"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/adapters/postgres"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// ChargesConsumer is the durable consumer name, also the inbox's consumer.
const ChargesConsumer = "ledger-charges"

// cycleRedirectMax bounds the walk to the earliest open cycle.
const cycleRedirectMax = 1000

// Message is one inbound JetStream message: its Nats-Msg-Id and payload.
type Message struct {
	ID      string
	Payload []byte
}

// PostCharges posts a whole fetched batch of charges.rated messages in ONE
// Postgres transaction: the message ids are claimed in the inbox with the
// effect (a redelivered message changes nothing), each charge with an amount
// becomes a transaction keyed by its charge id (Dr renter wallet, Cr provider
// pending of its cycle, or of the earliest open cycle if that one is closed),
// and the balances move by one upsert. It returns the number of
// transactions posted.
func (a *App) PostCharges(ctx context.Context, msgs []Message) (int, error) {
	idsIn := make([]string, len(msgs))
	for i, m := range msgs {
		idsIn[i] = m.ID
	}
	sort.Strings(idsIn)
	var changes []postgres.BalanceChange
	var postedTxs []*domain.Transaction // for the metrics, once committed
	posted := 0
	err := pg.InTx(ctx, a.Pool, func(tx pgx.Tx) error {
		fresh, err := outbox.Claim(ctx, tx, postgres.Schema, ChargesConsumer, idsIn)
		if err != nil {
			return err
		}
		now := a.now()
		type pending struct {
			t     *domain.Transaction
			cycle string
		}
		var ps []pending
		wanted := map[string]bool{}
		// A message that cannot be decoded, or holds a charge that cannot
		// be posted, is poison: the whole transaction rolls back, the
		// consumer dead-letters it and posts the rest again.
		var poison natsx.PoisonError
		for _, m := range msgs {
			if !fresh[m.ID] {
				continue
			}
			delete(fresh, m.ID) // the same id twice in one fetch counts once
			var b eventsv1.ChargesRatedBatch
			if err := proto.Unmarshal(m.Payload, &b); err != nil {
				poison.Add(m.ID, fmt.Errorf("undecodable charges batch: %w", err))
				continue
			}
			for _, c := range b.Charges {
				t, cycle, err := a.chargeTransaction(c, now)
				if err != nil {
					poison.Add(m.ID, fmt.Errorf("charge %q: %w", c.GetChargeId(), err))
					break
				}
				if t == nil {
					continue // zero amount: nothing to post
				}
				ps = append(ps, pending{t, cycle})
				wanted[cycle] = true
			}
		}
		if len(poison.ByID) > 0 {
			return &poison
		}
		txs := make([]*domain.Transaction, 0, len(ps))
		if len(ps) == 0 {
			return nil
		}
		target, err := a.resolveCycles(ctx, tx, wanted)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if to := target[p.cycle]; to != p.cycle {
				acc, err := domain.ParseAddress(domain.ProviderPendingAddr(p.t.Postings[1].Account.Party, to))
				if err != nil {
					return err
				}
				p.t.Postings[1].Account = acc
				p.t.Metadata["requested_cycle"] = p.cycle
			}
			txs = append(txs, p.t)
		}
		freshTxs, ch, err := a.Store.Post(ctx, tx, txs, func(fresh []*domain.Transaction) error {
			return outbox.Add(ctx, tx, postgres.Schema, postedEvents(fresh)...)
		})
		if err != nil {
			return err
		}
		changes, posted, postedTxs = ch, len(freshTxs), freshTxs
		return outbox.Add(ctx, tx, postgres.Schema, depletionEvents(freshTxs, ch, now)...)
	})
	if err != nil {
		return 0, err
	}
	a.Store.Remember(changes)
	countCharges(postedTxs)
	return posted, nil
}

// chargeTransaction turns a rated charge into its ledger transaction (nil for
// a zero amount) and the cycle it asks for.
func (a *App) chargeTransaction(c *eventsv1.RatedCharge, now time.Time) (*domain.Transaction, string, error) {
	if c.GetChargeId() == "" {
		return nil, "", fmt.Errorf("charge without id")
	}
	cur, err := money.Lookup(c.GetCurrency())
	if err != nil {
		return nil, "", err
	}
	amt, err := cur.Parse(c.GetAmount())
	if err != nil {
		return nil, "", err
	}
	if amt.IsZero() {
		return nil, "", nil
	}
	if amt.IsNegative() {
		return nil, "", fmt.Errorf("negative amount %s", c.GetAmount())
	}
	eff := now
	if c.GetEffectiveAt() != nil {
		eff = c.GetEffectiveAt().AsTime().UTC().Truncate(time.Microsecond)
	}
	cycle := c.GetCycleId()
	if _, err := a.Calendar.Parse(cycle); err != nil {
		cycle = a.Calendar.ForUsageEnd(eff).ID
	}
	wallet, err := domain.ParseAddress(domain.RenterWallet(c.GetRenterId()))
	if err != nil {
		return nil, "", err
	}
	pendingAcc, err := domain.ParseAddress(domain.ProviderPendingAddr(c.GetProviderId(), cycle))
	if err != nil {
		return nil, "", err
	}
	return &domain.Transaction{
		ID: ids.New(""), IdempotencyKey: c.GetChargeId(), Kind: domain.TxCharge,
		EffectiveAt: eff, CreatedAt: now, Metadata: chargeMetadata(c),
		Postings: []domain.Posting{
			{Account: wallet, Direction: domain.Debit, Amount: amt, Currency: cur.Code},
			{Account: pendingAcc, Direction: domain.Credit, Amount: amt, Currency: cur.Code},
		},
		RequestHash: chargeRequestHash(c.GetRenterId(), c.GetProviderId(), cycle, cur.Code, amt.String()),
	}, cycle, nil
}

// chargeMetadata keeps what a provider statement needs to explain a charge
// (lease, renter, GPU model, GPU-hours) on its ledger transaction.
func chargeMetadata(c *eventsv1.RatedCharge) map[string]string {
	md := map[string]string{"kind": "usage_charge", "lease_id": c.GetLeaseId(), "renter_id": c.GetRenterId(), "charge_id": c.GetChargeId()}
	hours := decimal.Zero
	var models []string
	for _, l := range c.GetLines() {
		if l.GetKind() != "" && l.GetKind() != "usage" {
			continue
		}
		if h, err := money.ParseDecimal(l.GetGpuHours()); err == nil {
			hours = hours.Add(h)
		}
		if m := l.GetGpuModel(); m != "" && !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	if len(models) > 0 {
		md["gpu_model"] = strings.Join(models, ",")
	}
	if hours.IsPositive() {
		md["gpu_hours"] = hours.String()
	}
	return md
}

// chargeFields are a charge's request-hash fields in key order: encoding/json
// writes this struct exactly as it writes the map domain.RequestHash takes
// (sorted keys), without the reflection over a map per charge.
type chargeFields struct {
	Amount     string `json:"amount"`
	Currency   string `json:"currency"`
	CycleID    string `json:"cycle_id"`
	ProviderID string `json:"provider_id"`
	RenterID   string `json:"renter_id"`
}

// chargeRequestHash equals domain.RequestHash("charge", the same fields as a map).
func chargeRequestHash(renter, provider, cycle, currency, amount string) [32]byte {
	b, _ := json.Marshal(struct {
		Kind   string       `json:"kind"`
		Fields chargeFields `json:"fields"`
	}{"charge", chargeFields{Amount: amount, Currency: currency, CycleID: cycle, ProviderID: provider, RenterID: renter}})
	return sha256.Sum256(b)
}

// resolveCycles maps each wanted cycle to itself or, if it is closed, to the
// earliest open cycle after it. It holds a shared lock on every cycle it
// posts to until the transaction ends, so a concurrent close (exclusive)
// waits for this batch, and a batch after the close sees it and redirects.
func (a *App) resolveCycles(ctx context.Context, tx pgx.Tx, wanted map[string]bool) (map[string]string, error) {
	locked := map[string]bool{}
	for {
		var need []string
		for c := range wanted {
			if !locked[c] {
				need = append(need, c)
			}
		}
		if err := lockCyclesShared(ctx, tx, need); err != nil {
			return nil, err
		}
		for _, c := range need {
			locked[c] = true
		}
		closed, err := closedCycles(ctx, tx)
		if err != nil {
			return nil, err
		}
		target := map[string]string{}
		var more []string
		for c := range wanted {
			t := c
			for i := 0; closed[t] && i < cycleRedirectMax; i++ {
				cy, err := a.Calendar.Parse(t)
				if err != nil {
					return nil, err
				}
				t = a.Calendar.Next(cy).ID
			}
			target[c] = t
			if !locked[t] {
				more = append(more, t)
			}
		}
		if len(more) == 0 {
			return target, nil
		}
		for _, t := range more {
			wanted[t] = true
		}
	}
}

func cycleLockKey(cycle string) string { return "gpubill.ledger.cycle." + cycle }

func lockCyclesShared(ctx context.Context, tx pgx.Tx, cyclesIn []string) error {
	if len(cyclesIn) == 0 {
		return nil
	}
	sort.Strings(cyclesIn)
	keys := make([]string, len(cyclesIn))
	for i, c := range cyclesIn {
		keys[i] = cycleLockKey(c)
	}
	_, err := tx.Exec(ctx, `select count(pg_advisory_xact_lock_shared(hashtext(k)))
		from (select k from unnest($1::text[]) as k order by k) s`, keys)
	if err != nil {
		return fmt.Errorf("lock cycles: %w", err)
	}
	return nil
}

func closedCycles(ctx context.Context, q postgres.Querier) (map[string]bool, error) {
	rows, err := q.Query(ctx, `select cycle_id from ledger.closed_cycles`)
	if err != nil {
		return nil, fmt.Errorf("closed cycles: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}
