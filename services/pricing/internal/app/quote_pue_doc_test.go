package app

import (
	"os"
	"strings"
	"testing"
)

// The QuoteRequest.provider_pue comment of the proto (what API clients read
// in the generated code and the OpenAPI document) gives the range the quote
// accepts. It said only "≥ 1" while a PUE above 10 is INVALID_ARGUMENT: a
// client reading it sent 12 and was refused.
func TestProviderPUECommentGivesTheBounds(t *testing.T) {
	b, err := os.ReadFile("../../../../proto/gpubill/pricing/v1/pricing.proto")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var comment []string
	for i, l := range lines {
		code, trailing, _ := strings.Cut(strings.TrimSpace(l), "//")
		if strings.TrimSpace(code) != "string provider_pue = 9;" {
			continue
		}
		for k := i - 1; k >= 0 && strings.HasPrefix(strings.TrimSpace(lines[k]), "//"); k-- {
			comment = append([]string{strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[k]), "//"))}, comment...)
		}
		comment = append(comment, strings.TrimSpace(trailing))
	}
	text := strings.Join(comment, " ")
	want := "from " + pueMin.String() + " to " + pueMax.String()
	if !strings.Contains(text, want) || !strings.Contains(text, "INVALID_ARGUMENT") {
		t.Errorf("the provider_pue comment %q does not say %q and what is refused outside (INVALID_ARGUMENT)", text, want)
	}
}
