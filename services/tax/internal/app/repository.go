package app

import (
	"context"
	"fmt"
	"time"

	"github.com/gpubill/gpubill/pkg/apperr"

	"github.com/gpubill/gpubill/services/tax/internal/domain"
)

// Store is the tax service's persistence (adapters/postgres.Store implements it).
type Store interface {
	// Recorded returns the withholding recorded under key (found) and the
	// provider's profile (ok), in one round trip.
	Recorded(ctx context.Context, key, provider string) (w domain.Withholding, found bool, p domain.Profile, ok bool, err error)
	// Profile returns the provider's tax profile (read model of
	// party.updated); ok is false when none has arrived.
	Profile(ctx context.Context, provider string) (p domain.Profile, ok bool, err error)
	// RuleAt returns the version in force at instant at of ruleSet, or
	// when ruleSet is "" of the rule set selected for the provider ("":
	// none), else for its jurisdiction, else for each jurisdiction that
	// one belongs to (CN-BJ, then CN), else the default.
	RuleAt(ctx context.Context, ruleSet, provider, jurisdiction string, at time.Time) (domain.Rule, error)
	// InsertWithholding records w unless its key is taken, and returns
	// what is recorded under the key.
	InsertWithholding(ctx context.Context, w domain.Withholding) (domain.Withholding, error)
	// Withholdings lists a provider's withholdings in (cycle desc,
	// currency) order, after the one of afterCycle and afterCurrency when
	// afterCycle is set (a cycle has one per currency: a page may end
	// inside a cycle).
	Withholdings(ctx context.Context, provider, cycle, afterCycle, afterCurrency string, limit int) ([]domain.Withholding, error)
	// Rules lists the versions of ruleSet ("": any) that apply in
	// jurisdiction ("": any): its own, its parents' (CN's in CN-BJ) and
	// those of no jurisdiction.
	Rules(ctx context.Context, ruleSet, jurisdiction string) ([]domain.Rule, error)
	SetSelection(ctx context.Context, scope, ruleSet string, from time.Time) (time.Time, error)

	// LockRuns takes the remittance runs' lock (one database-wide, across
	// replicas), waiting for it until ctx ends, and returns its fence and
	// its release: RemitTax and RemitReversed each run whole under it. The
	// lock lives on one database session, which may end mid-run (its
	// connection killed, an idle timeout): another run may then take it
	// while this one goes on. Each of a run's writes (MarkPosted,
	// PlanRemittances, MarkRemitted, MarkReversed, RecordRun) takes its
	// fence and commits only while no later run has taken the lock, else
	// fails with ErrRunsLockLost and writes nothing.
	LockRuns(ctx context.Context) (f Fence, unlock func(), err error)
	// Unremitted pages (by id, after `after`) through the unremitted
	// withholdings recorded before end.
	Unremitted(ctx context.Context, end time.Time, after string, limit int) ([]domain.Withholding, error)
	// MarkPosted records unremitted withholdings' (by id) settlement
	// transactions ("": none).
	MarkPosted(ctx context.Context, f Fence, txByWithholding map[string]string) error
	// Outstanding counts the withholdings recorded before end that no
	// remittance holds.
	Outstanding(ctx context.Context, end time.Time) (int, error)
	// PlanRemittances assigns every unremitted withholding recorded before
	// end whose settlement was posted to a remittance of the period per
	// jurisdiction and currency made with it (never to one planned before;
	// one reversed does not count), and returns the period's remittances.
	// A period filed already (its run recorded, or a remittance of it or of
	// a later period made) takes only the withholdings a reversed remittance
	// of it gave back.
	PlanRemittances(ctx context.Context, f Fence, period string, end, now time.Time) ([]domain.Remittance, error)
	MarkRemitted(ctx context.Context, f Fence, id, txID string, at time.Time) error
	// RemittedUpTo pages (by id, after `after`) through the remittances of
	// periods up to period remitted with a ledger transaction.
	RemittedUpTo(ctx context.Context, period, after string, limit int) ([]domain.Remittance, error)
	// MarkReversed marks a remitted remittance reversed by the ledger
	// transaction reversedBy and gives its withholdings back to its
	// period (unremitted); false when it was not remitted.
	MarkReversed(ctx context.Context, f Fence, id, reversedBy string, at time.Time) (bool, error)
	// ReversedUnplanned lists the periods before period (oldest first)
	// with a reversed remittance and no other of its jurisdiction and
	// currency: their withholdings wait for the period's next plan.
	ReversedUnplanned(ctx context.Context, period string) ([]string, error)
	// PendingBefore lists the remittances of periods before period still
	// pending (their post refused or never reached), oldest first.
	PendingBefore(ctx context.Context, period string) ([]domain.Remittance, error)
	// Remittances lists the remittances f selects, newest period first,
	// then by jurisdiction and currency: at most f.Limit (0: all), after
	// f.After when it is set.
	Remittances(ctx context.Context, f RemittanceFilter) ([]domain.Remittance, error)
	// RecordRun records that the period's run, started at startedAt (when
	// it took the runs' lock), completed at completedAt (this record, its
	// last write) (its remittances, as many as answered, all posted;
	// notPosted withholdings left out), once: a month recorded already
	// keeps its first record.
	RecordRun(ctx context.Context, f Fence, period string, startedAt, completedAt time.Time, remittances, notPosted int) error
	// Report totals the withholdings of the remittances (by id) per
	// remittance and provider, in the order of remittanceIDs and then by
	// provider: the first limit lines.
	Report(ctx context.Context, remittanceIDs []string, limit int) ([]domain.ReportLine, error)
	// ReportCount counts the lines Report has for the remittances.
	ReportCount(ctx context.Context, remittanceIDs []string) (int, error)
	// ReportPage is one remittance's report lines by provider, at most
	// limit after afterProvider; false when no remittance has the id.
	ReportPage(ctx context.Context, remittanceID, afterProvider string, limit int) ([]domain.ReportLine, bool, error)
}

// Fence is one taking of the remittance runs' lock (Store.LockRuns): the
// token a run's writes are checked against.
type Fence int64

// ErrRunsLockLost is the error of a run's write after another run took the
// runs' lock from it (its session ended mid-run): the run stops, writing
// nothing more, and the other's writes stand. It is unavailable (503, a
// Temporal activity retries it): a month run again posts nothing twice.
var ErrRunsLockLost = fmt.Errorf("the tax remittance run lost the runs' lock to another run (its database session ended); run it again: %w",
	apperr.ErrUnavailable)

// RemittanceFilter selects remittances: an empty field selects any.
type RemittanceFilter struct {
	Period, Jurisdiction, Currency string
	// After is the last remittance of the page before (its period,
	// jurisdiction, currency and id).
	After *domain.Remittance
	Limit int
}

// MaxLookupKeys is how many idempotency keys one Ledger.Posted call names
// (the ledger's limit per listing).
const MaxLookupKeys = 100

// Ledger is what the tax service needs of the ledger service.
type Ledger interface {
	// PostRemittance posts a remittance (its Legs) with its id as the
	// idempotency key and returns the ledger transaction as the ledger
	// holds it (a replay of the key: reversed when a reversal undid it).
	PostRemittance(ctx context.Context, r domain.Remittance) (domain.PostedTx, error)
	// Posted returns the transactions posted under keys (at most
	// MaxLookupKeys), by key; a key nothing was posted under is absent.
	// Settlements are posted under their withholding's key, remittances
	// under their id.
	Posted(ctx context.Context, keys []string) (map[string]domain.PostedTx, error)
}
