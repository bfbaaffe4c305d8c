// Package config holds the settings every gpubill process shares (DESIGN §10).
// Each field is both an environment variable and a flag, parsed by kong.
package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/cycles"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/split"
	"github.com/gpubill/gpubill/pkg/taxperiod"
)

// Common is embedded into every command's kong struct.
type Common struct {
	DatabaseURL      string        `name:"database-url" env:"DATABASE_URL" default:"postgres://postgres@127.0.0.1:5432/gpubill?sslmode=disable" help:"PostgreSQL; the database is created if missing."`
	NatsURL          string        `name:"nats-url" env:"NATS_URL" help:"External NATS server, or a cluster's servers comma-separated; unset = embedded JetStream (gpubill dev only)."`
	TemporalAddress  string        `name:"temporal-address" env:"TEMPORAL_ADDRESS" help:"External Temporal frontend; unset = embedded dev server (gpubill dev only)."`
	HTTPAddr         string        `name:"http-addr" env:"GPUBILL_HTTP_ADDR" default:"127.0.0.1:8080" help:"REST listener."`
	GRPCAddr         string        `name:"grpc-addr" env:"GPUBILL_GRPC_ADDR" default:"127.0.0.1:9090" help:"gRPC listener."`
	DataDir          string        `name:"data-dir" env:"GPUBILL_DATA_DIR" default:".gpubill" help:"Embedded servers' data."`
	AuthSecret       string        `name:"auth-secret" env:"GPUBILL_AUTH_SECRET" help:"Token signing key; generated into the data dir on first start when unset."`
	CycleDays        int           `name:"cycle-days" env:"GPUBILL_CYCLE_DAYS" default:"45" help:"Settlement cycle length in days."`
	CycleAnchor      string        `name:"cycle-anchor" env:"GPUBILL_CYCLE_ANCHOR" default:"2026-01-01" help:"First day of the first settlement cycle."`
	CycleGrace       time.Duration `name:"cycle-grace" env:"GPUBILL_CYCLE_GRACE" default:"24h" help:"Grace period after a cycle's end before it closes."`
	LateArrivalDays  string        `name:"late-arrival-days" env:"GPUBILL_LATE_ARRIVAL_DAYS" default:"35" help:"How many days old a usage event's start may be; an older one is rejected (too_late)."`
	TaxTimezone      string        `name:"tax-timezone" env:"GPUBILL_TAX_TIMEZONE" default:"Asia/Shanghai" help:"IANA time zone of the monthly tax periods (tax service and settlement's remittance schedule)."`
	CommissionRates  string        `name:"commission-rates" env:"GPUBILL_COMMISSION_RATES" default:"standard=0.25,pro=0.20,partner=0.15" help:"Platform commission per provider tier (settlement applies it; quotes use it)."`
	CommissionBounds string        `name:"commission-bounds" env:"GPUBILL_COMMISSION_BOUNDS" default:"0.15-0.25" help:"Platform bounds every commission rate must keep (min-max)."`
	StreamMaxBytes   int64         `name:"stream-max-bytes" env:"GPUBILL_STREAM_MAX_BYTES" default:"1073741824" help:"Byte cap of each JetStream stream (PARTY and GPU_MODEL take none)."`
	StreamReplicas   int           `name:"stream-replicas" env:"GPUBILL_STREAM_REPLICAS" default:"1" help:"Replicas of each JetStream stream (in a cluster)."`
	LogLevel         string        `name:"log-level" env:"GPUBILL_LOG_LEVEL" default:"info" enum:"debug,info,warn,error" help:"Log level."`
	Allow            Allow         `embed:"" prefix:"allow-" envprefix:"GPUBILL_ALLOW_" group:"Allowlist (comma-separated CIDRs per role; unset = any address)"`
	APIDocs          string        `name:"api-docs" env:"GPUBILL_API_DOCS" default:"own" enum:"own,all" help:"What /docs and /v1/openapi.json of a service run alone describe: its own API, or all (behind a gateway that routes every service)."`
	TrustedProxies   string        `name:"trusted-proxies" env:"GPUBILL_TRUSTED_PROXIES" help:"CIDRs of reverse proxies whose X-Forwarded-For is believed for the REST client address; unset = X-Forwarded-For ignored."`
}

// Allow holds GPUBILL_ALLOW_<ROLE>: the client addresses a role may call from.
type Allow struct {
	Finance  string `name:"finance" env:"FINANCE" help:"CIDRs finance may call from."`
	Auditor  string `name:"auditor" env:"AUDITOR" help:"CIDRs auditors may call from."`
	Provider string `name:"provider" env:"PROVIDER" help:"CIDRs providers may call from."`
	Renter   string `name:"renter" env:"RENTER" help:"CIDRs renters may call from."`
	Meter    string `name:"meter" env:"METER" help:"CIDRs node agents (meter) may call from."`
	Admin    string `name:"admin" env:"ADMIN" help:"CIDRs admins may call from."`
	Service  string `name:"service" env:"SERVICE" help:"CIDRs the services' internal identity may call from."`
}

