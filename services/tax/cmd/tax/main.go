// Command tax runs the tax service alone.
package main

import (
	"context"
	"os"

	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/services/tax"
)

func main() { os.Exit(svc.Main("tax", build)) }

func build(ctx context.Context, d svc.Deps, _ config.Common) (svc.Service, func(), error) {
	s, err := tax.New(ctx, d)
	return s, nil, err
}
