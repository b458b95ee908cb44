// Package testcerts makes certificate authorities and certificates for
// tests: real X.509 (ECDSA P-256) made with crypto/x509, written to PEM
// files when a test needs files.
package testcerts

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/tlsconfig"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is the CA certificate, PEM-encoded.
	PEM []byte
}

// Cert is an issued certificate with its private key.
type Cert struct {
	X509    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// Options describe a certificate to issue. The zero value is a certificate
// for CN "localhost", valid for localhost and 127.0.0.1 as a server and as a
// client, from a minute ago for a day.
type Options struct {
	CommonName string
	// DNSNames and IPs are the subject alternative names; both empty means
	// localhost and 127.0.0.1.
	DNSNames []string
	IPs      []net.IP
	// NotBefore and NotAfter default to a minute ago and a day from now.
	NotBefore, NotAfter time.Time
}

var serial atomic.Int64

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testcerts: key: %v", err)
	}
	return k
}

func nextSerial() *big.Int { return big.NewInt(time.Now().UnixNano() + serial.Add(1)) }

// NewCA returns a self-signed certificate authority named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"cohort tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatalf("testcerts: CA: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcerts: CA: %v", err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Issue signs a certificate for both server and client use.
func (ca *CA) Issue(t testing.TB, o Options) *Cert {
	t.Helper()
	if o.CommonName == "" {
		o.CommonName = "localhost"
	}
	if len(o.DNSNames) == 0 && len(o.IPs) == 0 {
		o.DNSNames = []string{"localhost"}
		o.IPs = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-time.Minute)
	}
	if o.NotAfter.IsZero() {
		o.NotAfter = time.Now().Add(24 * time.Hour)
	}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: o.CommonName, Organization: []string{"cohort tests"}},
		NotBefore:    o.NotBefore,
		NotAfter:     o.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatalf("testcerts: issue %s: %v", o.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcerts: issue %s: %v", o.CommonName, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("testcerts: key %s: %v", o.CommonName, err)
	}
	return &Cert{
		X509:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
	}
}

// Pool returns a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// TLS returns the certificate as crypto/tls uses it.
func (c *Cert) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM)
	if err != nil {
		t.Fatalf("testcerts: key pair: %v", err)
	}
	return pair
}

// Files are the paths of a certificate, its key and the CA that signed it.
type Files struct {
	Cert, Key, CA string
}

// TLSFiles returns the paths as tlsconfig takes them.
func (f Files) TLSFiles() tlsconfig.Files {
	return tlsconfig.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}
}

// Load loads the files with tlsconfig.Load (without a log), failing t on an
// error.
func (f Files) Load(t testing.TB) *tlsconfig.Source {
	t.Helper()
	src, err := tlsconfig.Load(f.TLSFiles(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// Write writes the certificate and key as name.crt and name.key, and the CA
// as ca.crt, into dir, and returns their paths.
func (c *Cert) Write(t testing.TB, dir, name string, ca *CA) Files {
	t.Helper()
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: filepath.Join(dir, "ca.crt")}
	WriteFile(t, f.Cert, c.CertPEM)
	WriteFile(t, f.Key, c.KeyPEM)
	if ca != nil {
		WriteFile(t, f.CA, ca.PEM)
	}
	return f
}

// WriteFile replaces path with data atomically (a rename), as an operator's
// certificate rotation would.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatalf("testcerts: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("testcerts: %v", err)
	}
}
