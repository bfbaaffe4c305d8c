package testkit

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// BlackholeProxy forwards TCP to upstream until hole is set, then stops
// forwarding without closing anything: a network partition as both ends
// see it (no FIN, no RST; the proxy's kernel still acknowledges what
// arrives, so not even TCP keepalives notice).
func BlackholeProxy(t *testing.T, upstream string) (string, *atomic.Bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var hole atomic.Bool
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			for hole.Load() {
				time.Sleep(50 * time.Millisecond)
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			go pipe(u, c)
			go pipe(c, u)
		}
	}()
	return ln.Addr().String(), &hole
}
