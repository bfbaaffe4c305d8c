// Package simulate drives a small GPU marketplace through gpubill's public
// REST API, so a newcomer running `make run` sees money flow: providers,
// renters, a rate card with a night band, deposits, and a steady stream of
// GPU usage.
package simulate

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"
)

// Limits of the simulation.
const (
	leasesPerTick   = 5
	eventsPerLease  = 3
	topUpEveryTicks = 30
	requestTimeout  = 30 * time.Second
	// The thin renter (with a lease control receiver): a small wallet and
	// credit limit, one RTX 4090 lease a tick, so it is warned and stopped
	// within seconds; the marketplace tops it up rescueAfterTicks after it
	// was stopped, and its GPUs resume.
	thinRenter       = "r-004"
	thinName         = "Night-shift Render Studio"
	thinDeposit      = "30.00"
	thinCreditLimit  = "10.00"
	thinTopUp        = "200.00"
	rescueAfterTicks = 15
)

// Config of a simulation run.
type Config struct {
	BaseURL string // e.g. http://127.0.0.1:8080
	Token   string // finance or admin token
	Tick    time.Duration
	Log     *slog.Logger
	Now     func() time.Time
	// Force runs against a stack holding renters or providers the
	// simulation did not create (gpubill simulate --force; gpubill dev,
	// whose stack is its own). Without it such a stack is refused.
	Force bool
	// Lease receives lease control (stop, resume) for the simulated
	// scheduler; nil = no lease control (and no thin renter).
	Lease *LeaseReceiver
}

type provider struct {
	ID, Name, Tier, TaxProfile, Jurisdiction, PUE string
}

var providers = []provider{
	{"p-001", "Shenzhen Render Farm", "standard", "individual", "CN", "1.2"},
	{"p-002", "Hangzhou AI Lab", "pro", "enterprise", "CN", "1.6"},
	{"p-003", "Chengdu GPU Co-op", "partner", "individual", "CN", "1.3"},
	{"p-004", "Beijing Cloud Rigs", "standard", "individual", "CN", "1.1"},
}

var renters = []string{"r-001", "r-002", "r-003"}

var gpuModels = []string{"RTX_4090", "A6000", "H100", "MI300X"}

// Run seeds the marketplace and then sends usage every tick until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &client{base: cfg.BaseURL, token: cfg.Token, http: &http.Client{Timeout: requestTimeout}}
	if !cfg.Force {
		if err := checkOwnStack(ctx, c); err != nil {
			return err
		}
	}
	if err := seed(ctx, c, cfg); err != nil {
		return fmt.Errorf("seed marketplace: %w", err)
	}
	if cfg.Lease != nil {
		if err := seedThin(ctx, c); err != nil {
			return fmt.Errorf("seed thin renter: %w", err)
		}
		if err := thinStoppedBefore(ctx, c, cfg.Lease); err != nil {
			return fmt.Errorf("read the thin renter's lease control: %w", err)
		}
	}
	cfg.Log.Info("simulated marketplace seeded", "providers", len(providers), "renters", len(renters))
	rng := rand.New(rand.NewPCG(uint64(cfg.Now().UnixNano()), 42))
	t := time.NewTicker(cfg.Tick)
	defer t.Stop()
	stoppedFor := 0
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := sendUsage(ctx, c, cfg, rng, tick); err != nil {
			cfg.Log.Warn("simulated usage not sent", "err", err)
		}
		if cfg.Lease != nil {
			stoppedFor = thinTick(ctx, c, cfg, rng, tick, stoppedFor)
		}
		if tick%topUpEveryTicks == 0 {
			for _, r := range renters {
				ref := fmt.Sprintf("sim-topup-%s-%d", r, cfg.Now().Unix()/int64(cfg.Tick.Seconds()*topUpEveryTicks+1))
				if err := c.post(ctx, "/v1/deposits", map[string]any{"renter_id": r, "amount": "5000.00", "currency": "CNY", "external_ref": ref}, nil); err != nil {
					cfg.Log.Warn("simulated top-up failed", "renter", r, "err", err)
				}
			}
		}
	}
}

