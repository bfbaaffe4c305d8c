package ports

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/outbox"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// SettledConsumerName is the durable consumer of settlement.settled.*.
const SettledConsumerName = app.SettledConsumer

const settledBatchMax = 200

// ConsumeSettled creates one payout per settled provider, cycle and
// currency (app.Payouts.CreateFromSettledMessages: earlier payouts still
// waiting join it; exactly once per message) and nudges the workflow
// starter (which also polls, so a nudge before the commit is harmless).
// The workflows of payouts that joined a new one are woken (their
// Prepare waits on the row lock until this batch commits, then sees them
// canceled and ends). Undecodable messages, and those that keep failing,
// go to dl.
func ConsumeSettled(ctx context.Context, js jetstream.JetStream, payouts *app.Payouts, log *slog.Logger, flow *Workflows, dl natsx.DeadLetters) error {
	spec := natsx.ConsumerSpec{Stream: natsx.StreamSettlement, Durable: SettledConsumerName, FilterSubjects: []string{subjects.ProviderSettled.All()},
		BatchMax: settledBatchMax, DeadLetters: dl}
	return outbox.ConsumeDecoded(ctx, js, log, spec, func(ctx context.Context, ids []string, evs []*eventsv1.ProviderSettled) error {
		msgs := make([]app.SettledMessage, len(evs))
		for i, ev := range evs {
			p, err := settledPayout(ev, payouts.Clock.Now())
			if err != nil {
				return err
			}
			msgs[i] = app.SettledMessage{ID: ids[i], Payout: p}
		}
		joined, err := payouts.CreateFromSettledMessages(ctx, msgs)
		if err != nil {
			return err
		}
		if flow != nil {
			flow.Nudge()
			flow.Wake(context.WithoutCancel(ctx), joined...)
		}
		return nil
	})
}

// settledPayout is the payout a settled statement asks for, under the id
// derived from its provider, cycle and currency (domain.PayoutID).
func settledPayout(ev *eventsv1.ProviderSettled, now time.Time) (domain.Payout, error) {
	id, err := domain.PayoutID(ev.ProviderId, ev.CycleId, ev.Currency)
	if err != nil {
		return domain.Payout{}, fmt.Errorf("settled event of %s: %w", ev.ProviderId, err)
	}
	p := domain.Payout{ID: id, ProviderID: ev.ProviderId, CycleID: ev.CycleId, Currency: ev.Currency, CreatedAt: now}
	for _, f := range []struct {
		dst *decimal.Decimal
		s   string
	}{{&p.Gross, ev.Gross}, {&p.Commission, ev.Commission}, {&p.Tax, ev.TaxWithheld}, {&p.Net, ev.Net}} {
		d, err := money.ParseDecimal(f.s)
		if err != nil {
			return p, fmt.Errorf("settled event of %s: amount %q: %w", ev.ProviderId, f.s, err)
		}
		*f.dst = d
	}
	return p, nil
}
