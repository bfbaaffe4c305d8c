package alipay

import (
	"crypto/rsa"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/gpubill/gpubill/pkg/rsakey"
)

// SignType is the only signature the rail sends and accepts: RSA2, that is
// SHA256withRSA (PKCS #1 v1.5) over the content, base64.
const SignType = "RSA2"

// SignContent is the string the open platform signs: every parameter but
// those in skip (sign; for notifications also sign_type), with a non-empty
// value, as key=value sorted by key and joined with "&", values as they
// are (not URL-encoded).
func SignContent(params url.Values, skip ...string) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		if params.Get(k) == "" || contains(skip, k) {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(params.Get(k))
	}
	return b.String()
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Sign signs content with SHA256withRSA and returns it base64-encoded.
func Sign(key *rsa.PrivateKey, content []byte) (string, error) {
	sig, err := rsakey.Sign(key, content)
	if err != nil {
		return "", fmt.Errorf("alipay sign: %w", err)
	}
	return sig, nil
}

// ErrBadSignature is a signature that does not verify with the key.
var ErrBadSignature = errors.New("alipay: signature does not verify")

// Verify checks a base64 SHA256withRSA signature of content.
func Verify(key *rsa.PublicKey, content []byte, sign string) error {
	switch err := rsakey.Verify(key, content, sign); {
	case errors.Is(err, rsakey.ErrNotBase64):
		return fmt.Errorf("%w: not base64", ErrBadSignature)
	case err != nil:
		return ErrBadSignature
	}
	return nil
}

// ParsePrivateKey reads the app's private key: PEM (PKCS #1 "RSA PRIVATE
// KEY" or PKCS #8 "PRIVATE KEY"), or the bare base64 the open platform's
// key tool writes (PKCS #8 or PKCS #1).
func ParsePrivateKey(b []byte) (*rsa.PrivateKey, error) {
	der, err := derOf(b)
	if err != nil {
		return nil, err
	}
	return rsakey.ParsePrivateKey(der, SignType)
}

// ParsePublicKey reads the platform's public key: PEM ("PUBLIC KEY" PKIX,
// "RSA PUBLIC KEY" PKCS #1) or the bare base64 the open platform shows.
func ParsePublicKey(b []byte) (*rsa.PublicKey, error) {
	der, err := derOf(b)
	if err != nil {
		return nil, err
	}
	return rsakey.ParsePublicKey(der, SignType)
}

func derOf(b []byte) ([]byte, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		return blk.Bytes, nil
	}
	s := strings.Join(strings.Fields(string(b)), "")
	if s == "" {
		return nil, errors.New("key: empty")
	}
	der, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("key: neither PEM nor base64")
	}
	return der, nil
}
