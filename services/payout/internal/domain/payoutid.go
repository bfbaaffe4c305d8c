package domain

import (
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/gpubill/gpubill/pkg/ids"
)

// PayoutID is the id of the payout of a settled provider, cycle and
// currency: po_ and a UUID derived from those three alone, the same each
// time that settlement is read. The id is the rail reference of the
// payout's first attempt (RailReference), so a payout made again (after a
// restore or a recovery, the settled message that made it is delivered
// again and the payout it made is gone) reaches the rail under the
// reference the rail already knows: Submit queries it first and finds it
// paid, where a new random id submitted a second transfer.
//
// The UUID is laid out as a version 8 (RFC 9562, custom) that sorts as a
// version 7 does: its first 48 bits are the cycle's first day in Unix
// milliseconds, so ids sort by cycle, not by when the payout was made (a
// payout settled late for an old cycle sorts among that cycle's: listings
// order by creation time, the id only breaking ties); the other 74 bits
// are SHA-256 of provider, cycle and currency. Payouts made before ids
// were derived carry a random version 7 UUID of their creation time.
func PayoutID(provider, cycle, currency string) (string, error) {
	if err := ids.CheckCycleID(cycle); err != nil {
		return "", fmt.Errorf("payout id: cycle %w", err)
	}
	day, err := time.Parse("20060102", cycle[len("cyc-"):])
	if err != nil {
		return "", fmt.Errorf("payout id: cycle %s: %w", cycle, err)
	}
	sum := sha256.Sum256([]byte("gpubill payout\x00" + provider + "\x00" + cycle + "\x00" + currency))
	var u uuid.UUID
	copy(u[:], sum[:])
	ms := uint64(day.UnixMilli())
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6] = 0x80 | u[6]&0x0f // version 8
	u[8] = 0x80 | u[8]&0x3f // variant 10 (RFC 9562)
	return "po_" + u.String(), nil
}
