package wechatpay

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpubill/gpubill/pkg/rsakey"
)

// AuthScheme is the only request signature API v3 takes and the signature
// type of every answer and notification: SHA256withRSA (PKCS #1 v1.5) with
// a 2048-bit key or more.
const AuthScheme = "WECHATPAY2-SHA256-RSA2048"

// Headers of a signed answer or notification.
const (
	HeaderSerial    = "Wechatpay-Serial"
	HeaderTimestamp = "Wechatpay-Timestamp"
	HeaderNonce     = "Wechatpay-Nonce"
	HeaderSignature = "Wechatpay-Signature"
	HeaderSigType   = "Wechatpay-Signature-Type"
	HeaderRequestID = "Request-ID"
)

// Algorithm is the encryption of a notification's resource.
const Algorithm = "AEAD_AES_256_GCM"

// SkewMax is how far a signed timestamp may be from now (WeChat Pay asks
// the merchant to refuse answers and notifications older than 5 minutes;
// the platform refuses requests likewise).
const SkewMax = 5 * time.Minute

// ErrBadSignature is a signature that does not verify, made with another
// key or certificate, or of another signature type.
var ErrBadSignature = errors.New("wechatpay: signature does not verify")

// ErrStale is a signed timestamp more than SkewMax from now.
var ErrStale = errors.New("wechatpay: timestamp too far from now")

// RequestMessage is what a request signature signs: method, the URL's path
// and query, the timestamp (Unix seconds), the nonce and the body (empty
// for a GET), each followed by "\n".
func RequestMessage(method, pathQuery, timestamp, nonce string, body []byte) []byte {
	return []byte(method + "\n" + pathQuery + "\n" + timestamp + "\n" + nonce + "\n" + string(body) + "\n")
}

// ResponseMessage is what the platform signs in an answer or a
// notification: the Wechatpay-Timestamp and -Nonce headers and the body,
// each followed by "\n".
func ResponseMessage(timestamp, nonce string, body []byte) []byte {
	return []byte(timestamp + "\n" + nonce + "\n" + string(body) + "\n")
}

// Sign signs message with SHA256withRSA and returns it base64-encoded.
func Sign(key *rsa.PrivateKey, message []byte) (string, error) {
	sig, err := rsakey.Sign(key, message)
	if err != nil {
		return "", fmt.Errorf("wechatpay sign: %w", err)
	}
	return sig, nil
}

// Verify checks a base64 SHA256withRSA signature of message.
func Verify(key *rsa.PublicKey, message []byte, signature string) error {
	switch err := rsakey.Verify(key, message, signature); {
	case errors.Is(err, rsakey.ErrNotBase64):
		return fmt.Errorf("%w: not base64", ErrBadSignature)
	case err != nil:
		return ErrBadSignature
	}
	return nil
}

// Authorization is the Authorization header of a request signed with
// signature: the scheme, then mchid, nonce_str, signature, timestamp and
// serial_no (the merchant certificate's serial), each quoted.
func Authorization(mchID, nonce, signature, timestamp, serial string) string {
	return fmt.Sprintf(`%s mchid="%s",nonce_str="%s",signature="%s",timestamp="%s",serial_no="%s"`,
		AuthScheme, mchID, nonce, signature, timestamp, serial)
}

// ParseAuthorization reads an Authorization header: its fields (mchid,
// nonce_str, signature, timestamp, serial_no), all required.
func ParseAuthorization(h string) (map[string]string, error) {
	rest, ok := strings.CutPrefix(h, AuthScheme+" ")
	if !ok {
		return nil, fmt.Errorf("authorization scheme: want %s", AuthScheme)
	}
	out := map[string]string{}
	for _, part := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("authorization field %q", part)
		}
		uq, err := strconv.Unquote(v)
		if err != nil {
			return nil, fmt.Errorf("authorization field %s: not quoted", k)
		}
		out[k] = uq
	}
	for _, k := range []string{"mchid", "nonce_str", "signature", "timestamp", "serial_no"} {
		if out[k] == "" {
			return nil, fmt.Errorf("authorization: %s missing", k)
		}
	}
	return out, nil
}

// CheckTimestamp refuses a timestamp (Unix seconds) more than SkewMax from now.
func CheckTimestamp(ts string, now time.Time) error {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not Unix seconds", ErrStale, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > SkewMax || d < -SkewMax {
		return fmt.Errorf("%w: %s is %s from now", ErrStale, ts, d.Round(time.Second))
	}
	return nil
}

// NewNonce is a random 32-character nonce.
func NewNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return strings.ToUpper(hex.EncodeToString(b))
}

