package domain

import (
	"encoding/json"
	"testing"
)

// AppendJSONStrings writes exactly what encoding/json writes, escapes and
// all (request hashes and stored metadata stay comparable).
func TestAppendJSONStringsIsEncodingJSON(t *testing.T) {
	for _, m := range []map[string]string{nil, {}, {"a": ""},
		{"kind": "usage_charge", "lease_id": "lease-1", "renter_id": "r-1", "charge_id": "ch-1", "gpu_model": "H100,A100", "gpu_hours": "2.25"},
		{"b": "x", "a": "y", "c": "z~ !#$%'()*+,-./:;=?@[]^_`{|}"},
		{"q": `a "quoted" \ back`}, {"h": "<b>&amp;</b>"}, {"u": "ünï\u2028"}, {"c": "tab\there\n"}, {"k\"": "v"}, {"bad": "\xff"},
	} {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendJSONStrings(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", m, got, want)
		}
	}
}

func BenchmarkAppendJSONStrings(b *testing.B) {
	m := map[string]string{"kind": "usage_charge", "lease_id": "lease-123", "renter_id": "r-42", "charge_id": "ch-98765"}
	b.Run("append", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = AppendJSONStrings(buf[:0], m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
