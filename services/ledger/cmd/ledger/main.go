// Command ledger runs the ledger service alone (NATS_URL and GPUBILL_AUTH_SECRET
// required; `gpubill dev` runs every service in one process instead).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/gpubill/gpubill/pkg/cmdline"
	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/services/ledger"
)

func main() {
	// Lease control's settings come from the environment only: refused
	// before anything starts, a usage error as the shared settings are.
	lc, err := ledger.LeaseControlConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger:", err)
		os.Exit(cmdline.ExitUsage)
	}
	os.Exit(svc.Main("ledger", func(ctx context.Context, d svc.Deps, _ config.Common) (svc.Service, func(), error) {
		s, err := ledger.New(ctx, d, ledger.WithLeaseControl(lc))
		return s, nil, err
	}))
}
