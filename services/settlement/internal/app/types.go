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

// Activity names (methods of ports.Activities).
const (
	ActEnsureCycle        = "EnsureCycle"
	ActStartNextCycle     = "StartNextCycle" // starts the workflow of the cycle after the given one
	ActBeginClose         = "BeginClose"
	ActSnapshotCycle      = "SnapshotCycle"
	ActNextProviders      = "NextProviders"
	ActCompleteCycle      = "CompleteCycle"
	ActSettleProvider     = "SettleProvider" // the provider child's one local activity: the steps below, in order
	ActPrepareProvider    = "PrepareProvider"
	ActComputeTax         = "ComputeTax"
	ActPostSettlement     = "PostSettlement"
	ActSweepCommission    = "SweepCommission"
	ActFinalizeSettlement = "FinalizeSettlement"
)

// Signal and query names of the cycle workflow.
const (
	SignalClose   = "close"
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
	// of ActNextProviders) before it continues as new. With the window the
	// parent's history takes ~5.2 events per child (measured: 52 289 events
	// for 10 000 providers), so a run stays near 7 800 events, below the
	// server's history warning (10 240) and far below its limit (51 200);
	// BatchSizeMax (~21 000 events) stays well under it. Long runs make the drain
	// before continue-as-new (and the server's minimum run lifetime of 1 s)
	// a small share of a run.
	BatchSizeDefault = 1500
	BatchSizeMax     = 4000

	// WindowDefault is how many provider children a cycle run keeps in
	// flight: the next child starts as soon as one completes. The Temporal
	// server's cost per child rises with the number of children pending in
	// the parent (7.2 ms of server CPU per provider at ≤500 pending, 12.6 ms
	// at 2 000), so the window stays small; it only has to keep the worker
	// and the server busy. On the 10 000-provider benchmark (2 cores) 150
	// did slightly better than 250 (126 vs 120 providers/s, server CPU 7.74
	// vs 7.99 ms per provider; runs of 2 000).
	WindowDefault = 150
	// WindowMax stays below Temporal's limit of pending children per
	// workflow (2 000).
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
	After       string // settle phase: the last provider whose child has completed
	BatchSize   int    // providers per run (one page); 0 = BatchSizeDefault
	Window      int    // children in flight at once; 0 = WindowDefault
	Progress    Progress
}

// Progress counts what the close has done so far (all runs together).
type Progress struct {
	Providers int
	Settled   int
	Held      int
	Failed    int
	Runs      int
}

// CloseSignal asks the cycle workflow to close now.
type CloseSignal struct{ Reason string }

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

// ProviderInput is the provider child's input.
type ProviderInput struct {
	CycleID    string
	ProviderID string
}

// ProviderResult is what a provider child reports to its cycle.
type ProviderResult struct {
	Held    bool
	Settled []string // currencies settled by this run
}

// Prepared is what PrepareProvider found: the hold, the tier's commission
// rate and the gross per currency snapshotted at close.
type Prepared struct {
	Held           bool
	Tier           string
	CommissionRate decimal.Decimal
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
}

// TaxResult is the split the tax service computed and recorded.
type TaxResult struct {
	Split         domain.Split
	RuleSet       string
	RuleVersion   string
	WithholdingID string
}

// PostInput is one settlement transaction (or its commission sweep).
type PostInput struct {
	CycleID    string
	ProviderID string
	Split      domain.Split
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
