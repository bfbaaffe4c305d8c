package testkit

import (
	"context"
	"testing"

	"github.com/gpubill/gpubill/pkg/tempdev"
)

// NewTemporal starts a real Temporal dev server (bin/temporal, in-memory
// store) for one test and returns its frontend address. The frontend accepts
// TCP slightly before the default namespace is ready: dial with retries.
func NewTemporal(t testing.TB) string {
	t.Helper()
	bin, err := tempdev.FindBinary()
	if err != nil {
		t.Fatal(err)
	}
	s, err := tempdev.Start(context.Background(), bin, "127.0.0.1:0", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s.Address
}

// FreePort returns a free TCP port on 127.0.0.1.
func FreePort() (int, error) { return tempdev.FreePort() }
