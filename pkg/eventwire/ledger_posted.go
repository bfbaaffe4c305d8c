package eventwire

import "google.golang.org/protobuf/encoding/protowire"

// Field numbers of events.proto's LedgerPostedBatch (ledger.posted.*: the
// ledger's lease control reads each posting's account and currency by hand).
const (
	PostedBatchID           protowire.Number = 1
	PostedBatchTransactions protowire.Number = 2
)

// Field numbers of events.proto's LedgerPosted.
const (
	PostedTransactionID  protowire.Number = 1
	PostedIdempotencyKey protowire.Number = 2
	PostedEffectiveAt    protowire.Number = 3
	PostedCreatedAt      protowire.Number = 4
	PostedPostings       protowire.Number = 5
)

// Field numbers of events.proto's Posting.
const (
	PostingAccount   protowire.Number = 1
	PostingDirection protowire.Number = 2
	PostingAmount    protowire.Number = 3
	PostingCurrency  protowire.Number = 4
)
