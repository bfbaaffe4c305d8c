package config

import (
	"os"
	"regexp"
	"testing"
)

// TestComposeHasNoDefaultSecret: docker-compose.yml must refuse to start
// without GPUBILL_AUTH_SECRET (${VAR:?…}), never fall back to a known key.
func TestComposeHasNoDefaultSecret(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	uses := regexp.MustCompile(`\$\{GPUBILL_AUTH_SECRET(:?[-?=+]?)[^}]*\}`).FindAllSubmatch(b, -1)
	if len(uses) == 0 {
		t.Fatal("docker-compose.yml does not pass GPUBILL_AUTH_SECRET to the services")
	}
	for _, u := range uses {
		if string(u[1]) != ":?" {
			t.Errorf("docker-compose.yml: %s — want ${GPUBILL_AUTH_SECRET:?message} (fail when unset or empty)", u[0])
		}
	}
	if regexp.MustCompile(`(?m)^\s*GPUBILL_AUTH_SECRET:\s*[^$\s]`).Match(b) {
		t.Error("docker-compose.yml hard-codes GPUBILL_AUTH_SECRET")
	}
}
