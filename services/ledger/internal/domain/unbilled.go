package domain

import "time"

// UnbilledCharge is a rated charge billed at 0.00: pricing rounds a lease's
// charges cumulatively, so a small event's charge is often 0.00. It moves
// no money, so it is no transaction of the journal, but its GPU-hours
// belong on the renter's invoice and the provider's statement, so they are
// kept beside the journal.
type UnbilledCharge struct {
	ChargeID, RenterID, Currency string
	Account                      string            // the provider's pending account it would have credited (closed cycle: redirected)
	Metadata                     map[string]string // as a posted charge's: lease, renter, GPU model, GPU-hours
	CreatedAt                    time.Time
}
