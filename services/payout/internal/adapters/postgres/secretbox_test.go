package postgres

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A sealed secret opens only for its webhook and slot, under its key; each
// seal uses a fresh nonce.
func TestSecretBoxBindsRowAndSlot(t *testing.T) {
	b, err := NewSecretBox(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := b.Seal("wh-1", slotCurrent, "whsec-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.Seal("wh-1", slotCurrent, "whsec-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(sealed, again) || bytes.Contains(sealed, []byte("0123456789")) {
		t.Fatal("seal reuses a nonce or shows the plaintext")
	}
	if got, err := b.Open("wh-1", slotCurrent, sealed); err != nil || got != "whsec-0123456789" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	other, err := NewSecretBox(bytes.Repeat([]byte{2}, 32))
	if err != nil {
		t.Fatal(err)
	}
	for name, open := range map[string]func() (string, error){
		"another webhook": func() (string, error) { return b.Open("wh-2", slotCurrent, sealed) },
		"another slot":    func() (string, error) { return b.Open("wh-1", slotPrevious, sealed) },
		"another key":     func() (string, error) { return other.Open("wh-1", slotCurrent, sealed) },
		"cut short":       func() (string, error) { return b.Open("wh-1", slotCurrent, sealed[:10]) },
	} {
		if _, err := open(); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
	if b.KeyID == other.KeyID || !strings.HasPrefix(b.KeyID, "wk-") {
		t.Errorf("key ids %s, %s", b.KeyID, other.KeyID)
	}
}

// The key comes from GPUBILL_WEBHOOK_KEY_FILE (hex or base64), else from
// GPUBILL_WEBHOOK_KEY (HKDF, the same key every start), else from the data
// dir's webhook.key, made once and read back.
func TestLoadWebhookKeySources(t *testing.T) {
	dir := t.TempDir()
	want := bytes.Repeat([]byte{0xab}, 32)
	hexFile, b64File := filepath.Join(dir, "k.hex"), filepath.Join(dir, "k.b64")
	for f, content := range map[string]string{hexFile: hex.EncodeToString(want) + "\n", b64File: "q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=", filepath.Join(dir, "short"): "abcd"} {
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{hexFile, b64File} {
		if k, src, err := LoadWebhookKey(f, "ignored-passphrase-0123456789abcdef", dir); err != nil || !bytes.Equal(k, want) || src != KeySourceFile {
			t.Errorf("key file %s: %x %s %v", f, k, src, err)
		}
	}
	if _, _, err := LoadWebhookKey(filepath.Join(dir, "short"), "", ""); err == nil {
		t.Error("a 2-byte key file accepted")
	}
	k1, src, err := LoadWebhookKey("", "a-passphrase-of-at-least-32-characters!", "")
	k2, _, err2 := LoadWebhookKey("", "a-passphrase-of-at-least-32-characters!", "")
	if err != nil || err2 != nil || len(k1) != 32 || !bytes.Equal(k1, k2) || src != KeySourcePassphrase {
		t.Errorf("passphrase: %x %x %s %v %v", k1, k2, src, err, err2)
	}
	if _, _, err := LoadWebhookKey("", "too-short", ""); err == nil {
		t.Error("a short passphrase accepted")
	}
	data := filepath.Join(dir, "data")
	d1, src, err := LoadWebhookKey("", "", data)
	d2, _, err2 := LoadWebhookKey("", "", data)
	if err != nil || err2 != nil || len(d1) != 32 || !bytes.Equal(d1, d2) || src != KeySourceDataDir {
		t.Errorf("data dir: %x %x %s %v %v", d1, d2, src, err, err2)
	}
	if fi, err := os.Stat(filepath.Join(data, "webhook.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("webhook.key: %v %v", fi, err)
	}
	if _, _, err := LoadWebhookKey("", "", ""); err == nil {
		t.Error("no key source accepted")
	}
}
