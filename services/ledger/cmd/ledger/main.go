// Command ledger runs the ledger service alone (NATS_URL required).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/pkg/clock"
	"github.com/gpubill/gpubill/pkg/config"
	"github.com/gpubill/gpubill/pkg/natsx"
	"github.com/gpubill/gpubill/pkg/obs"
	"github.com/gpubill/gpubill/pkg/pg"
	"github.com/gpubill/gpubill/pkg/server"
	"github.com/gpubill/gpubill/pkg/svc"
	"github.com/gpubill/gpubill/services/ledger"
)

type cli struct {
	config.Common
}

func main() {
	var c cli
	kong.Parse(&c, kong.Name("ledger"), kong.Description("gpubill ledger service"))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c.Common); err != nil {
		fmt.Fprintln(os.Stderr, "ledger:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config.Common) error {
	log := obs.NewLogger(os.Stderr, c.LogLevel)
	if c.NatsURL == "" {
		return errors.New("NATS_URL is required when the ledger runs alone")
	}
	cal, err := c.Calendar()
	if err != nil {
		return err
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
	nc, js, err := natsx.Connect(c.NatsURL, "ledger")
	if err != nil {
		return err
	}
	defer nc.Close()
	s, err := ledger.New(ctx, svc.Deps{Pool: pool, JS: js, Log: log, Clock: clock.System{}, Calendar: cal})
	if err != nil {
		return err
	}
	srv, err := server.Start(ctx, server.Options{
		GRPCAddr: c.GRPCAddr, HTTPAddr: c.HTTPAddr, Secret: secret, Log: log, Services: []server.Service{s},
		Ready: []server.Check{
			{Name: "database", Check: func(ctx context.Context) error { return pool.Ping(ctx) }},
			{Name: "nats", Check: func(context.Context) error {
				if !nc.IsConnected() {
					return errors.New("not connected")
				}
				return nil
			}},
		},
	})
	if err != nil {
		return err
	}
	log.Info("ledger serving", "grpc", srv.GRPCAddr, "http", srv.HTTPAddr)
	runErr := make(chan error, 1)
	go func() { runErr <- s.Run(ctx) }()
	select {
	case <-ctx.Done():
	case err = <-srv.Err():
	case err = <-runErr:
	}
	srv.Shutdown(context.Background())
	return err
}
