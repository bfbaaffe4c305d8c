package cli_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpubill/gpubill/pkg/auth"
	"github.com/gpubill/gpubill/services/gpubill/internal/cli"
)

// TestTokenCommand: gpubill token prints a token the services accept (role,
// subject, audience), and refuses what they would refuse.
func TestTokenCommand(t *testing.T) {
	const secret = "token-command-test-secret-0123456789abcdef"
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := cli.Main(context.Background(), append([]string{"token", "--data-dir", t.TempDir()}, args...), &out, &errb)
		return code, strings.TrimSpace(out.String()), errb.String()
	}
	for _, tt := range []struct {
		role, sub string
	}{{auth.RoleRenter, "r-001"}, {auth.RoleProvider, "p-001"}, {auth.RoleFinance, ""}, {auth.RoleService, "settlement"}} {
		code, tok, stderr := run("--role", tt.role, "--sub", tt.sub, "--auth-secret", secret)
		if code != 0 {
			t.Fatalf("token --role %s: exit %d %s", tt.role, code, stderr)
		}
		p, err := auth.Verify([]byte(secret), tok)
		if err != nil || p.Role != tt.role || p.Subject != tt.sub {
			t.Fatalf("token --role %s --sub %q verifies as %+v, %v", tt.role, tt.sub, p, err)
		}
	}
	// A person's role without a subject is told that it shares its caller.
	if code, _, stderr := run("--role", auth.RoleFinance, "--auth-secret", secret); code != 0 || !strings.Contains(stderr, "give each person --sub") {
		t.Errorf("token --role finance without --sub: exit %d, stderr %q; want a warning naming --sub", code, stderr)
	}
	if code, _, stderr := run("--role", auth.RoleFinance, "--sub", "alice", "--auth-secret", secret); code != 0 || stderr != "" {
		t.Errorf("token --role finance --sub alice: exit %d, stderr %q; want no warning", code, stderr)
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"renter without --sub", []string{"--role", "renter", "--auth-secret", secret}, "subject"},
		{"short secret", []string{"--role", "finance", "--auth-secret", "short-secret"}, "32"},
		{"unknown role", []string{"--role", "root", "--auth-secret", secret}, "unknown role"},
	} {
		if code, _, stderr := run(tt.args...); code == 0 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%s: exit %d, stderr %q; want a failure naming %q", tt.name, code, stderr, tt.want)
		}
	}
}

// failingWriter refuses every write, as a closed pipe or a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// A command whose answer cannot be written fails: a token that was never
// printed is not a success.
func TestTokenCommandFailsWhenStdoutFails(t *testing.T) {
	var errb bytes.Buffer
	code := cli.Main(context.Background(), []string{"token", "--data-dir", t.TempDir(), "--role", "finance",
		"--auth-secret", "token-command-test-secret-0123456789abcdef"}, failingWriter{}, &errb)
	if code == 0 || !strings.Contains(errb.String(), "no space left on device") {
		t.Fatalf("token into a failing stdout: exit %d, stderr %q; want a failure naming the write error", code, errb.String())
	}
}
