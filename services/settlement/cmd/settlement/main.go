// Command settlement runs the settlement service (and its Temporal worker) alone.
package main

import (
	"context"
	"errors"
	"os"

	"go.temporal.io/sdk/client"

	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/services/settlement"
)

func main() { os.Exit(svc.Main("settlement", build)) }

func build(ctx context.Context, d svc.Deps, cfg config.Common) (svc.Service, func(), error) {
	if cfg.TemporalAddress == "" {
		return nil, nil, errors.New("TEMPORAL_ADDRESS is required when settlement runs alone")
	}
	traced, err := settlement.TemporalInterceptors()
	if err != nil {
		return nil, nil, err
	}
	tc, err := client.DialContext(ctx, client.Options{HostPort: cfg.TemporalAddress, Logger: settlement.TemporalLogger(d.Log), Interceptors: traced})
	if err != nil {
		return nil, nil, err
	}
	s, err := settlement.New(ctx, d, tc, settlement.TaskQueueDefault)
	if err != nil {
		tc.Close()
		return nil, nil, err
	}
	return s, tc.Close, nil
}
