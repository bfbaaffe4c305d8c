package domain

import (
	"time"

	"github.com/shopspring/decimal"
)

// AccountNet is an account's debits - credits in one currency.
type AccountNet struct {
	Account  string
	NetDebit decimal.Decimal
}

// RecordedBreach is a segregation breach as recorded when its transaction
// was posted.
type RecordedBreach struct {
	TransactionID string
	EffectiveAt   time.Time
	CreatedAt     time.Time
	Breach
}

// Checkpoint is a balance checkpoint: the balances of every account as of
// At, made from the previous one (PrevAt) and the Postings created between.
type Checkpoint struct {
	At       time.Time
	PrevAt   *time.Time
	Postings int64
}