func seed(ctx context.Context, c *client, cfg Config) error {
	for _, p := range providers {
		body := map[string]any{"provider_id": p.ID, "name": p.Name, "tier": p.Tier, "tax_profile": p.TaxProfile,
			"jurisdiction": p.Jurisdiction, "pue": p.PUE, "currency": "CNY"}
		if err := c.post(ctx, "/v1/providers", body, nil); err != nil && !isConflict(err) {
			return err
		}
	}
	// Payout setup for all but the last provider, whose payouts then wait in
	// action_required (no KYC, no method) as a real unfinished signup would.
	for i, p := range providers[:len(providers)-1] {
		method := map[string]any{"type": "alipay", "account_name": p.Name, "alipay_id": fmt.Sprintf("1380000%04d", 10+i)} // sandbox: paid
		if err := c.do(ctx, http.MethodPut, "/v1/providers/"+p.ID+"/payout-method", method, nil); err != nil {
			return err
		}
		kyc := map[string]any{"status": "verified", "reference": "sim-kyc-" + p.ID}
		if err := c.do(ctx, http.MethodPut, "/v1/providers/"+p.ID+"/kyc", kyc, nil); err != nil {
			return err
		}
	}
	for _, r := range renters {
		body := map[string]any{"renter_id": r, "name": renterName(r), "currency": "CNY", "credit_limit": "0"}
		if err := c.post(ctx, "/v1/renters", body, nil); err != nil && !isConflict(err) {
			return err
		}
	}
	var cards struct {
		RateCards []json.RawMessage `json:"rate_cards"`
	}
	if err := c.get(ctx, "/v1/rate-cards?currency=CNY", &cards); err != nil {
		return err
	}
	if len(cards.RateCards) == 0 {
		card := map[string]any{
			"currency":       "CNY",
			"effective_from": "2026-01-01T00:00:00Z",
			"gpu_prices": []map[string]string{
				{"gpu_model": "RTX_4090", "hourly": "2.80"},
				{"gpu_model": "A6000", "hourly": "3.50"},
				{"gpu_model": "H100", "hourly": "16.00"},
				{"gpu_model": "MI300X", "hourly": "14.50"},
			},
			"time_bands": []map[string]string{
				{"name": "night", "start": "23:00", "end": "07:00", "timezone": "Asia/Shanghai", "multiplier": "0.80"},
			},
		}
		if err := c.post(ctx, "/v1/rate-cards", card, nil); err != nil {
			return err
		}
	}
	for _, r := range renters {
		ref := "sim-initial-" + r
		if err := c.post(ctx, "/v1/deposits", map[string]any{"renter_id": r, "amount": "50000.00", "currency": "CNY", "external_ref": ref}, nil); err != nil {
			return err
		}
	}
	return nil
}

func renterName(id string) string { return "Renter " + id }

// sendUsage starts leasesPerTick new leases in the recent past, each with a
// few consecutive usage events (new lease ids never overlap earlier usage).
func sendUsage(ctx context.Context, c *client, cfg Config, rng *rand.Rand, tick int) error {
	now := cfg.Now().UTC().Truncate(time.Second)
	var events []map[string]any
	for i := 0; i < leasesPerTick; i++ {
		r := renters[rng.IntN(len(renters))]
		if cfg.Lease != nil && cfg.Lease.Stopped(r) {
			continue
		}
		events = append(events, leaseEvents(now, fmt.Sprintf("sim-%d-%d-%d", now.Unix(), tick, i), r,
			providers[rng.IntN(len(providers))].ID, gpuModels[rng.IntN(len(gpuModels))], 1+rng.IntN(4), rng)...)
	}
	return postUsage(ctx, c, cfg, events)
}

// leaseEvents are a lease's few consecutive usage events in the last two
// days; three events end at most 1.5 h after start.
func leaseEvents(now time.Time, lease, renter, provider, model string, count int, rng *rand.Rand) []map[string]any {
	var events []map[string]any
	start := now.Add(-time.Duration(2+rng.IntN(46)) * time.Hour)
	for k := 0; k < eventsPerLease; k++ {
		end := start.Add(time.Duration(5+rng.IntN(25)) * time.Minute)
		events = append(events, map[string]any{
			"id": fmt.Sprintf("%s-e%d", lease, k), "lease_id": lease, "provider_id": provider, "renter_id": renter,
			"gpu_model": model, "gpu_count": count, "start_time": start.Format(time.RFC3339),
			"end_time": end.Format(time.RFC3339), "region": "cn-east", "workload": "training",
		})
		start = end
	}
	return events
}

