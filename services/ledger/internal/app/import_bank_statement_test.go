package app

import (
	"bytes"
	"crypto/sha256"
	"strings"
	"testing"
)

// TestSHA256OfIsTheFilesHash: the hash a statement is stored under is the
// file's SHA-256 whatever its length against the chunks (a statement
// imported before is the same file again, not a conflict).
func TestSHA256OfIsTheFilesHash(t *testing.T) {
	for _, n := range []int{0, 1, sha256ChunkBytes - 1, sha256ChunkBytes, sha256ChunkBytes + 1, 3*sha256ChunkBytes + 17} {
		s := strings.Repeat("date,reference,amount,balance\n", n/30+1)[:n]
		want := sha256.Sum256([]byte(s))
		if got := sha256Of(s); !bytes.Equal(got, want[:]) {
			t.Errorf("%d bytes: %x, want %x", n, got, want)
		}
	}
}
