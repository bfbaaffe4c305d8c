package natsx

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

const (
	embeddedMaxStore  = 16 << 30
	embeddedMaxMemory = 256 << 20
)

// RunEmbedded starts an in-process NATS server with JetStream storing under
// storeDir, listening on addr ("127.0.0.1:0" picks a free port).
func RunEmbedded(addr, storeDir string) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("nats addr %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("nats addr %q: %w", addr, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: "gpubill-embedded",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoLog:      true,
		NoSigs:     true,
		MaxPayload: streamMaxMsgSize,
		// Explicit limits: room for every stream's MaxBytes, whatever the disk says.
		JetStreamMaxStore:  embeddedMaxStore,
		JetStreamMaxMemory: embeddedMaxMemory,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(15 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("embedded nats not ready")
	}
	return ns, nil
}
