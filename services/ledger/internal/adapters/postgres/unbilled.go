package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// RecordUnbilled implements app.Tx. A charge id recorded before is left as
// it is: pricing gives a charge its id once (unique to its first source
// message), and the inbox already skips a redelivered message.
func (t *Tx) RecordUnbilled(ctx context.Context, cs []domain.UnbilledCharge) error {
	if len(cs) == 0 {
		return nil
	}
	n := len(cs)
	ids, renters, accounts, curs, mds := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	ats := make([]time.Time, n)
	for i, c := range cs {
		md, err := json.Marshal(c.Metadata)
		if err != nil {
			return fmt.Errorf("unbilled charge %s metadata: %w", c.ChargeID, err)
		}
		ids[i], renters[i], accounts[i], curs[i], mds[i], ats[i] = c.ChargeID, c.RenterID, c.Account, c.Currency, string(md), c.CreatedAt
	}
	if _, err := t.tx.Exec(ctx, `insert into ledger.unbilled_charges (charge_id, renter_id, account, currency, metadata, created_at)
		select i, r, a, c, m::jsonb, at from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[]) as x(i, r, a, c, m, at)
		on conflict (charge_id) do nothing`, ids, renters, accounts, curs, mds, ats); err != nil {
		return fmt.Errorf("record unbilled charges: %w", err)
	}
	return nil
}
