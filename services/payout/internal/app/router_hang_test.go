package app_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net"
	"testing"
	"time"

	ap "github.com/gpubill/gpubill/pkg/alipay"
	"github.com/gpubill/gpubill/pkg/clock"
	alipayrail "github.com/gpubill/gpubill/services/payout/internal/adapters/alipay"
	"github.com/gpubill/gpubill/services/payout/internal/app"
	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// noRefs is a rail that holds no reference.
type noRefs struct{ name string }

func (n noRefs) Name() string { return n.name }
func (n noRefs) Submit(context.Context, app.Transfer) (app.RailStatus, error) {
	return app.RailStatus{}, errors.New("not here")
}
func (n noRefs) Query(context.Context, string) (app.RailStatus, error) {
	return app.RailStatus{}, app.ErrUnknownReference
}

// The Alipay rail on a gateway that accepts TCP and never answers: a bank
// payout's pre-submit query, asked of the bank rail it was handed to,
// answers "unknown" at once (asked of every rail, it waited for Alipay's
// CallTimeout, 20 s, and answered "unavailable": never submitted); an
// Alipay payout's query still waits, and ends unavailable, never unknown.
func TestHungAlipayGatewayHoldsUpNoBankPayout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var held []net.Conn // accepted, never answered
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	alipay := &alipayrail.Rail{C: &ap.Client{Cfg: ap.Config{AppID: "x", PrivateKey: k, PlatformKey: &k.PublicKey,
		GatewayURL: "http://" + ln.Addr().String()}, Clock: clock.System{}}}
	bank := noRefs{"bank-file"}
	r := app.Router{Default: noRefs{"sandbox"}, ByType: map[string]app.Rail{domain.MethodBank: bank, domain.MethodAlipay: alipay}, Strict: true}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ref := domain.RailReference("po-bank-1", 1)
	start := time.Now()
	_, err = r.QueryOn(ctx, r.RailFor(domain.MethodBank), ref)
	if !errors.Is(err, app.ErrUnknownReference) || time.Since(start) > time.Second {
		t.Fatalf("a bank payout's pre-submit query with Alipay hung: after %v: %v; want unknown at once", time.Since(start).Round(time.Millisecond), err)
	}
	_, err = r.QueryOn(ctx, r.RailFor(domain.MethodAlipay), domain.RailReference("po-ali-1", 1))
	if errors.Is(err, app.ErrUnknownReference) || err == nil {
		t.Fatalf("an Alipay payout's query with Alipay hung: %v; want the outcome unknown", err)
	}
}
