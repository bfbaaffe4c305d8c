package domain_test

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/gpubill/gpubill/pkg/money"
	"github.com/gpubill/gpubill/services/ledger/internal/domain"
)

// camtDepthMax mirrors the parser's bound on element nesting.
const camtDepthMax = 64

// A camt.053's XML is read as it is: an entity the document declares is
// not expanded (a billion laughs is an undefined entity), and elements
// nested deeper than any statement's are refused, naming the line, before
// the decoder's stack of open elements grows with them: it kept each, 64
// bytes and more of heap for every 3 bytes of "<a>" (the 64 MiB a
// statement may be: 1.4 GB), wherever in the document they were.
func TestCamt053XMLIsBounded(t *testing.T) {
	b, err := os.ReadFile("testdata/camt053_cny.xml")
	if err != nil {
		t.Fatal(err)
	}
	good := string(b)
	laughs := `<?xml version="1.0"?>
<!DOCTYPE Document [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
`
	deep := func(n int) string { return strings.Repeat("<a>", n) + strings.Repeat("</a>", n) }
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"entity", `<?xml version="1.0" encoding="UTF-8"?>` + "\n", laughs, ""},
		{"entity used", `<NtryRef>1</NtryRef>`, `<NtryRef>&lol2;</NtryRef>`, "invalid character entity &lol2;"},
		{"nested in an entry at the bound", `<NtryRef>1</NtryRef>`, `<NtryRef>1</NtryRef><SplmtryData>` + deep(camtDepthMax-5) + `</SplmtryData>`, ""},
		{"nested in an entry", `<NtryRef>1</NtryRef>`, `<NtryRef>1</NtryRef>` + deep(camtDepthMax), "Stmt/Ntry[0] (line 20): nested deeper than 64 elements"},
		{"nested before the statement", `<Stmt>`, deep(500_000) + `<Stmt>`, "XML (line 5): nested deeper than 64 elements"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			give := strings.Replace(good, tc.old, tc.new, 1)
			if give == good {
				t.Fatal("the edit changed nothing")
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := domain.ParseStatement(domain.StatementCamt053, "", "", money.MustLookup("CNY"), give)
			runtime.ReadMemStats(&after)
			t.Logf("%d bytes: %.1f MiB allocated", len(give), float64(after.TotalAlloc-before.TotalAlloc)/(1<<20))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want %q", err, tc.want)
			}
		})
	}
}
