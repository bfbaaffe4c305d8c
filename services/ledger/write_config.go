package ledger

import (
	"fmt"
	"os"
	"time"

	"github.com/gpubill/gpubill/services/ledger/internal/app"
)

// groupCommitTimeoutEnv bounds an API write of the ledger's (manual
// entries, deposits, settlement postings) from when it queues for its group
// commit, the wait behind a group ahead and its group's per-write retries
// included: GPUBILL_LEDGER_GROUP_COMMIT_TIMEOUT, a Go duration, default 10s
// (app.DefaultGroupTimeout). A group that runs out of it (a database that
// hangs without refusing: a partition, a lock held) is rolled back and each
// of its writes answered unavailable (503, retry with the same idempotency
// key), counted in gpubill_ledger_write_group_timeouts_total. Above a
// client's own deadline, that client is answered deadline exceeded first.
const groupCommitTimeoutEnv = "GPUBILL_LEDGER_GROUP_COMMIT_TIMEOUT"

// groupCommitTimeoutMax bounds groupCommitTimeoutEnv: the group's
// statements carry the time left as statement_timeout, an int32 of
// milliseconds (~596 h); past it PostNew failed on every group, each write
// then posted alone, at an fsync each, without a word.
const groupCommitTimeoutMax = 24 * time.Hour

// groupCommitTimeoutFromEnv reads groupCommitTimeoutEnv: 0 (the default)
// when unset, an error when it is not a positive duration.
func groupCommitTimeoutFromEnv() (time.Duration, error) {
	v := os.Getenv(groupCommitTimeoutEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", groupCommitTimeoutEnv, err)
	}
	if d <= 0 || d > groupCommitTimeoutMax {
		return 0, fmt.Errorf("%s %s: want a positive duration up to %s (unset: %s)", groupCommitTimeoutEnv, v, groupCommitTimeoutMax, app.DefaultGroupTimeout)
	}
	return d, nil
}
