// Package rsakey is the RSA the payment rails share: reading PEM or DER
// keys (PKCS #1, PKCS #8, PKIX) of at least 2048 bits, and SHA256withRSA
// (PKCS #1 v1.5) signatures, base64-encoded, as Alipay and WeChat Pay both
// sign requests, answers and notifications.
package rsakey

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
)

// BitsMin is the smallest key either rail accepts (Alipay's RSA2,
// WECHATPAY2-SHA256-RSA2048).
const BitsMin = 2048

// Errors of Verify: the signature is not base64 (or empty), or it does not
// verify with the key.
var (
	ErrNotBase64 = errors.New("signature: not base64")
	ErrMismatch  = errors.New("signature does not verify")
)

// Sign signs message with SHA256withRSA and returns it base64-encoded.
func Sign(key *rsa.PrivateKey, message []byte) (string, error) {
	h := sha256.Sum256(message)
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, h[:])
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(sig), nil
}

// Verify checks a base64 SHA256withRSA signature of message: ErrNotBase64
// or ErrMismatch when it does not hold.
func Verify(key *rsa.PublicKey, message []byte, signature string) error {
	sig, err := base64.StdEncoding.DecodeString(signature)
	if err != nil || len(sig) == 0 {
		return ErrNotBase64
	}
	h := sha256.Sum256(message)
	if err := rsa.VerifyPKCS1v15(key, crypto.SHA256, h[:], sig); err != nil {
		return ErrMismatch
	}
	return nil
}

// ParsePrivateKey reads a DER private key, PKCS #1 or PKCS #8; scheme names
// the signature scheme in the error of a key under BitsMin.
func ParsePrivateKey(der []byte, scheme string) (*rsa.PrivateKey, error) {
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, CheckBits(k.N.BitLen(), scheme)
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("private key: neither PKCS #1 nor PKCS #8: %w", err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key: %T, want RSA", k)
	}
	return rk, CheckBits(rk.N.BitLen(), scheme)
}

// ParsePublicKey reads a DER public key, PKIX or PKCS #1; scheme names the
// signature scheme in the error of a key under BitsMin.
func ParsePublicKey(der []byte, scheme string) (*rsa.PublicKey, error) {
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		if k1, err1 := x509.ParsePKCS1PublicKey(der); err1 == nil {
			return k1, CheckBits(k1.N.BitLen(), scheme)
		}
		return nil, fmt.Errorf("public key: neither PKIX nor PKCS #1: %w", err)
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("public key: %T, want RSA", k)
	}
	return rk, CheckBits(rk.N.BitLen(), scheme)
}

// CheckBits refuses a key of n bits under BitsMin.
func CheckBits(n int, scheme string) error {
	if n < BitsMin {
		return fmt.Errorf("RSA key of %d bits: %s wants at least %d", n, scheme, BitsMin)
	}
	return nil
}
