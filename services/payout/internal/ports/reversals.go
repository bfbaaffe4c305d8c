package ports

import (
	"context"
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	"github.com/gpubill/gpubill/services/payout/internal/app"
)

// ReversalsConsumerName is the durable consumer of ledger.reversed.*.
const ReversalsConsumerName = "payout-reversals"

const reversalsBatchMax = 100

// ConsumeReversals acts on the ledger's reversals (ledger.reversed.{the
// reversed transaction}, the reversal's LedgerPosted, written to the
// ledger's outbox with the reversal): a payout settled outside by a
// reversed transaction moves back to failed at once
// (app.Payouts.ReleaseReversedClaims), one message per reversal, where the
// settled-outside pass read every claim ever made to find it. Applying a
// message again changes nothing (its claim is released already), so no
// inbox is kept. A message naming no transaction, or undecodable, is
// dead-lettered at once; one that keeps failing (payout's database down)
// goes to dl too (counted, gpubill_dead_letters_total, and replayable).
func ConsumeReversals(ctx context.Context, js jetstream.JetStream, payouts *app.Payouts, log *slog.Logger, dl natsx.DeadLetters) error {
	spec := natsx.ConsumerSpec{Stream: natsx.StreamLedger, Durable: ReversalsConsumerName, FilterSubjects: []string{subjects.LedgerReversed.All()},
		BatchMax: reversalsBatchMax, DeadLetters: dl}
	return natsx.Consume(ctx, js, log, spec, func(ctx context.Context, msgs []jetstream.Msg) error {
		rs := make([]app.Reversal, 0, len(msgs))
		var poison natsx.PoisonError
		for _, m := range msgs {
			r, err := reversalOf(m.Subject(), m.Data())
			if err != nil {
				poison.Add(natsx.MsgID(m), err)
				continue
			}
			rs = append(rs, r)
		}
		if len(poison.ByID) > 0 {
			return &poison // dead-lettered at once; the rest handed back
		}
		return payouts.ReleaseReversedClaims(ctx, rs)
	})
}

// reversalOf reads one ledger.reversed message: the reversed transaction
// is its subject's key, its reversal the payload's transaction.
func reversalOf(subject string, data []byte) (app.Reversal, error) {
	id, ok := subjects.LedgerReversed.Key(subject)
	if !ok {
		return app.Reversal{}, errors.New("ledger.reversed message naming no reversed transaction: " + subject)
	}
	var ev eventsv1.LedgerPosted
	if err := proto.Unmarshal(data, &ev); err != nil {
		return app.Reversal{}, errors.New("undecodable ledger.reversed." + id + ": " + err.Error())
	}
	if ev.TransactionId == "" {
		return app.Reversal{}, errors.New("ledger.reversed." + id + " names no reversing transaction")
	}
	return app.Reversal{TransactionID: id, ReversedBy: ev.TransactionId}, nil
}