// Decrypt opens a notification resource: AEAD_AES_256_GCM with the APIv3
// key, the resource's nonce (12 bytes) and associated_data; ciphertext is
// base64 of the sealed text and its 16-byte tag.
func Decrypt(apiV3Key []byte, associatedData, nonce, ciphertext string) ([]byte, error) {
	ct, err := base64.StdEncoding.DecodeString(ciphertext)
	if err != nil {
		return nil, fmt.Errorf("wechatpay decrypt: ciphertext not base64: %w", err)
	}
	g, err := gcm(apiV3Key)
	if err != nil {
		return nil, err
	}
	if len(nonce) != g.NonceSize() {
		return nil, fmt.Errorf("wechatpay decrypt: nonce of %d bytes, want %d", len(nonce), g.NonceSize())
	}
	pt, err := g.Open(nil, []byte(nonce), ct, []byte(associatedData))
	if err != nil {
		return nil, fmt.Errorf("wechatpay decrypt: %w", ErrBadSignature)
	}
	return pt, nil
}

// Encrypt seals plaintext as Decrypt opens it (the platform's side; the
// fake gateway's notifications).
func Encrypt(apiV3Key []byte, associatedData, nonce string, plaintext []byte) (string, error) {
	g, err := gcm(apiV3Key)
	if err != nil {
		return "", err
	}
	if len(nonce) != g.NonceSize() {
		return "", fmt.Errorf("wechatpay encrypt: nonce of %d bytes, want %d", len(nonce), g.NonceSize())
	}
	return base64.StdEncoding.EncodeToString(g.Seal(nil, []byte(nonce), plaintext, []byte(associatedData))), nil
}

func gcm(key []byte) (cipher.AEAD, error) {
	if len(key) != APIv3KeyLen {
		return nil, fmt.Errorf("wechatpay: APIv3 key of %d bytes, want %d", len(key), APIv3KeyLen)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// APIv3KeyLen is the APIv3 key's length: 32 bytes (AES-256).
const APIv3KeyLen = 32

// EncryptSensitive encrypts a sensitive request field (user_name) with the
// platform's public key: RSA-OAEP with SHA-1 and MGF1-SHA-1, base64, as
// API v3 wants (the request then names the key in Wechatpay-Serial).
func EncryptSensitive(platform *rsa.PublicKey, s string) (string, error) {
	ct, err := rsa.EncryptOAEP(sha1.New(), rand.Reader, platform, []byte(s), nil)
	if err != nil {
		return "", fmt.Errorf("wechatpay encrypt field: %w", err)
	}
	return base64.StdEncoding.EncodeToString(ct), nil
}

// DecryptSensitive is the platform's side of EncryptSensitive.
func DecryptSensitive(key *rsa.PrivateKey, s string) (string, error) {
	ct, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("wechatpay decrypt field: not base64: %w", err)
	}
	pt, err := rsa.DecryptOAEP(sha1.New(), rand.Reader, key, ct, nil)
	if err != nil {
		return "", fmt.Errorf("wechatpay decrypt field: %w", err)
	}
	return string(pt), nil
}

// ParsePrivateKey reads the merchant's API private key (apiclient_key.pem:
// PKCS #8 "PRIVATE KEY", or PKCS #1 "RSA PRIVATE KEY").
func ParsePrivateKey(b []byte) (*rsa.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("private key: not PEM")
	}
	return rsakey.ParsePrivateKey(blk.Bytes, AuthScheme)
}

// ParsePlatformCert reads the platform certificate (PEM CERTIFICATE): its
// RSA public key and its serial as WeChat Pay writes it in Wechatpay-Serial
// (upper-case hex).
func ParsePlatformCert(b []byte, now time.Time) (*rsa.PublicKey, string, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, "", errors.New("platform certificate: not a PEM CERTIFICATE")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, "", fmt.Errorf("platform certificate: %w", err)
	}
	if now.After(c.NotAfter) || now.Before(c.NotBefore) {
		return nil, "", fmt.Errorf("platform certificate %X: valid %s to %s, not now", c.SerialNumber, c.NotBefore.Format(time.DateOnly), c.NotAfter.Format(time.DateOnly))
	}
	k, ok := c.PublicKey.(*rsa.PublicKey)
	if !ok {
		return nil, "", fmt.Errorf("platform certificate: %T key, want RSA", c.PublicKey)
	}
	return k, fmt.Sprintf("%X", c.SerialNumber), rsakey.CheckBits(k.N.BitLen(), AuthScheme)
}

// ParsePublicKey reads the platform's public key (pub_key.pem: PEM
// "PUBLIC KEY"), the certificate's replacement for merchants on WeChat
// Pay's public-key mode.
func ParsePublicKey(b []byte) (*rsa.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, errors.New("public key: not PEM")
	}
	return rsakey.ParsePublicKey(blk.Bytes, AuthScheme)
}
