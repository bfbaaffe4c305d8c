package natsx

import "time"

// HandlerTimeouts is handlerTimeouts, for the tests.
var HandlerTimeouts = handlerTimeouts

// SetPublishAsyncTimeout sets publishAsyncTimeout for a test and returns
// the previous value.
func SetPublishAsyncTimeout(d time.Duration) time.Duration {
	old := publishAsyncTimeout
	publishAsyncTimeout = d
	return old
}

// SetAfterDrainedCheck sets afterDrainedCheck for a test and returns what
// puts the previous value back.
func SetAfterDrainedCheck(f func()) (restore func()) {
	old := afterDrainedCheck
	afterDrainedCheck = f
	return func() { afterDrainedCheck = old }
}
