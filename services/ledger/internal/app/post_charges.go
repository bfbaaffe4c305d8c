package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/apperr"
	"github.com/gpubill/gpubill/pkg/ids"
	"github.com/gpubill/gpubill/pkg/jsonplain"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// ChargesConsumer is the durable consumer name, also the inbox's consumer.
const ChargesConsumer = "ledger-charges"

// cycleRedirectMax bounds the walk to the earliest open cycle.
const cycleRedirectMax = 1000

// ChargeMessage is one charges.rated message as the port decoded it: its
// Nats-Msg-Id and charges, or why it could not be decoded.
type ChargeMessage struct {
	ID      string
	Charges []RatedCharge
	Err     error // undecodable: poison if the message is fresh
}

// RatedCharge is one charge pricing rated.
type RatedCharge struct {
	ChargeID, LeaseID, RenterID, ProviderID, CycleID string
	Currency, Amount                                 string
	EffectiveAt                                      time.Time // zero: when posted
	Lines                                            []ChargeLine
}

// ChargeLine is the part of a rated line a provider statement explains.
type ChargeLine struct {
	Kind, GPUModel, GPUHours string
}

// PostCharges posts a whole fetched batch of charges.rated messages in ONE
// database transaction: the message ids are claimed in the inbox with the
// effect (a redelivered message changes nothing), each charge with an amount
// becomes a transaction keyed by its charge id (Dr renter wallet, Cr provider
// pending of its cycle, or of the earliest open cycle if that one is closed),
// and the balances move by one upsert. A charge billed at 0.00 is recorded
// beside the journal (Tx.RecordUnbilled) for its GPU-hours. It returns the
// number of transactions posted.
func (a *App) PostCharges(ctx context.Context, msgs []ChargeMessage) (int, error) {
	idsIn := make([]string, len(msgs))
	for i, m := range msgs {
		idsIn[i] = m.ID
	}
	sort.Strings(idsIn)
	var changes []domain.BalanceChange
	var posted []*domain.Transaction // for the metrics, once committed
	err := a.Store.WithTx(ctx, func(tx Tx) error {
		fresh, err := tx.Claim(ctx, ChargesConsumer, idsIn)
		if err != nil {
			return err
		}
		now := a.now()
		ps, wanted, err := a.chargeTransactions(msgs, fresh, now)
		if err != nil || len(ps) == 0 {
			return err
		}
		txs, err := a.redirectClosedCycles(ctx, tx, ps, wanted)
		if err != nil {
			return err
		}
		ps, txs, unbilled := splitUnbilled(ps, txs, now)
		if err := tx.RecordUnbilled(ctx, unbilled); err != nil {
			return err
		}
		if len(txs) == 0 {
			return nil
		}
		p, ch, err := tx.Post(ctx, txs)
		if err != nil {
			return err
		}
		if len(p) < len(txs) {
			if err := repeatedCharges(ctx, tx, ps, p); err != nil {
				return err
			}
		}
		changes, posted = ch, p
		return tx.PublishDepletions(ctx, domain.Depletions(p, ch, now))
	})
	if err != nil {
		return 0, err
	}
	a.Store.Remember(changes)
	countCharges(posted)
	return len(posted), nil
}

// UnpostableError names, by message id, the messages of a batch that can
// never be posted, with why (the consumer dead-letters them).
type UnpostableError struct {
	ByID map[string]error
}

// Add names one more message.
func (e *UnpostableError) Add(id string, cause error) {
	if e.ByID == nil {
		e.ByID = map[string]error{}
	}
	e.ByID[id] = cause
}

func (e *UnpostableError) Error() string {
	for id, err := range e.ByID {
		if len(e.ByID) == 1 {
			return fmt.Sprintf("message %s cannot be posted: %v", id, err)
		}
		return fmt.Sprintf("%d messages cannot be posted, e.g. %s: %v", len(e.ByID), id, err)
	}
	return "unpostable batch"
}

// pendingCharge is a charge's transaction, the cycle it asks for and the
// message that carried it.
type pendingCharge struct {
	t          *domain.Transaction
	cycle, msg string
}

