package simulate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpubill/gpubill/pkg/webhook"
)

// Limits of the lease control receiver.
const (
	leaseBodyBytesMax = 64 << 10
	leaseSkewMax      = 5 * time.Minute // a signature older (or newer) than this is refused (replay)
	leaseSecretBytes  = 32
)

// LeaseReceiver is the simulated marketplace scheduler's side of lease
// control: the webhook gpubill's ledger calls (GPUBILL_LEASE_CONTROL_URL)
// to warn about, stop and resume a renter. It checks each call's signature,
// applies each event id once, and the simulation stops sending a stopped
// renter's usage until it may resume.
type LeaseReceiver struct {
	Secret string // hex; the ledger's GPUBILL_LEASE_CONTROL_SECRET

	log *slog.Logger
	ln  net.Listener
	srv *http.Server

	mu      sync.Mutex
	stopped map[string]bool
	applied map[string]bool // event ids
}

// NewLeaseReceiver listens on a free loopback port with a fresh secret.
func NewLeaseReceiver(log *slog.Logger) (*LeaseReceiver, error) {
	b := make([]byte, leaseSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("lease control receiver: %w", err)
	}
	r := &LeaseReceiver{Secret: hex.EncodeToString(b), log: log, ln: ln, stopped: map[string]bool{}, applied: map[string]bool{}}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := r.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("lease control receiver stopped", "err", err)
		}
	}()
	return r, nil
}

// URL is where the ledger posts lease control events.
func (r *LeaseReceiver) URL() string { return "http://" + r.ln.Addr().String() + "/lease-control" }

// Close stops listening.
func (r *LeaseReceiver) Close() {
	if err := r.srv.Shutdown(context.Background()); err != nil {
		r.log.Warn("lease control receiver: shutdown", "err", err)
	}
}

// MarkStopped records a stop the ledger requested before this receiver
// listened (the simulation restarted): the ledger does not announce it
// again, so the renter's GPUs ran on, charged past its credit limit, and
// its rescue top-up never came.
func (r *LeaseReceiver) MarkStopped(renter string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped[renter] = true
}

// Stopped reports whether the renter's GPUs are stopped.
func (r *LeaseReceiver) Stopped(renter string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped[renter]
}

func (r *LeaseReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, leaseBodyBytesMax))
	if err != nil {
		http.Error(w, "read body", http.StatusBadRequest)
		return
	}
	ts, err := strconv.ParseInt(req.Header.Get(webhook.HeaderTimestamp), 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)).Abs() > leaseSkewMax || !webhook.Verify([]byte(r.Secret), ts, body, req.Header.Get(webhook.HeaderSignature)) {
		r.log.Warn("lease control call refused: bad or stale signature")
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	var ev struct {
		EventID     string `json:"event_id"`
		RenterID    string `json:"renter_id"`
		Kind        string `json:"kind"`
		Balance     string `json:"balance"`
		CreditLimit string `json:"credit_limit"`
		Runway      string `json:"runway_hours"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.EventID == "" || ev.RenterID == "" {
		http.Error(w, "bad event", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.applied[ev.EventID] {
		w.WriteHeader(http.StatusNoContent) // a redelivery: already applied
		return
	}
	r.applied[ev.EventID] = true
	switch ev.Kind {
	case "runway_low":
		r.log.Warn("marketplace: renter warned, runway low", "renter", ev.RenterID, "runway_hours", ev.Runway, "balance", ev.Balance)
	case "stop_requested":
		r.stopped[ev.RenterID] = true
		r.log.Warn("marketplace: renter's GPUs stopped, wallet at its credit limit", "renter", ev.RenterID, "balance", ev.Balance,
			"credit_limit", ev.CreditLimit)
	case "resume_allowed":
		delete(r.stopped, ev.RenterID)
		r.log.Info("marketplace: renter's GPUs resumed after a top-up", "renter", ev.RenterID, "balance", ev.Balance)
	default:
		r.log.Warn("marketplace: unknown lease control event", "kind", ev.Kind, "event_id", ev.EventID)
	}
	w.WriteHeader(http.StatusNoContent)
}