// Allowlist parses GPUBILL_ALLOW_<ROLE>; a malformed or empty-but-set entry
// is an error, so a typo never opens a role to every address.
func (c Common) Allowlist() (auth.Allowlist, error) {
	a := c.Allow
	byRole := map[string]string{auth.RoleFinance: a.Finance, auth.RoleAuditor: a.Auditor, auth.RoleProvider: a.Provider,
		auth.RoleRenter: a.Renter, auth.RoleMeter: a.Meter, auth.RoleAdmin: a.Admin, auth.RoleService: a.Service}
	return auth.AllowlistFromEnv(func(name string) string {
		return byRole[strings.ToLower(strings.TrimPrefix(name, auth.AllowEnvPrefix))]
	})
}

// Proxies parses GPUBILL_TRUSTED_PROXIES.
func (c Common) Proxies() ([]netip.Prefix, error) {
	ps, err := auth.ParsePrefixes(c.TrustedProxies)
	if err != nil {
		return nil, fmt.Errorf("GPUBILL_TRUSTED_PROXIES: %w", err)
	}
	return ps, nil
}

// StreamLimits returns the JetStream limits the settings describe (zero,
// as in a Common built in code, is the default).
func (c Common) StreamLimits() (natsx.Limits, error) {
	if c.StreamMaxBytes == 0 {
		c.StreamMaxBytes = natsx.DefaultStreamMaxBytes
	}
	if c.StreamReplicas == 0 {
		c.StreamReplicas = 1
	}
	if c.StreamMaxBytes < streamMaxBytesMin {
		return natsx.Limits{}, fmt.Errorf("GPUBILL_STREAM_MAX_BYTES %d: want at least %d", c.StreamMaxBytes, streamMaxBytesMin)
	}
	if c.StreamReplicas < 1 || c.StreamReplicas > streamReplicasMax {
		return natsx.Limits{}, fmt.Errorf("GPUBILL_STREAM_REPLICAS %d: want 1..%d", c.StreamReplicas, streamReplicasMax)
	}
	return natsx.Limits{MaxBytes: c.StreamMaxBytes, Replicas: c.StreamReplicas}, nil
}

// Bounds of the stream settings (JetStream allows at most 5 replicas).
const (
	streamMaxBytesMin = 64 << 10
	streamReplicasMax = 5
)

// Calendar returns the settlement calendar the settings describe.
func (c Common) Calendar() (cycles.Calendar, error) {
	anchor, err := time.Parse("2006-01-02", c.CycleAnchor)
	if err != nil {
		return cycles.Calendar{}, fmt.Errorf("GPUBILL_CYCLE_ANCHOR %q: want YYYY-MM-DD", c.CycleAnchor)
	}
	if c.CycleDays < 1 || c.CycleDays > 366 {
		return cycles.Calendar{}, fmt.Errorf("GPUBILL_CYCLE_DAYS %d: want 1..366", c.CycleDays)
	}
	if c.CycleGrace < 0 {
		// A negative grace closed each cycle before it ended: usage of
		// its last hours refused or moved to the next cycle.
		return cycles.Calendar{}, fmt.Errorf("GPUBILL_CYCLE_GRACE %s: want 0 or more", c.CycleGrace)
	}
	return cycles.Calendar{Anchor: anchor, LengthDays: c.CycleDays, Grace: c.CycleGrace}, nil
}

// LateArrival is how old a usage event's start may be (DESIGN §2: 35 days,
// configurable); it was a code option only.
// Unset ("", a Common made in code) is the default; a set value must be a
// whole number of days, 1..3660 (0 is refused, not taken as unset).
func (c Common) LateArrival() (time.Duration, error) {
	if c.LateArrivalDays == "" {
		return lateArrivalDefaultDays * 24 * time.Hour, nil
	}
	days, err := strconv.Atoi(strings.TrimSpace(c.LateArrivalDays))
	if err != nil || days < 1 || days > 3660 {
		return 0, fmt.Errorf("GPUBILL_LATE_ARRIVAL_DAYS %q: want a whole number of days in 1..3660", c.LateArrivalDays)
	}
	return time.Duration(days) * 24 * time.Hour, nil
}

// lateArrivalDefaultDays is DESIGN §2's late-arrival limit.
const lateArrivalDefaultDays = 35

// Commission returns the commission configuration (GPUBILL_COMMISSION_RATES
// within GPUBILL_COMMISSION_BOUNDS; unset: split.DefaultCommission). A rate
// outside the bounds is refused, so no process starts with it.
func (c Common) Commission() (split.CommissionPolicy, error) {
	rates, bounds := c.CommissionRates, c.CommissionBounds
	if rates == "" {
		rates = split.CommissionRatesDefault
	}
	if bounds == "" {
		bounds = split.CommissionBoundsDefault
	}
	p, err := split.ParseCommission(rates, bounds)
	if err != nil {
		return split.CommissionPolicy{}, fmt.Errorf("GPUBILL_COMMISSION_RATES / GPUBILL_COMMISSION_BOUNDS: %w", err)
	}
	return p, nil
}

// TaxPeriods returns the calendar of monthly tax periods in
// GPUBILL_TAX_TIMEZONE (unset: taxperiod.DefaultZone). An unknown zone is
// refused, so a process never starts on the wrong months.
func (c Common) TaxPeriods() (taxperiod.Calendar, error) {
	if c.TaxTimezone == "" {
		return taxperiod.Default(), nil
	}
	cal, err := taxperiod.New(c.TaxTimezone)
	if err != nil {
		return taxperiod.Calendar{}, fmt.Errorf("GPUBILL_TAX_TIMEZONE: %w", err)
	}
	return cal, nil
}
