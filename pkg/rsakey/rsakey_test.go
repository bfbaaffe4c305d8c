package rsakey

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"testing"
)

func TestSignVerifyAndParse(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, BitsMin)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pkix, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, der := range [][]byte{x509.MarshalPKCS1PrivateKey(key), pkcs8} {
		k, err := ParsePrivateKey(der, "RSA2")
		if err != nil || !k.Equal(key) {
			t.Fatalf("private key: %v", err)
		}
	}
	for _, der := range [][]byte{pkix, x509.MarshalPKCS1PublicKey(&key.PublicKey)} {
		k, err := ParsePublicKey(der, "RSA2")
		if err != nil || !k.Equal(&key.PublicKey) {
			t.Fatalf("public key: %v", err)
		}
	}
	sig, err := Sign(key, []byte("message"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(&key.PublicKey, []byte("message"), sig); err != nil {
		t.Fatalf("own signature: %v", err)
	}
	if err := Verify(&key.PublicKey, []byte("messagE"), sig); !errors.Is(err, ErrMismatch) {
		t.Fatalf("altered message: %v, want ErrMismatch", err)
	}
	if err := Verify(&key.PublicKey, []byte("message"), "%%"); !errors.Is(err, ErrNotBase64) {
		t.Fatalf("not base64: %v, want ErrNotBase64", err)
	}
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePrivateKey(x509.MarshalPKCS1PrivateKey(small), "RSA2"); err == nil {
		t.Fatal("a 1024-bit key was accepted")
	}
}
