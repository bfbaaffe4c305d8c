package app

import (
	"testing"

	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// The struct-built charge hash is byte for byte the map-built one (stored
// hashes of earlier charges stay comparable).
func TestChargeRequestHashMatchesMap(t *testing.T) {
	for _, f := range [][5]string{{"r-1", "p-1", "cyc-20261112", "USD", "4"}, {"r<&>\"x", "p-\u00e9", "cyc-20261227", "CNY", "0.01"}} {
		want, err := domain.RequestHash("charge", map[string]any{"renter_id": f[0], "provider_id": f[1], "cycle_id": f[2], "currency": f[3], "amount": f[4]})
		if err != nil {
			t.Fatal(err)
		}
		got, err := chargeRequestHash(f[0], f[1], f[2], f[3], f[4])
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%v: hash differs from domain.RequestHash", f)
		}
	}
}
