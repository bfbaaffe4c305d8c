// Package svc is the contract between a gpubill service and the process that
// hosts it (its own cmd/<name> or the single-binary `gpubill dev`).
package svc

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"

	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/pkg/taxperiod"
)

// Deps are what the composition root hands every service.
type Deps struct {
	Pool     *pgxpool.Pool       // the service keeps its tables in its own schema
	JS       jetstream.JetStream // streams are ensured by the service at start-up
	Log      *slog.Logger
	Clock    clock.Clock
	Calendar cycles.Calendar
	// TaxPeriods are the monthly tax periods (GPUBILL_TAX_TIMEZONE), shared by
	// the tax service and settlement's remittance; the zero value is
	// taxperiod.DefaultZone.
	TaxPeriods taxperiod.Calendar
	// Commission is the commission configuration (GPUBILL_COMMISSION_RATES):
	// settlement splits with it and pricing's quotes read it, so both use one
	// source; the zero value is split.DefaultCommission.
	Commission split.CommissionPolicy
	// Internal is an authenticated connection to the stack's gRPC API, as the
	// internal service identity (auth.RoleService, never admin),
	// for the few synchronous calls between services (settlement activities →
	// ledger, tax). It connects lazily, so it may be made before the server starts.
	Internal grpc.ClientConnInterface
	// LateArrival is how old a usage event's start may be
	// (GPUBILL_LATE_ARRIVAL_DAYS; metering); zero is the default, 35 days.
	LateArrival time.Duration
	// Streams are the JetStream limits (GPUBILL_STREAM_MAX_BYTES,
	// GPUBILL_STREAM_REPLICAS) a service ensures its streams with; the zero
	// value is the defaults.
	Streams natsx.Limits
}

// Service is a hosted gpubill service: its API plus background loops
// (JetStream consumers, outbox relay) that Run drives until ctx ends.
type Service interface {
	server.Service
	Name() string
	Run(ctx context.Context) error
}

// CommissionPolicy is d.Commission, or split.DefaultCommission when unset.
func (d Deps) CommissionPolicy() split.CommissionPolicy {
	if d.Commission.Rates == nil {
		return split.DefaultCommission()
	}
	return d.Commission
}

// Every runs step now and then every period until ctx ends (a service's
// periodic jobs in Run: the ledger's reports and sweeps, tax's reversal
// check).
func Every(ctx context.Context, period time.Duration, step func()) error {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		step()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
