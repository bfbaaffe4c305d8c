package postgres

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WebhookKeyBytes is the length of the key webhook secrets are sealed with
// (AES-256-GCM).
const WebhookKeyBytes = 32

// webhookKeyInfo names what a key derived from GPUBILL_WEBHOOK_KEY is for.
const webhookKeyInfo = "gpubill payout webhook secrets v1"

// webhookKeyPassphraseMin is the shortest GPUBILL_WEBHOOK_KEY accepted.
const webhookKeyPassphraseMin = 32

// SecretBox seals webhook secrets at rest: AES-256-GCM, a random 96-bit
// nonce per value (stored before the ciphertext), the webhook id and the
// slot (current or previous secret) as additional data, so a sealed value
// copied to another row or slot does not open. KeyID names the key (a hash,
// not the key) in every sealed row, so a process started with another key
// says so instead of failing each delivery.
type SecretBox struct {
	aead  cipher.AEAD
	KeyID string
}

// NewSecretBox returns the box of a 32-byte key.
func NewSecretBox(key []byte) (*SecretBox, error) {
	if len(key) != WebhookKeyBytes {
		return nil, fmt.Errorf("webhook key: %d bytes, want %d", len(key), WebhookKeyBytes)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	id := sha256.Sum256(append([]byte("gpubill webhook key id\x00"), key...))
	return &SecretBox{aead: aead, KeyID: "wk-" + hex.EncodeToString(id[:8])}, nil
}

// Slots of a webhook's sealed secrets.
const (
	slotCurrent  = "current"
	slotPrevious = "previous"
)

func aad(webhookID, slot string) []byte {
	return []byte("payout.webhooks\x00" + webhookID + "\x00" + slot)
}

// Seal encrypts a webhook's secret for its slot.
func (b *SecretBox) Seal(webhookID, slot, secret string) ([]byte, error) {
	nonce := make([]byte, b.aead.NonceSize(), b.aead.NonceSize()+len(secret)+b.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return b.aead.Seal(nonce, nonce, []byte(secret), aad(webhookID, slot)), nil
}

// errSecretNotOpened is a sealed secret this key cannot open.
var errSecretNotOpened = errors.New("webhook secret does not open with the configured key (GPUBILL_WEBHOOK_KEY_FILE / GPUBILL_WEBHOOK_KEY changed, or the row was altered)")

// Open decrypts a webhook's sealed secret.
func (b *SecretBox) Open(webhookID, slot string, sealed []byte) (string, error) {
	n := b.aead.NonceSize()
	if len(sealed) < n+b.aead.Overhead() {
		return "", errSecretNotOpened
	}
	plain, err := b.aead.Open(nil, sealed[:n], sealed[n:], aad(webhookID, slot))
	if err != nil {
		return "", errSecretNotOpened
	}
	return string(plain), nil
}

// Webhook key sources (what the service logs at start).
const (
	KeySourceFile       = "GPUBILL_WEBHOOK_KEY_FILE"
	KeySourcePassphrase = "GPUBILL_WEBHOOK_KEY (HKDF-SHA256)"
	KeySourceDataDir    = "data dir webhook.key (generated on first start)"
)

// LoadWebhookKey returns the key webhook secrets are sealed with, and where
// it came from: the file GPUBILL_WEBHOOK_KEY_FILE names (32 bytes as 64 hex
// digits or base64), else HKDF-SHA256 of the secret GPUBILL_WEBHOOK_KEY (at
// least 32 characters), else dataDir/webhook.key, made on first start like
// the auth secret ("" dataDir: an error).
func LoadWebhookKey(keyFile, passphrase, dataDir string) (_ []byte, _ string, err error) {
	switch {
	case keyFile != "":
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, "", fmt.Errorf("GPUBILL_WEBHOOK_KEY_FILE: %w", err)
		}
		k, err := parseKey(b)
		if err != nil {
			return nil, "", fmt.Errorf("GPUBILL_WEBHOOK_KEY_FILE %s: %w", keyFile, err)
		}
		return k, KeySourceFile, nil
	case passphrase != "":
		if len(passphrase) < webhookKeyPassphraseMin {
			return nil, "", fmt.Errorf("GPUBILL_WEBHOOK_KEY is %d characters; at least %d are required (e.g. openssl rand -hex 32)", len(passphrase), webhookKeyPassphraseMin)
		}
		k, err := hkdf.Key(sha256.New, []byte(passphrase), nil, webhookKeyInfo, WebhookKeyBytes)
		return k, KeySourcePassphrase, err
	case dataDir != "":
		path := filepath.Join(dataDir, "webhook.key")
		if b, err := os.ReadFile(path); err == nil {
			k, err := parseKey(b)
			if err != nil {
				return nil, "", fmt.Errorf("%s: %w", path, err)
			}
			return k, KeySourceDataDir, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, "", err
		}
		k := make([]byte, WebhookKeyBytes)
		if _, err := rand.Read(k); err != nil {
			return nil, "", err
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, "", err
		}
		// Written aside, then linked into place: of two processes starting
		// together, one key wins and the other reads it whole.
		tmp, err := os.CreateTemp(dataDir, ".webhook.key-*")
		if err != nil {
			return nil, "", err
		}
		defer func() {
			// Linked, not renamed: the aside copy is removed either way; a
			// copy of the key left beside it is said, not kept quietly.
			if rerr := os.Remove(tmp.Name()); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("remove the aside copy of the webhook key: %w", rerr))
			}
		}()
		if _, err := tmp.WriteString(hex.EncodeToString(k) + "\n"); err != nil {
			tmp.Close()
			return nil, "", err
		}
		if err := tmp.Close(); err != nil {
			return nil, "", err
		}
		if err := os.Chmod(tmp.Name(), 0o600); err != nil {
			return nil, "", err
		}
		if err := os.Link(tmp.Name(), path); errors.Is(err, os.ErrExist) {
			return LoadWebhookKey("", "", dataDir)
		} else if err != nil {
			return nil, "", err
		}
		return k, KeySourceDataDir, nil
	}
	return nil, "", errors.New("no webhook key: set GPUBILL_WEBHOOK_KEY_FILE or GPUBILL_WEBHOOK_KEY")
}

// parseKey reads 32 bytes written as hex or base64.
func parseKey(b []byte) ([]byte, error) {
	s := strings.TrimSpace(string(b))
	if k, err := hex.DecodeString(s); err == nil && len(k) == WebhookKeyBytes {
		return k, nil
	}
	if k, err := base64.StdEncoding.DecodeString(s); err == nil && len(k) == WebhookKeyBytes {
		return k, nil
	}
	return nil, fmt.Errorf("want %d bytes as %d hex digits or base64 (e.g. openssl rand -hex 32)", WebhookKeyBytes, 2*WebhookKeyBytes)
}
