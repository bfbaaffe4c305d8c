// Command ledger runs the ledger service alone (NATS_URL and GPUBILL_AUTH_SECRET
// required; `gpubill dev` runs every service in one process instead).
package main

import (
	"context"
	"os"

	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/services/ledger"
)

func main() { os.Exit(svc.Main("ledger", build)) }

func build(ctx context.Context, d svc.Deps, _ config.Common) (svc.Service, func(), error) {
	lc, err := ledger.LeaseControlConfigFromEnv()
	if err != nil {
		return nil, nil, err
	}
	s, err := ledger.New(ctx, d, ledger.WithLeaseControl(lc))
	return s, nil, err
}