// repeatedCharges checks the charges Post skipped, their charge id (the
// idempotency key) already posted: each must be the charge posted (its
// request hash: renter, provider, cycle asked for, currency, amount), or
// its message can never be posted (a charge id repeated with other
// content would otherwise be dropped unseen).
func repeatedCharges(ctx context.Context, tx Tx, ps []pendingCharge, posted []*domain.Transaction) error {
	fresh := make(map[*domain.Transaction]bool, len(posted))
	for _, t := range posted {
		fresh[t] = true
	}
	var keys []string
	for _, p := range ps {
		if !fresh[p.t] {
			keys = append(keys, p.t.IdempotencyKey)
		}
	}
	have, err := tx.RequestHashes(ctx, keys)
	if err != nil {
		return err
	}
	var poison UnpostableError
	for _, p := range ps {
		if fresh[p.t] {
			continue
		}
		h, ok := have[p.t.IdempotencyKey]
		if !ok {
			return fmt.Errorf("charge %q was skipped as posted, but no transaction has its key", p.t.IdempotencyKey)
		}
		if !bytes.Equal(h, p.t.RequestHash[:]) {
			poison.Add(p.msg, fmt.Errorf("charge %q was posted before with other content (renter, provider, cycle, currency or amount): %w",
				p.t.IdempotencyKey, apperr.ErrConflict))
		}
	}
	if len(poison.ByID) > 0 {
		return &poison
	}
	return nil
}

// chargeTransactions turns the charges of the fresh messages into
// transactions, and names the cycles they ask for. A message that could not
// be decoded, or holds a charge that cannot be posted, is poison: the whole
// database transaction rolls back, the consumer dead-letters it and posts
// the rest again.
func (a *App) chargeTransactions(msgs []ChargeMessage, fresh map[string]bool, now time.Time) ([]pendingCharge, map[string]bool, error) {
	var ps []pendingCharge
	wanted := map[string]bool{}
	var poison UnpostableError
	parts := newChargeParts()
	for mi := range msgs {
		m := &msgs[mi]
		if !fresh[m.ID] {
			continue
		}
		delete(fresh, m.ID) // the same id twice in one fetch counts once
		if m.Err != nil {
			poison.Add(m.ID, fmt.Errorf("undecodable charges batch: %w", m.Err))
			continue
		}
		for ci := range m.Charges {
			c := &m.Charges[ci]
			t, cycle, err := a.chargeTransaction(c, now, parts)
			if err != nil {
				poison.Add(m.ID, fmt.Errorf("charge %q: %w", c.ChargeID, err))
				break
			}
			ps = append(ps, pendingCharge{t: t, cycle: cycle, msg: m.ID})
			wanted[cycle] = true
		}
	}
	if len(poison.ByID) > 0 {
		return nil, nil, &poison
	}
	return ps, wanted, nil
}

// redirectClosedCycles credits each charge for a closed cycle to the
// earliest open cycle after it instead, noting the cycle it asked for.
func (a *App) redirectClosedCycles(ctx context.Context, tx Tx, ps []pendingCharge, wanted map[string]bool) ([]*domain.Transaction, error) {
	target, err := a.resolveCycles(ctx, tx, wanted)
	if err != nil {
		return nil, err
	}
	txs := make([]*domain.Transaction, 0, len(ps))
	for _, p := range ps {
		if to := target[p.cycle]; to != p.cycle {
			acc, err := domain.ParseAddress(domain.ProviderPendingAddr(p.t.Postings[1].Account.Party, to))
			if err != nil {
				return nil, err
			}
			p.t.Postings[1].Account = acc
			p.t.Metadata["requested_cycle"] = p.cycle
		}
		txs = append(txs, p.t)
	}
	return txs, nil
}

