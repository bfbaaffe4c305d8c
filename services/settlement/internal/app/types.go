// Package app holds settlement's use cases: the Temporal workflows that
// settle a cycle (settle-{cycle}) and each provider in it
// (settle-{cycle}-{provider}), and the inputs and results of the activities
// they call. Workflows name activities by string so the ports that implement
// them can import this package.
package app

import (
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpubill/gpubill/services/settlement/internal/domain"
)

// Activity names: settlement.Register registers each method of
// ports.Activities under its name, and nothing else.
const (
	ActEnsureCycle     = "EnsureCycle"
	ActStartNextCycle  = "StartNextCycle" // starts the workflow of the cycle after the given one
	ActBeginClose      = "BeginClose"
	ActSnapshotCycle   = "SnapshotCycle"
	ActNextProviders   = "NextProviders"
	ActSettleProviders = "SettleProviders" // runs a page's settle-{cycle}-{provider} workflows and counts their results
	ActCompleteCycle   = "CompleteCycle"
	// ActSettleProviderSteps is the provider workflow's one local
	// activity: prepare, then per currency tax, the ledger transaction
	// with its sweep, and the statement.
	ActSettleProviderSteps = "SettleProviderSteps"
	// ActSettleProviderLegacy is the name that local activity had before
	// it had a name of its own: the provider workflow's. Runs started
	// before (ProviderInput.Version 0) and their recorded histories use
	// it; such a run lasts at most its 24 h run timeout after an upgrade.
	ActSettleProviderLegacy = "SettleProvider"
)

// Signal and query names of the cycle workflow.
const (
	SignalClose = "close"
	// SignalRerun asks a closing cycle's run to settle its providers still
	// pending once more when its pass is done (RerunSignal): a pass pages
	// forward and never returns to a page it has done.
	SignalRerun   = "rerun"
	QueryProgress = "progress"
)

// Workflow names (registered under these, so ids and names stay stable
// across refactors).
const (
	CycleWorkflowName    = "SettlementCycle"
	ProviderWorkflowName = "SettleProvider"
)

// Limits.
const (
	// BatchSizeDefault is how many providers a cycle run settles (one page
	// of ActNextProviders, one SettleProviders activity) before it
	// continues as new. Between pages the close drains its last providers
	// and runs two activities and a continue-as-new, so larger pages keep
	// the window full longer (DEVELOPERS.md has the measurements).
	BatchSizeDefault = 2000
	BatchSizeMax     = 4000

	// WindowDefault is how many provider workflows a page keeps in flight;
	// the next one starts as soon as one is done. 500 keeps two cores busy
	// and stays within the worker's workflow task slots, so every start is
	// eager.
	WindowDefault = 500
	// WindowMax bounds the provider workflows (and workflow task slots of
	// eager starts) one page holds at once.
	WindowMax = 1000
)

// Cycle workflow phases.
const (
	PhaseWait   = "wait"
	PhaseSettle = "settle"
)

// CycleInput is the cycle workflow's input, also carried across continue-as-new.
type CycleInput struct {
	CycleID     string
	ClosesAt    time.Time
	Phase       string // "" = PhaseWait
	CloseNow    bool   // started by a close request: skip the timer
	CloseReason string
	After       string // settle phase: the last provider of the last page settled
	BatchSize   int    // providers per run (one page); 0 = BatchSizeDefault
	Window      int    // provider workflows in flight at once; 0 = WindowDefault
	// Rerun is the reason of a rerun (SignalRerun) asked for during the
	// settle pass under way ("" none): once the pass is done, a cycle not
	// settled gets another.
	Rerun    string
	Progress Progress
}

// Progress counts what the close's latest pass over the providers has done
// so far (Runs: every run of the close).
type Progress struct {
	Providers int
	Settled   int
	Held      int
	Failed    int
	Runs      int
}

// CloseSignal asks the cycle workflow to close now.
type CloseSignal struct{ Reason string }

// RerunSignal asks a closing cycle's run for another pass (SignalRerun);
// Reason says who asked (logged).
type RerunSignal struct{ Reason string }

// CycleInfo is the cycle's status as settlement's tables know it.
type CycleInfo struct {
	CycleID string
	Status  string
}

// BeginCloseInput starts the close.
type BeginCloseInput struct {
	CycleID string
	Reason  string
}

// NextProvidersInput pages through the providers snapshotted at close.
type NextProvidersInput struct {
	CycleID string
	After   string
	Limit   int
}

// SettleProvidersInput is one page of providers to settle, at most Window
// provider workflows at once.
type SettleProvidersInput struct {
	CycleID   string
	Providers []string
	Window    int
}

// SettleProvidersResult counts a page's provider workflows by outcome.
type SettleProvidersResult struct {
	Settled int // settled now, or earlier (a retried page, a release)
	Held    int
	Failed  int
}

// ProviderInput is the provider workflow's input.
type ProviderInput struct {
	CycleID    string
	ProviderID string
	// Version is the provider workflow's version the starter asked for
	// (ProviderVersion*); 0 in runs started before it existed.
	Version int
	// CompleteCycle asks the run, once it has settled the provider, to
	// mark a closing cycle settled if it was the last (ActCompleteCycle):
	// set by a release, whose caller stops waiting after a while while the
	// run goes on. The cycle's own runs leave it to the cycle workflow.
	CompleteCycle bool
}

// Provider workflow versions (ProviderInput.Version): a version carried
// in the input changes nothing in the history, where workflow.GetVersion
// would add a marker and a search attribute update to every provider's
// six events.
const (
	// ProviderVersionSteps runs the local activity under
	// ActSettleProviderSteps (earlier: ActSettleProviderLegacy).
	ProviderVersionSteps   = 1
	ProviderVersionCurrent = ProviderVersionSteps
)

// ProviderResult is what a provider workflow returns.
type ProviderResult struct {
	Held    bool
	Settled []string // currencies settled by this run
}

// Prepared is what PrepareProvider found: the hold, the tier's commission
// rate, when the cycle was closed and the gross per currency snapshotted
// at close.
type Prepared struct {
	Held           bool
	Tier           string
	CommissionRate decimal.Decimal
	ClosedAt       time.Time
	Items          []Item
}

// Item is one currency of a provider's settlement.
type Item struct {
	Currency string
	Gross    decimal.Decimal
	Status   string
}

// TaxInput asks the tax service for the split and the withholding.
type TaxInput struct {
	CycleID        string
	ProviderID     string
	Currency       string
	Gross          decimal.Decimal
	CommissionRate decimal.Decimal
	IdempotencyKey string
	// ClosedAt is when the cycle was closed: the tax service applies the
	// rule in force at the earlier of it and the cycle's end, so a cycle
	// closed early keeps one rule set for all its providers (a provider
	// held through the close and released after a selection too).
	ClosedAt time.Time
}

// TaxResult is the split the tax service computed and recorded.
type TaxResult struct {
	Split         domain.Split
	RuleSet       string
	RuleVersion   string
	WithholdingID string
}

// PostInput is one settlement transaction (with its commission sweep).
type PostInput struct {
	CycleID    string
	ProviderID string
	Split      domain.Split
}

// Posted names the ledger transaction of a settlement and the one that swept
// its commission (the same transaction since the two are posted as one; ""
// without a commission).
type Posted struct {
	TransactionID string
	SweepID       string
}

// FinalizeInput records the statement and hands off to payout.
type FinalizeInput struct {
	CycleID       string
	ProviderID    string
	Tier          string
	Tax           TaxResult
	TransactionID string
	SweepID       string
}
