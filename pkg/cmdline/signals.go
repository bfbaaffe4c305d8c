package cmdline

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// StopSignals are the signals on which every gpubill binary stops as it
// does on SIGTERM: drains its listeners, consumers and workers, then
// exits. SIGHUP too: the SSH session of an operator running a service
// (or a restore, or a dev stack) dropped, unhandled, it killed the
// process where it stood, without the drain.
var StopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// StopContext is parent, ended by the first of StopSignals; stop releases
// the signals (a second one then kills the process, as unhandled).
func StopContext(parent context.Context) (ctx context.Context, stop context.CancelFunc) {
	return signal.NotifyContext(parent, StopSignals...)
}
