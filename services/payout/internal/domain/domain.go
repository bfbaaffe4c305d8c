// Package domain holds payout's pure rules: statuses, the KYC and payout
// method gate, and the minimum payout per currency (DESIGN §6).
package domain

import (
	"fmt"

	"github.com/shopspring/decimal"
)

// Payout statuses.
const (
	StatusCreated        = "created"
	StatusActionRequired = "action_required"
)

// KYC statuses.
const (
	KYCVerified = "verified"
	KYCRejected = "rejected"
	KYCPending  = "pending"
)

// minimums: amounts under these roll over to the next payout.
var minimums = map[string]decimal.Decimal{
	"CNY": decimal.RequireFromString("100.00"),
	"USD": decimal.RequireFromString("25.00"),
}

// Gate decides a new payout's status and, when action is required, why.
func Gate(kyc string, hasMethod bool, currency string, net decimal.Decimal) (status, reason string) {
	switch {
	case kyc != KYCVerified:
		if kyc == "" {
			kyc = "missing"
		}
		return StatusActionRequired, fmt.Sprintf("kyc not verified (%s)", kyc)
	case !hasMethod:
		return StatusActionRequired, "no payout method"
	}
	if m, ok := minimums[currency]; ok && net.LessThan(m) {
		return StatusActionRequired, fmt.Sprintf("under minimum %s %s: rolls over", m.StringFixed(2), currency)
	}
	return StatusCreated, ""
}
