// Command pricing runs the pricing service alone.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"
	"golang.org/x/sync/errgroup"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/services/pricing"
)

type cli struct {
	config.Common
}

func main() {
	var c cli
	kong.Parse(&c, kong.Name("pricing"), kong.Description("gpubill pricing: rate cards, rating, quotes."))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, c)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pricing:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c cli) error {
	log := obs.NewLogger(os.Stderr, c.LogLevel)
	cal, err := c.Calendar()
	if err != nil {
		return err
	}
	if c.NatsURL == "" {
		return fmt.Errorf("NATS_URL is required when pricing runs alone")
	}
	secret, err := auth.LoadOrCreateSecret(c.AuthSecret, c.DataDir)
	if err != nil {
		return err
	}
	pool, err := pg.Open(ctx, c.DatabaseURL, 0)
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, js, err := natsx.Connect(c.NatsURL, pricing.Name)
	if err != nil {
		return err
	}
	defer nc.Drain() //nolint:errcheck
	internal, err := svc.NewInternalRouter(secret, c.GRPCAddr)
	if err != nil {
		return err
	}
	defer internal.Close()
	s, err := pricing.New(ctx, svc.Deps{Pool: pool, JS: js, Log: log, Clock: clock.System{}, Calendar: cal, Internal: internal})
	if err != nil {
		return err
	}
	srv, err := server.Start(ctx, server.Options{GRPCAddr: c.GRPCAddr, HTTPAddr: c.HTTPAddr, Secret: secret, Log: log,
		Services: []server.Service{s}, Ready: []server.Check{
			{Name: "database", Check: pool.Ping},
			{Name: "nats", Check: nc.FlushWithContext},
		}})
	if err != nil {
		return err
	}
	log.Info("pricing listening", "grpc", srv.GRPCAddr, "http", srv.HTTPAddr)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.Run(gctx) })
	g.Go(func() error {
		select {
		case err := <-srv.Err():
			return err
		case <-gctx.Done():
			return nil
		}
	})
	err = g.Wait()
	srv.Shutdown(context.WithoutCancel(ctx))
	return err
}
