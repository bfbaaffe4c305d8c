package jsonplain

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// TestAppendStringIsEncodingJSON: the same bytes as json.Marshal for strings
// made of plain runs, the characters encoding/json escapes, control
// characters, non-ASCII, invalid UTF-8 and U+2028; a string Plain passes
// is the string between quotes.
func TestAppendStringIsEncodingJSON(t *testing.T) {
	pieces := []string{"", "a", "bev-1", "2.83", "~ !#$%'()*+,-./:;=?@[]^_`{|}", `"`, `\`, "\n", "\x00", "\x1f", "\x7f", "<", ">", "&",
		"é", "租户", "\xff", "\u2028"}
	r := rand.New(rand.NewPCG(4, 9))
	for i := 0; i < 50_000; i++ {
		var s string
		for n := r.IntN(4); n > 0; n-- {
			s += pieces[r.IntN(len(pieces))]
		}
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AppendString([]byte("x"), s)
		if err != nil || string(got) != "x"+string(want) {
			t.Fatalf("AppendString(%q) = %s, %v; json.Marshal gives %s", s, got, err, want)
		}
		if Plain(s) && string(want) != `"`+s+`"` {
			t.Fatalf("Plain(%q) = %v, json.Marshal gives %s", s, Plain(s), want)
		}
	}
}
