package domain

import (
	"fmt"
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

// CheckpointDeferred is the error of a checkpoint put off because writers
// open when it was fenced off were still open after the wait (a charge batch
// of minutes): not a failure, nothing was written, a later step makes it.
type CheckpointDeferred struct {
	At          time.Time     // the checkpoint's instant
	OpenWriters int           // the writers still open
	Waited      time.Duration // how long the checkpoint waited for them
}

func (e *CheckpointDeferred) Error() string {
	return fmt.Sprintf("checkpoint at %s put off: %d write transactions still open after %s", e.At.Format(time.RFC3339Nano), e.OpenWriters, e.Waited)
}
