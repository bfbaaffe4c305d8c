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
	ActSettleProviders    = "SettleProviders" // runs a page's settle-{cycle}-{provider} workflows and counts their results
	ActCompleteCycle      = "CompleteCycle"
	ActSettleProvider     = "SettleProvider" // the provider workflow's one local activity: the steps below, in order
	ActPrepareProvider    = "PrepareProvider"
	ActComputeTax         = "ComputeTax"
	ActPostSettlement     = "PostSettlement" // the settlement with its commission sweep, one ledger transaction
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
	// of ActNextProviders, one SettleProviders activity) before it
	// continues as new. Between pages the close drains its last providers
	// and runs two activities and a continue-as-new; on the
	// 10 000-provider benchmark (2 cores) pages of 500 settled 230-245
	// providers/s, pages of 2 000 (window 500) 252-265/s, 4 000 265/s.
	//
	// Earlier versions started each provider as a child workflow of the
	// cycle (three parent history events per child; the server's cost per
	// child rose with the children pending in the parent, so pages of 500
	// were best at 139 providers/s).
	BatchSizeDefault = 2000
	BatchSizeMax     = 4000

	// WindowDefault is how many provider workflows a page keeps in flight;
	// the next one starts as soon as one is done. 500 keeps two cores busy
	// (300: 259/s, 1 000: 259/s against 263-267/s on the same benchmark)
	// and within the worker's workflow task slots, so every start is
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
}

// ProviderResult is what a provider workflow returns.
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
