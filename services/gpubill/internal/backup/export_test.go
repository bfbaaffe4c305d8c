package backup

import "context"

// FailAfterRestore makes restore's last step fail before its commit, as a
// process killed there leaves it (the server rolls its transaction back),
// until the returned func restores it.
func FailAfterRestore(fail func(context.Context) error) (restore func()) {
	prev := afterRestoreFail
	afterRestoreFail = fail
	return func() { afterRestoreFail = prev }
}