// splitUnbilled takes the charges billed at 0.00 out of ps and their
// transactions txs (ps's, in order): they move no money, so they are no
// transactions of the journal, but pricing rounds a lease's charges
// cumulatively, so many a small event's charge is 0.00, and its GPU-hours
// were on neither the renter's invoice nor the provider's statement (the
// invoice put its share of the money in a rounding line). They are kept,
// with the metadata a posted charge carries, where both read them.
// Pricing could instead fold them into the lease's next billed charge, but
// the usage after a lease's last billed charge would then wait, maybe for
// ever (a lease at a price of 0 is never billed).
func splitUnbilled(ps []pendingCharge, txs []*domain.Transaction, now time.Time) ([]pendingCharge, []*domain.Transaction, []domain.UnbilledCharge) {
	var unbilled []domain.UnbilledCharge
	keptP, keptT := ps[:0], txs[:0]
	for i, t := range txs {
		if !t.Postings[0].Amount.IsZero() {
			keptP, keptT = append(keptP, ps[i]), append(keptT, t)
			continue
		}
		unbilled = append(unbilled, domain.UnbilledCharge{ChargeID: t.IdempotencyKey, RenterID: t.Metadata["renter_id"],
			Currency: t.Postings[0].Currency, Account: t.Postings[1].Account.Address, Metadata: t.Metadata, CreatedAt: now})
	}
	return keptP, keptT, unbilled
}

// chargeParts holds, for one fetched batch, what its charges repeat: the
// renters' wallets, the providers' pending accounts of a cycle and the
// cycle ids found valid, each built and checked once.
type chargeParts struct {
	wallets map[string]domain.Account    // by renter id
	pending map[[2]string]domain.Account // by provider id and cycle
	cycles  map[string]bool              // cycle ids the calendar parses
}

func newChargeParts() *chargeParts {
	return &chargeParts{wallets: map[string]domain.Account{}, pending: map[[2]string]domain.Account{}, cycles: map[string]bool{}}
}

// wallet is renter's wallet account.
func (cp *chargeParts) wallet(renter string) (domain.Account, error) {
	if acc, ok := cp.wallets[renter]; ok {
		return acc, nil
	}
	acc, err := domain.ParseAddress(domain.RenterWallet(renter))
	if err == nil {
		cp.wallets[renter] = acc
	}
	return acc, err
}

// pendingAccount is provider's pending account of cycle.
func (cp *chargeParts) pendingAccount(provider, cycle string) (domain.Account, error) {
	k := [2]string{provider, cycle}
	if acc, ok := cp.pending[k]; ok {
		return acc, nil
	}
	acc, err := domain.ParseAddress(domain.ProviderPendingAddr(provider, cycle))
	if err == nil {
		cp.pending[k] = acc
	}
	return acc, err
}

// chargeTransaction turns a rated charge into its ledger transaction and the
// cycle it asks for. One of a zero amount is never posted (splitUnbilled),
// but is made all the same: its cycle is locked and redirected as a posted
// charge's, so a statement of a cycle closing meanwhile misses none of its
// hours.
func (a *App) chargeTransaction(c *RatedCharge, now time.Time, parts *chargeParts) (*domain.Transaction, string, error) {
	if c.ChargeID == "" {
		return nil, "", fmt.Errorf("charge without id")
	}
	cur, err := money.Lookup(c.Currency)
	if err != nil {
		return nil, "", err
	}
	amt, err := cur.Parse(c.Amount)
	if err != nil {
		return nil, "", err
	}
	if amt.IsNegative() {
		return nil, "", fmt.Errorf("negative amount %s", c.Amount)
	}
	eff := now
	if !c.EffectiveAt.IsZero() {
		eff = c.EffectiveAt.UTC().Truncate(time.Microsecond)
	}
	cycle := c.CycleID
	if !parts.cycles[cycle] {
		if _, err := a.Calendar.Parse(cycle); err != nil {
			cycle = a.Calendar.ForUsageEnd(eff).ID
		} else {
			parts.cycles[cycle] = true
		}
	}
	wallet, err := parts.wallet(c.RenterID)
	if err != nil {
		return nil, "", err
	}
	pendingAcc, err := parts.pendingAccount(c.ProviderID, cycle)
	if err != nil {
		return nil, "", err
	}
	hash, err := chargeRequestHash(c.RenterID, c.ProviderID, cycle, cur.Code, money.DecimalString(amt))
	if err != nil {
		return nil, "", err
	}
	md, err := chargeMetadata(c)
	if err != nil {
		return nil, "", err
	}
	return &domain.Transaction{
		ID: ids.New(""), IdempotencyKey: c.ChargeID, Kind: domain.TxCharge,
		EffectiveAt: eff, CreatedAt: now, Metadata: md,
		Postings: []domain.Posting{
			{Account: wallet, Direction: domain.Debit, Amount: amt, Currency: cur.Code},
			{Account: pendingAcc, Direction: domain.Credit, Amount: amt, Currency: cur.Code},
		},
		RequestHash: hash,
	}, cycle, nil
}

