// Command payout runs the payout service (and its Temporal worker) alone.
package main

import (
	"context"
	"errors"
	"os"

	"go.temporal.io/sdk/client"

	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/services/payout"
)

func main() { os.Exit(svc.Main("payout", build)) }

func build(ctx context.Context, d svc.Deps, cfg config.Common) (svc.Service, func(), error) {
	if cfg.TemporalAddress == "" {
		return nil, nil, errors.New("TEMPORAL_ADDRESS is required when payout runs alone")
	}
	pc, err := payout.ConfigFromEnv()
	if err != nil {
		return nil, nil, err
	}
	if err := pc.CheckAlone(); err != nil {
		return nil, nil, err
	}
	traced, err := payout.TemporalInterceptors()
	if err != nil {
		return nil, nil, err
	}
	tc, err := client.DialContext(ctx, client.Options{HostPort: cfg.TemporalAddress, Logger: payout.TemporalLogger(d.Log), Interceptors: traced})
	if err != nil {
		return nil, nil, err
	}
	s, err := payout.New(ctx, d, tc, payout.TaskQueueDefault, pc)
	if err != nil {
		tc.Close()
		return nil, nil, err
	}
	return s, tc.Close, nil
}