// seedThin creates the thin renter and its small first deposit.
func seedThin(ctx context.Context, c *client) error {
	body := map[string]any{"renter_id": thinRenter, "name": thinName, "currency": "CNY", "credit_limit": thinCreditLimit}
	if err := c.post(ctx, "/v1/renters", body, nil); err != nil && !isConflict(err) {
		return err
	}
	return c.post(ctx, "/v1/deposits", map[string]any{"renter_id": thinRenter, "amount": thinDeposit, "currency": "CNY",
		"external_ref": "sim-initial-" + thinRenter}, nil)
}

// thinStoppedBefore marks the thin renter stopped when its wallet says the
// ledger stopped it before this run (GET /v1/renters/{id}/wallet).
func thinStoppedBefore(ctx context.Context, c *client, lease *LeaseReceiver) error {
	var w struct {
		Balances []struct {
			Currency     string `json:"currency"`
			LeaseControl string `json:"lease_control"`
		} `json:"balances"`
	}
	if err := c.get(ctx, "/v1/renters/"+thinRenter+"/wallet", &w); err != nil {
		return err
	}
	for _, b := range w.Balances {
		if b.Currency == "CNY" && b.LeaseControl == "stopped" {
			lease.MarkStopped(thinRenter)
		}
	}
	return nil
}

// thinTick runs the thin renter's GPUs while they may run; once stopped
// for rescueAfterTicks ticks, its owner tops the wallet up. It returns how
// many ticks the renter has been stopped.
func thinTick(ctx context.Context, c *client, cfg Config, rng *rand.Rand, tick, stoppedFor int) int {
	if !cfg.Lease.Stopped(thinRenter) {
		now := cfg.Now().UTC().Truncate(time.Second)
		evs := leaseEvents(now, fmt.Sprintf("sim-thin-%d-%d", now.Unix(), tick), thinRenter, providers[0].ID, "RTX_4090", 1, rng)
		if err := postUsage(ctx, c, cfg, evs); err != nil {
			cfg.Log.Warn("simulated usage not sent", "renter", thinRenter, "err", err)
		}
		return 0
	}
	stoppedFor++
	if stoppedFor == rescueAfterTicks {
		ref := fmt.Sprintf("sim-rescue-%s-%d", thinRenter, cfg.Now().UnixNano())
		cfg.Log.Info("marketplace: stopped renter tops its wallet up", "renter", thinRenter, "amount", thinTopUp)
		if err := c.post(ctx, "/v1/deposits", map[string]any{"renter_id": thinRenter, "amount": thinTopUp, "currency": "CNY", "external_ref": ref}, nil); err != nil {
			cfg.Log.Warn("simulated top-up failed", "renter", thinRenter, "err", err)
			return 0 // try again after another rescueAfterTicks
		}
	}
	return stoppedFor
}

func postUsage(ctx context.Context, c *client, cfg Config, events []map[string]any) error {
	if len(events) == 0 {
		return nil
	}
	var res struct {
		Accepted   int               `json:"accepted"`
		Duplicates int               `json:"duplicates"`
		Rejected   []json.RawMessage `json:"rejected"`
	}
	if err := c.post(ctx, "/v1/usage-events", map[string]any{"events": events}, &res); err != nil {
		return err
	}
	if len(res.Rejected) > 0 {
		cfg.Log.Warn("simulated usage rejected", "rejected", len(res.Rejected), "first", string(res.Rejected[0]))
	}
	cfg.Log.Debug("simulated usage sent", "accepted", res.Accepted, "duplicates", res.Duplicates)
	return nil
}

type client struct {
	base, token string
	http        *http.Client
}

type httpError struct {
	code int
	body string
}

func (e *httpError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.code, e.body) }

func isConflict(err error) bool {
	he, ok := err.(*httpError)
	return ok && he.code == http.StatusConflict
}

func (c *client) post(ctx context.Context, path string, body, out any) error {
	return c.do(ctx, http.MethodPost, path, body, out)
}

func (c *client) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, out)
}

func (c *client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: HTTP %d, answer cut short: %w", method, path, resp.StatusCode, err)
	}
	if resp.StatusCode/100 != 2 {
		return &httpError{code: resp.StatusCode, body: string(b)}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}
