package ports

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/shopspring/decimal"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/eventwire"
	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/partyfeed"
	"github.com/gpubill/gpubill/pkg/subjects"
	eventsv1 "github.com/gpubill/gpubill/proto/gen/gpubill/events/v1"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// Durable consumers of lease control.
const (
	// LeaseControlConsumer reacts to every ledger write that moved a renter
	// wallet (ledger.posted.renter).
	LeaseControlConsumer = app.LeaseControlConsumer
	// RentersConsumer keeps the renters' credit limits (party.updated.*).
	RentersConsumer   = app.RentersConsumer
	leaseBatchMax     = 500
	rentersBatchMax   = 500
	renterWalletClass = "renter"
)

// ConsumeLeaseControl evaluates lease control for the wallets each
// ledger.posted.renter batch moved (app.LeaseControl.EvaluateMoved: exactly
// once per message, in the transaction that records it); undecodable
// messages, and those that keep failing, go to dl.
func ConsumeLeaseControl(ctx context.Context, js jetstream.JetStream, log *slog.Logger, lc *app.LeaseControl, dl natsx.DeadLetters) error {
	spec := natsx.ConsumerSpec{Stream: natsx.StreamLedger, Durable: LeaseControlConsumer,
		FilterSubjects: []string{subjects.LedgerPosted.Of(renterWalletClass)}, BatchMax: leaseBatchMax, DeadLetters: dl}
	return natsx.Consume(ctx, js, log, spec, func(ctx context.Context, ms []jetstream.Msg) error {
		msgs := make([]app.WalletsMoved, len(ms))
		var poison natsx.PoisonError
		for i, m := range ms {
			msgs[i].ID = natsx.MsgID(m)
			w, err := movedWallets(m.Data())
			if err != nil {
				poison.Add(msgs[i].ID, fmt.Errorf("undecodable ledger.posted batch: %w", err))
				continue
			}
			msgs[i].Wallets = w
		}
		if len(poison.ByID) > 0 {
			return &poison
		}
		return lc.EvaluateMoved(ctx, msgs)
	})
}

// movedWallets are the renter wallets a LedgerPostedBatch's postings name,
// each once, in the order first named. Only each posting's account and
// currency are read from the wire (field numbers: pkg/eventwire): decoding the whole batch (ids, times and
// amounts of every transaction) to find them was 8 % of the ledger_postings
// bench's process CPU. The batch must be well-formed protobuf and those two
// fields valid UTF-8, else it is an error (the message is poison); the
// fields it skips are not checked as a full decode would check them.
func movedWallets(batch []byte) ([]domain.WalletKey, error) {
	seen := map[domain.WalletKey]bool{}
	var keys []domain.WalletKey
	err := eachField(batch, func(num protowire.Number, typ protowire.Type, tx []byte) error {
		if num != eventwire.PostedBatchTransactions || typ != protowire.BytesType {
			return nil
		}
		return eachField(tx, func(num protowire.Number, typ protowire.Type, posting []byte) error {
			if num != eventwire.PostedPostings || typ != protowire.BytesType {
				return nil
			}
			var account, currency []byte // the last of each wins, as in a full decode
			err := eachField(posting, func(num protowire.Number, typ protowire.Type, v []byte) error {
				switch {
				case typ != protowire.BytesType:
				case num == eventwire.PostingAccount:
					account = v
				case num == eventwire.PostingCurrency:
					currency = v
				}
				return nil
			})
			if err != nil {
				return err
			}
			if !utf8.Valid(account) || !utf8.Valid(currency) {
				return errors.New("a posting's account or currency is not valid UTF-8")
			}
			renter, ok := walletOwner(string(account))
			k := domain.WalletKey{RenterID: renter, Currency: string(currency)}
			if ok && !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
			return nil
		})
	})
	return keys, err
}

// eachField calls f with each field of a protobuf message's wire bytes: its
// number, its wire type and, for a length-delimited field, its contents.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// walletOwner returns the renter of a renter:{id}:wallet address.
func walletOwner(address string) (string, bool) {
	if !strings.HasPrefix(address, "renter:") {
		return "", false // another class's account: no need to parse it
	}
	a, err := domain.ParseAddress(address)
	if err != nil || a.Class != domain.ClassRenter || address != domain.RenterWallet(a.Party) {
		return "", false
	}
	return a.Party, true
}