// chargeMetadata keeps what a provider statement needs to explain a charge
// (lease, renter, GPU model, GPU-hours) on its ledger transaction. A usage
// line's GPU-hours, when given, must be a decimal of at least 0: dropping
// one unread would leave the statement short of hours without a word.
func chargeMetadata(c *RatedCharge) (map[string]string, error) {
	md := map[string]string{"kind": "usage_charge", "lease_id": c.LeaseID, "renter_id": c.RenterID, "charge_id": c.ChargeID}
	hours := decimal.Zero
	var models []string
	for i := range c.Lines {
		l := &c.Lines[i]
		if l.Kind != "" && l.Kind != "usage" {
			continue
		}
		if l.GPUHours != "" {
			h, err := money.ParseDecimal(l.GPUHours)
			if err != nil || h.IsNegative() {
				return nil, fmt.Errorf("line %d: gpu_hours %q is not a decimal of at least 0", i, l.GPUHours)
			}
			hours = hours.Add(h)
		}
		if m := l.GPUModel; m != "" && !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	if len(models) > 0 {
		md["gpu_model"] = strings.Join(models, ",")
	}
	if hours.IsPositive() {
		md["gpu_hours"] = hours.String()
	}
	return md, nil
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
// Fields encoding/json writes as themselves (jsonplain.Plain: every id the
// grammar allows, amounts, currency codes) are appended by hand.
func chargeRequestHash(renter, provider, cycle, currency, amount string) ([32]byte, error) {
	if jsonplain.Plain(renter) && jsonplain.Plain(provider) && jsonplain.Plain(cycle) && jsonplain.Plain(currency) && jsonplain.Plain(amount) {
		var buf [256]byte
		b := append(buf[:0], `{"kind":"charge","fields":{"amount":"`...)
		b = append(b, amount...)
		b = append(b, `","currency":"`...)
		b = append(b, currency...)
		b = append(b, `","cycle_id":"`...)
		b = append(b, cycle...)
		b = append(b, `","provider_id":"`...)
		b = append(b, provider...)
		b = append(b, `","renter_id":"`...)
		b = append(b, renter...)
		b = append(b, `"}}`...)
		return sha256.Sum256(b), nil
	}
	b, err := json.Marshal(struct {
		Kind   string       `json:"kind"`
		Fields chargeFields `json:"fields"`
	}{"charge", chargeFields{Amount: amount, Currency: currency, CycleID: cycle, ProviderID: provider, RenterID: renter}})
	if err != nil {
		return [32]byte{}, fmt.Errorf("request hash of charge: %w", err)
	}
	return sha256.Sum256(b), nil
}

// resolveCycles maps each wanted cycle to itself or, if it is closed, to the
// earliest open cycle after it. It holds a shared lock on every cycle it
// posts to until the transaction ends, so a concurrent close (exclusive)
// waits for this batch, and a batch after the close sees it and redirects.
func (a *App) resolveCycles(ctx context.Context, tx Tx, wanted map[string]bool) (map[string]string, error) {
	locked := map[string]bool{}
	for {
		var need []string
		for c := range wanted {
			if !locked[c] {
				need = append(need, c)
			}
		}
		if err := tx.LockCyclesShared(ctx, need); err != nil {
			return nil, err
		}
		for _, c := range need {
			locked[c] = true
		}
		closed, err := tx.ClosedCycles(ctx)
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
