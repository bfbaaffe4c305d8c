// Package subjects is the one home of the NATS subjects gpubill's services
// publish and consume (DESIGN §1: <domain>.<event>.<key>): publishers build a
// subject with Family.Of, consumers filter with Family.All and read the key
// back with Family.Key, so the two ends cannot drift apart. The streams that
// hold them are pkg/natsx's table; the payloads are events.proto.
package subjects

import "strings"

// A Family is the subjects of one event: the family name, a dot, one key
// token (a party id, an account class, a cycle id, a service name). Keys are
// NATS subject tokens by construction (pkg/ids grammar).
type Family string

// The event families, with their key.
const (
	UsageIngest         Family = "usage.ingest"            // {provider}: JSON usage from node agents
	UsageRecorded       Family = "usage.recorded"          // {provider}: UsageRecordedBatch, metering
	ChargesRated        Family = "charges.rated"           // {provider}: ChargesRatedBatch, pricing
	LedgerPosted        Family = "ledger.posted"           // {account class}: LedgerPostedBatch, ledger
	LedgerReversed      Family = "ledger.reversed"         // {reversed transaction}: LedgerPosted of its reversal, ledger
	WalletDepleted      Family = "billing.wallet.depleted" // {renter}: WalletDepleted, ledger
	PartyUpdated        Family = "party.updated"           // {party}: PartyUpdated, metering
	GPUModelUpdated     Family = "gpu_model.updated"       // {model}: GpuModelUpdated, metering
	CycleClosed         Family = "settlement.cycle.closed" // {cycle}: CycleClosed, settlement
	ProviderSettled     Family = "settlement.settled"      // {provider}: ProviderSettled, settlement
	PayoutStatusChanged Family = "payout.status_changed"   // {provider}: PayoutStatusChanged, payout
	AuditRecorded       Family = "audit.recorded"          // {service}: AuditRecorded, every service
	LeaseRunwayLow      Family = "lease.runway.low"        // {renter}: LeaseControl, ledger
	LeaseStopRequested  Family = "lease.stop.requested"    // {renter}: LeaseControl, ledger
	LeaseResumeAllowed  Family = "lease.resume.allowed"    // {renter}: LeaseControl, ledger
)

// Of is the subject of the family's event for key.
func (f Family) Of(key string) string { return string(f) + "." + key }

// All is the filter that matches every key of the family.
func (f Family) All() string { return string(f) + ".>" }

// Prefix is the family followed by the dot before its key.
func (f Family) Prefix() string { return string(f) + "." }

// Key returns the key of a subject of the family, and false for a subject
// of another family (or one without a key).
func (f Family) Key(subject string) (string, bool) {
	k, ok := strings.CutPrefix(subject, f.Prefix())
	return k, ok && k != ""
}
