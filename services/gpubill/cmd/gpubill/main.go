// Command gpubill is the single-binary edition of gpubill and its CLI.
package main

import (
	"context"
	"os"

	"github.com/gpubill/gpubill/pkg/cmdline"
	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
)

func main() {
	// SIGHUP too (the SSH session of a restore or a dev stack dropped):
	// unhandled, it killed the process where it stood, a restore between
	// its load and its last step with no word of what to do.
	ctx, stop := cmdline.StopContext(context.Background())
	defer stop()
	os.Exit(cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
