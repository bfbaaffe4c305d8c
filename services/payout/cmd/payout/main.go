// Command payout runs the payout service alone.
package main

import (
	"context"
	"os"

	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/services/payout"
)

func main() { os.Exit(svc.Main("payout", build)) }

func build(ctx context.Context, d svc.Deps, _ config.Common) (svc.Service, func(), error) {
	s, err := payout.New(ctx, d)
	return s, nil, err
}
