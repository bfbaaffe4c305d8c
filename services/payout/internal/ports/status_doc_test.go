package ports

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpubill/gpubill/services/payout/internal/domain"
)

// The Payout.status comment of the proto (what API clients read in the
// generated code and the OpenAPI document) names every status a payout
// can take. settled_outside was missing: a client switching over the
// documented statuses did not handle it.
func TestPayoutStatusCommentNamesEveryStatus(t *testing.T) {
	b, err := os.ReadFile("../../../../proto/gpubill/payout/v1/payout.proto")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	i := strings.Index(src, "\nmessage Payout {")
	if i < 0 {
		t.Fatal("message Payout not found in payout.proto")
	}
	body := src[i:]
	j := strings.Index(body, "\n  string status = ")
	if j < 0 {
		t.Fatal("Payout.status not found in payout.proto")
	}
	// The comment lines right above the field.
	lines := strings.Split(body[:j], "\n")
	var comment []string
	for k := len(lines) - 1; k >= 0 && strings.HasPrefix(strings.TrimSpace(lines[k]), "//"); k-- {
		comment = append(comment, strings.TrimPrefix(strings.TrimSpace(lines[k]), "//"))
	}
	slices.Reverse(comment)
	named := regexp.MustCompile(`[a-z_]+`).FindAllString(strings.Join(comment, " "), -1)
	for _, s := range domain.Statuses() {
		if !slices.Contains(named, s) {
			t.Errorf("the Payout.status comment %q does not name status %s", strings.Join(comment, " "), s)
		}
	}
	if len(comment) == 0 {
		t.Error("Payout.status has no comment")
	}
}
