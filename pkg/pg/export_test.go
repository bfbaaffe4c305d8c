package pg

import "time"

// SetBatchTimeouts sets the shared batches' client and server timeouts
// until the returned func restores them.
func SetBatchTimeouts(client, server time.Duration) (restore func()) {
	c, s := batchTimeout, batchServerTimeout
	batchTimeout, batchServerTimeout = client, server
	return func() { batchTimeout, batchServerTimeout = c, s }
}
