package ports

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/gpubill/gpubill/pkg/eventwire"
	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// errStringNotUTF8 is proto.Unmarshal's refusal of a string field.
var errStringNotUTF8 = errors.New("string field contains invalid UTF-8")

// decodeCharges reads a ChargesRatedBatch straight into the charges the
// ledger posts: each charge's ids, currency, amount and effective time, and
// each line's kind, GPU model and GPU-hours; its lines share one slice. It
// refuses what proto.Unmarshal into eventsv1.ChargesRatedBatch refuses
// (malformed wire data, invalid UTF-8 in any string field of the three
// messages, a malformed timestamp) and, like it, skips unknown fields and
// fields of an unexpected wire type; the fields the ledger does not use
// (event ids, the exact amount, the lines' prices and times) are checked,
// not copied (TestDecodeChargesIsProtoUnmarshal). The generated messages
// cost ~2.5 % of this process's CPU in the pipeline bench, a string and a
// timestamp for every field of every charge. Its charges and lines are
// each one allocation of the size the message needs (countCharges).
func decodeCharges(m ChargesMessage) app.ChargeMessage {
	charges, lines := countCharges(m.Payload)
	d := chargesDecoder{lines: make([]app.ChargeLine, 0, lines)}
	out := app.ChargeMessage{ID: m.ID, Charges: make([]app.RatedCharge, 0, charges)}
	err := eachField(m.Payload, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case typ != protowire.BytesType:
		case num == eventwire.RatedBatchID:
			if !utf8.Valid(v) {
				return fmt.Errorf("batch_id: %w", errStringNotUTF8)
			}
		case num == eventwire.RatedBatchCharges:
			out.Charges = append(out.Charges, app.RatedCharge{})
			if err := d.charge(v, &out.Charges[len(out.Charges)-1]); err != nil {
				return fmt.Errorf("charges[%d]: %w", len(out.Charges)-1, err)
			}
		}
		return nil
	})
	if err != nil {
		return app.ChargeMessage{ID: m.ID, Err: err}
	}
	return out
}

// countCharges counts a ChargesRatedBatch's charges and their lines by their
// tags alone, so that decodeCharges allocates what the message holds. A fixed
// guess of 64 charges and 64 lines allocated ~13 KB for a message of ten
// charges: 1.3 KB a charge, an eighth of the bytes the ledger_postings bench
// allocated. A malformed message sizes nothing (0, 0): decodeCharges
// refuses it, appending only what it reads before the fault.
func countCharges(b []byte) (charges, lines int) {
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != eventwire.RatedBatchCharges || typ != protowire.BytesType {
			return nil
		}
		charges++
		return eachField(v, func(num protowire.Number, typ protowire.Type, _ []byte) error {
			if num == eventwire.RatedLines && typ == protowire.BytesType {
				lines++
			}
			return nil
		})
	})
	if err != nil {
		return 0, 0
	}
	return charges, lines
}

// chargesDecoder keeps what a message's charges share: the slice their
// lines are cut from, and each field's last value (a batch is one
// provider's charges: its provider, cycle, currency and the lines' kinds and
// models repeat).
type chargesDecoder struct {
	lines []app.ChargeLine
	last  [lineSlots + 16]string // by field: RatedCharge's by number, ChargeLine's at lineSlots + number
}

// lineSlots is where ChargeLine's fields start in chargesDecoder.last.
const lineSlots = 16

// str is field slot's value v as a string, the previous one's when equal.
func (d *chargesDecoder) str(slot int, v []byte) string {
	if d.last[slot] == string(v) {
		return d.last[slot]
	}
	s := string(v)
	d.last[slot] = s
	return s
}

func (d *chargesDecoder) charge(b []byte, rc *app.RatedCharge) error {
	first := len(d.lines)
	var ts eventwire.Timestamp
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case eventwire.RatedChargeID, eventwire.RatedLeaseID, eventwire.RatedRenterID, eventwire.RatedProviderID, eventwire.RatedCycleID,
			eventwire.RatedCurrency, eventwire.RatedAmount, eventwire.RatedExactAmount, eventwire.RatedEventIDs:
			if !utf8.Valid(v) {
				return errStringNotUTF8
			}
		}
		switch num {
		case eventwire.RatedChargeID:
			rc.ChargeID = string(v)
		case eventwire.RatedLeaseID:
			rc.LeaseID = string(v)
		case eventwire.RatedRenterID:
			rc.RenterID = d.str(int(num), v)
		case eventwire.RatedProviderID:
			rc.ProviderID = d.str(int(num), v)
		case eventwire.RatedCycleID:
			rc.CycleID = d.str(int(num), v)
		case eventwire.RatedCurrency:
			rc.Currency = d.str(int(num), v)
		case eventwire.RatedAmount:
			rc.Amount = string(v)
		case eventwire.RatedLines:
			d.lines = append(d.lines, app.ChargeLine{})
			if err := d.line(v, &d.lines[len(d.lines)-1]); err != nil {
				return fmt.Errorf("lines[%d]: %w", len(d.lines)-1-first, err)
			}
		case eventwire.RatedEffectiveAt:
			if err := ts.Merge(v); err != nil {
				return fmt.Errorf("effective_at: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	rc.Lines = d.lines[first:len(d.lines):len(d.lines)]
	if ts.Seen {
		rc.EffectiveAt = ts.Time()
	}
	return nil
}

func (d *chargesDecoder) line(b []byte, l *app.ChargeLine) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case eventwire.LineEventID, eventwire.LineKind, eventwire.LineGPUModel, eventwire.LineBand, eventwire.LineTier,
			eventwire.LineRateCardID, eventwire.LineGPUHours, eventwire.LineUnitPrice, eventwire.LineMultiplier, eventwire.LineAmount:
			if !utf8.Valid(v) {
				return errStringNotUTF8
			}
		case eventwire.LineStart, eventwire.LineEnd:
			var ts eventwire.Timestamp
			return ts.Merge(v)
		}
		switch num {
		case eventwire.LineKind:
			l.Kind = d.str(lineSlots+int(num), v)
		case eventwire.LineGPUModel:
			l.GPUModel = d.str(lineSlots+int(num), v)
		case eventwire.LineGPUHours:
			l.GPUHours = d.str(lineSlots+int(num), v)
		}
		return nil
	})
}
