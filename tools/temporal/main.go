// Command temporal is the Temporal CLI (github.com/temporalio/cli v1.5.1)
// with one more command, `temporal gpubill-dev-server`: the development
// server gpubill's `make run` and its settlement tests start as a child
// process, tuned for settlement's close (one child workflow per provider).
// Every other command is the upstream CLI, unchanged.
//
// It lives in its own module (built with GOWORK=off) so the Temporal
// server's dependency graph never enters the workspace or any other test
// binary.
package main

import (
	"context"
	"os"

	"github.com/temporalio/cli/temporalcli"

	// The CLI pins this sqlite driver version; keep it.
	_ "modernc.org/sqlite"
	// Embedded time zone database as a fallback.
	_ "time/tzdata"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "gpubill-dev-server" {
		os.Exit(devServer(os.Args[2:]))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	temporalcli.Execute(ctx, temporalcli.CommandOptions{})
}