// A renter's status in party.updated (metering's domain.RenterActive and
// RenterClosed).
const (
	partyActive = "active"
	partyClosed = "closed"
)

// ConsumeRenters keeps the ledger's read model of renters (currency, credit
// limit, closed) from party.updated.*; what cannot be decoded or applied (a
// credit limit that is not a decimal ≥ 0, an unknown status) goes to dl.
func ConsumeRenters(ctx context.Context, js jetstream.JetStream, log *slog.Logger, renters *app.Renters, dl natsx.DeadLetters) error {
	return partyfeed.Consume(ctx, js, log, RentersConsumer, dl, func(ctx context.Context, ids []string, evs []*eventsv1.PartyUpdated) error {
		ups := make([]app.RenterUpdate, len(evs))
		var poison natsx.PoisonError
		for i, ev := range evs {
			ups[i] = app.RenterUpdate{ID: ids[i]}
			if !partyfeed.IsRenter(ev) {
				continue
			}
			limit := decimal.Zero
			if ev.CreditLimit != "" {
				var err error
				if limit, err = money.ParseDecimal(ev.CreditLimit); err != nil || limit.IsNegative() {
					poison.Add(fmt.Sprintf("party-renter-%s-v%d", ev.PartyId, ev.Version), fmt.Errorf("credit_limit %q: %v", ev.CreditLimit, err))
					continue
				}
			}
			var closedAt time.Time
			switch ev.Status {
			case "", partyActive: // "": published before renters had a status
			case partyClosed:
				if closedAt = ev.ClosedAt.AsTime(); ev.ClosedAt == nil {
					closedAt = ev.UpdatedAt.AsTime()
				}
			default:
				poison.Add(fmt.Sprintf("party-renter-%s-v%d", ev.PartyId, ev.Version), fmt.Errorf("status %q is not active or closed", ev.Status))
				continue
			}
			ups[i].Keep = true
			ups[i].Row = domain.RenterLimit{RenterID: ev.PartyId, Currency: strings.ToUpper(ev.Currency), CreditLimit: limit,
				Version: ev.Version, UpdatedAt: ev.UpdatedAt.AsTime(), ClosedAt: closedAt}
		}
		if len(poison.ByID) > 0 {
			return &poison
		}
		return renters.Apply(ctx, ups)
	})
}

// WalletServer serves WalletService.
type WalletServer struct {
	ledgerv1.UnimplementedWalletServiceServer
	LeaseControl *app.LeaseControl
}

// GetRenterWallet implements WalletService: a renter reads only its own.
func (s *WalletServer) GetRenterWallet(ctx context.Context, r *ledgerv1.GetRenterWalletRequest) (*ledgerv1.GetRenterWalletResponse, error) {
	if err := auth.CheckOwner(ctx, auth.RoleRenter, r.RenterId); err != nil {
		return nil, err
	}
	ws, at, err := s.LeaseControl.Wallet(ctx, r.RenterId)
	if err != nil {
		return nil, err
	}
	out := &ledgerv1.GetRenterWalletResponse{RenterId: r.RenterId, AsOf: timestamppb.New(at)}
	for _, w := range ws {
		b := &ledgerv1.WalletBalance{Currency: w.Currency, Balance: fixed(w.Currency, w.Balance), CreditLimit: fixed(w.Currency, w.CreditLimit),
			Available: fixed(w.Currency, w.Available()), BurnRatePerHour: fixed(w.Currency, w.BurnPerHour), RunwayHours: w.RunwayString(),
			OverCreditLimit: w.OverLimit(), LeaseControl: string(w.Lease.State)}
		if !w.Lease.OverLimitSince.IsZero() && w.OverLimit() {
			b.OverCreditLimitSince = timestamppb.New(w.Lease.OverLimitSince)
		}
		out.Balances = append(out.Balances, b)
	}
	return out, nil
}

// fixed states an amount with its currency's minor units (exact: ledger
// amounts are already in minor units; an unknown code keeps its digits).
func fixed(currency string, d decimal.Decimal) string {
	c, err := money.Lookup(currency)
	if err != nil {
		return d.String()
	}
	return d.StringFixed(c.MinorUnits)
}
