package domain

import (
	"time"

	"github.com/shopspring/decimal"
)

// ReasonLenMax bounds, in bytes of UTF-8, the reason finance gives a
// payout's cancel, retry, hold or resolution: it is kept in the payout's
// history (a hold's shown to the provider) and served with every page of
// its payouts.
const ReasonLenMax = 500

// Payout is one payout with its history.
type Payout struct {
	ID, ProviderID, CycleID, Currency    string
	Gross, Commission, Tax, Net          decimal.Decimal
	Status, Reason, Method, MethodSum    string
	FailureCode, FailureMessage, RailRef string
	Attempt                              int
	Submitting                           bool
	// SubmitRail names the rail the current attempt is handed to, recorded
	// with Submitting (by the gate) before it is submitted: only that rail
	// is asked about its reference. "" for an attempt marked before it was
	// recorded: every rail is asked.
	SubmitRail              string
	ExpectedArrival, PaidAt *time.Time
	AbsorbedInto            string
	Version                 int64
	CreatedAt, UpdatedAt    time.Time
	History                 []Change
	Statements              []Statement
}

// Change is one status change.
type Change struct {
	Status, Note string
	At           time.Time
}

// Statement is one settled statement a payout pays.
type Statement struct {
	CycleID, Currency string
	Net               decimal.Decimal
}

// ProviderMethod is a provider's payout method.
type ProviderMethod struct {
	ProviderID string
	Method
	UpdatedAt time.Time
}

// WebhookEvent is the JSON body of a webhook delivery.
type WebhookEvent struct {
	EventID     string    `json:"event_id"`
	Type        string    `json:"type"`
	PayoutID    string    `json:"payout_id"`
	ProviderID  string    `json:"provider_id"`
	FromStatus  string    `json:"from_status"`
	Status      string    `json:"status"`
	Note        string    `json:"note"`
	Net         string    `json:"net"`
	Currency    string    `json:"currency"`
	FailureCode string    `json:"failure_code"`
	At          time.Time `json:"at"`
}

// Webhook is a provider's subscription to its payout status changes.
// Secret is in plaintext only in memory (stored sealed).
type Webhook struct {
	ID, ProviderID, URL, Secret string
	CreatedAt                   time.Time
	RotatedAt                   *time.Time // the last rotation of the secret
	// PreviousUntil is when the secret a rotation replaced stops signing
	// deliveries (nil: no previous secret).
	PreviousUntil *time.Time
}

// Delivery is one status change sent (or being sent) to one webhook.
type Delivery struct {
	ID                           int64
	WebhookID, EventID, PayoutID string
	// ProviderID is the webhook's provider (set by a claim: a sender's
	// share is counted by webhook and by provider).
	ProviderID  string
	URL, Secret string
	// PreviousSecret also signs the delivery while a rotation's grace
	// period lasts ("" otherwise).
	PreviousSecret string
	// SecretErr says why the secrets could not be opened ("" when they
	// were): the delivery is not sent and the attempt records it.
	SecretErr                string
	Payload                  []byte
	Status                   string
	Attempts, LastStatusCode int
	LastError                string
	NextAttemptAt, CreatedAt time.Time
	DeliveredAt              *time.Time
	// RedeliveredAt is when it was last sent again on request (nil if
	// never): its retries count from then, not from CreatedAt.
	RedeliveredAt *time.Time
}

// DeliveryShare bounds a claim of webhook deliveries by what the sender
// already has in flight: at most PerWebhook of one webhook's deliveries
// and PerProvider of one provider's are sent at once, so receivers that
// hang hold only their share of the sender's slots.
type DeliveryShare struct {
	PerWebhook, PerProvider int
	// Webhooks and Providers count the sends in flight by webhook and by
	// provider id.
	Webhooks, Providers map[string]int
}

// LedgerTransfer is one ledger transaction of a payout's step: Debit and
// Credit the net amount (DESIGN §4), under an idempotency key per payout,
// attempt and step.
type LedgerTransfer struct {
	Key, Description string
	Metadata         map[string]string
	Movement
	Currency string
	Amount   decimal.Decimal
}
