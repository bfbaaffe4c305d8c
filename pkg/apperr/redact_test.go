package apperr

import (
	"strings"
	"testing"
)

// A configured URL an error quotes shows where it points and none of the
// credentials it may carry.
func TestRedactURL(t *testing.T) {
	for _, tt := range []struct {
		give, want string
	}{
		{"https://hooks.example", "https://hooks.example"},
		{"https://hooks.example/", "https://hooks.example/"},
		{"https://user:s3cret@hooks.example:8443", "https://xxxxx:xxxxx@hooks.example:8443"},
		{"nats://s3cret@nats-1:4222", "nats://xxxxx@nats-1:4222"},
		{"https://hooks.example/services/T0/B0/s3cret", "https://hooks.example/xxxxx"},
		{"https://hooks.example?token=s3cret", "https://hooks.example?xxxxx"},
		{"https://hooks.example/#access_token=s3cret", "https://hooks.example/#xxxxx"},
		{"user:s3cret@hooks.example", "(unparsable URL, not shown)"},
		{"https://hooks.example:port/?token=s3cret", "(unparsable URL, not shown)"},
		{"https://hooks.example/\x7fs3cret", "(unparsable URL, not shown)"},
	} {
		if got := RedactURL(tt.give); got != tt.want || strings.Contains(got, "s3cret") {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
	if got, want := RedactURLs("nats://a:s3cret@n1:4222, nats://s3cret@n2:4222"), "nats://xxxxx:xxxxx@n1:4222,nats://xxxxx@n2:4222"; got != want {
		t.Errorf("RedactURLs = %q, want %q", got, want)
	}
}
