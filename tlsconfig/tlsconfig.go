// Package tlsconfig builds the TLS configurations of cohort's links (the
// Kafka listener, the native API, Raft) from a certificate, a key and a CA
// file, and keeps them current: the files are re-read on SIGHUP and when
// they change on disk, and every new handshake uses what was read last. A
// file that no longer loads keeps the previous certificate and CA in use
// and is logged as an error.
package tlsconfig

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/credentials"
)

// Files names the PEM files a Source reads.
type Files struct {
	// CertFile and KeyFile are this process's certificate (chain) and its
	// private key.
	CertFile, KeyFile string
	// CAFile holds the certificates of the authorities trusted to sign the
	// peers' certificates. Empty: the system roots verify servers, and no
	// client certificate can be verified.
	CAFile string
}

// Enabled reports whether a certificate is configured.
func (f Files) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" }

// Validate reports a half-configured set of files.
func (f Files) Validate() error {
	if f.CertFile == "" && f.KeyFile == "" {
		if f.CAFile != "" {
			return errors.New("tls: a CA file needs a certificate and key file too")
		}
		return nil
	}
	if f.CertFile == "" || f.KeyFile == "" {
		return errors.New("tls: certificate and key file go together")
	}
	return nil
}

// ClientAuth is whether a server asks for client certificates (Kafka's
// ssl.client.auth).
type ClientAuth int

const (
	// ClientAuthNone asks for no client certificate.
	ClientAuthNone ClientAuth = iota
	// ClientAuthRequest asks for one and verifies it if given.
	ClientAuthRequest
	// ClientAuthRequire refuses a client without a trusted certificate.
	ClientAuthRequire
)

// ParseClientAuth reads none, request(ed) or require(d).
func ParseClientAuth(s string) (ClientAuth, error) {
	switch strings.ToLower(s) {
	case "", "none":
		return ClientAuthNone, nil
	case "request", "requested":
		return ClientAuthRequest, nil
	case "require", "required":
		return ClientAuthRequire, nil
	}
	return 0, fmt.Errorf("tls client auth %q: want none, request or require", s)
}

func (a ClientAuth) String() string {
	switch a {
	case ClientAuthRequest:
		return "request"
	case ClientAuthRequire:
		return "require"
	}
	return "none"
}

func (a ClientAuth) tls() tls.ClientAuthType {
	switch a {
	case ClientAuthRequest:
		return tls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// ErrNoCertificate: the peer presented no certificate.
var ErrNoCertificate = errors.New("tls: peer presented no certificate")

// Source holds the certificate and CA last read from its Files.
type Source struct {
	files Files
	log   *slog.Logger

	mu     sync.RWMutex
	cert   *tls.Certificate
	pool   *x509.CertPool // nil: system roots
	loaded [3][]byte      // file contents of the last successful load
	failed [3][]byte      // file contents of the last failed load
	// failedSeen counts the loads in a row that found failed;
	// failedLogged: its error was logged.
	failedSeen   int
	failedLogged bool
}

// Load reads the files once; an error means they do not form a usable
// certificate (and CA).
func Load(files Files, log *slog.Logger) (*Source, error) {
	if err := files.Validate(); err != nil {
		return nil, err
	}
	if !files.Enabled() {
		return nil, errors.New("tls: no certificate file")
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Source{files: files, log: log.With("component", "tls")}
	raw, err := s.read()
	if err != nil {
		return nil, err
	}
	if err := s.install(raw); err != nil {
		return nil, err
	}
	s.warnValidity()
	return s, nil
}

// warnValidity logs a certificate that is not valid now: peers refuse it.
func (s *Source) warnValidity() {
	c := s.Certificate()
	if c == nil || c.Leaf == nil {
		return
	}
	now := time.Now()
	if now.After(c.Leaf.NotAfter) || now.Before(c.Leaf.NotBefore) {
		s.log.Warn("tls: the certificate is not valid now; peers will refuse it", "cert", s.files.CertFile, "not_before", c.Leaf.NotBefore, "not_after", c.Leaf.NotAfter)
	}
}

func (s *Source) read() ([3][]byte, error) {
	var raw [3][]byte
	var err error
	for i, p := range []string{s.files.CertFile, s.files.KeyFile, s.files.CAFile} {
		if p == "" {
			continue
		}
		if raw[i], err = os.ReadFile(p); err != nil {
			return raw, fmt.Errorf("tls: %w", err)
		}
	}
	return raw, nil
}

func (s *Source) install(raw [3][]byte) error {
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return fmt.Errorf("tls: certificate %s with key %s: %w", s.files.CertFile, s.files.KeyFile, err)
	}
	var pool *x509.CertPool
	if s.files.CAFile != "" {
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(raw[2]) {
			return fmt.Errorf("tls: CA file %s holds no PEM certificate", s.files.CAFile)
		}
	}
	s.mu.Lock()
	s.cert, s.pool, s.loaded = &cert, pool, raw
	s.failed, s.failedSeen, s.failedLogged = [3][]byte{}, 0, false
	s.mu.Unlock()
	return nil
}

func same(a, b [3][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// Reload re-reads the files. When they changed and load, new handshakes
// use them; when they do not load, the previous certificate and CA stay in
// use, the error is logged (once per broken content) and returned.
func (s *Source) Reload() error { return s.reload(false) }

// reload is Reload; with settle, a broken content is logged only when the
// next poll still finds it (a rotation that replaces the certificate and
// the key one after the other is briefly a mismatched pair).
func (s *Source) reload(settle bool) error {
	raw, err := s.read()
	if err == nil {
		s.mu.RLock()
		unchanged := same(raw, s.loaded)
		s.mu.RUnlock()
		if unchanged {
			return nil
		}
		err = s.install(raw)
		if err == nil {
			s.log.Info("tls: certificate files reloaded", "cert", s.files.CertFile, "ca", s.files.CAFile, "subject", s.Subject(), "not_after", s.NotAfter())
			s.warnValidity()
			return nil
		}
	}
	s.mu.Lock()
	if same(raw, s.failed) {
		s.failedSeen++
	} else {
		s.failed, s.failedSeen, s.failedLogged = raw, 1, false
	}
	logIt := !s.failedLogged && (!settle || s.failedSeen > 1)
	if logIt {
		s.failedLogged = true
	}
	s.mu.Unlock()
	if logIt {
		s.log.Error("tls: certificate files do not load; the previous certificate stays in use", "cert", s.files.CertFile, "key", s.files.KeyFile, "ca", s.files.CAFile, "err", err)
	}
	return err
}

// Watch reloads the files on SIGHUP and whenever their contents change
// (checked every interval; 0 means every second), until ctx is done.
func (s *Source) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = time.Second
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			s.log.Info("tls: SIGHUP: re-reading certificate files")
			_ = s.reload(false) // logged by reload
		case <-t.C:
			_ = s.reload(true)
		}
	}
}

// Certificate returns the certificate in use.
func (s *Source) Certificate() *tls.Certificate {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cert
}

func (s *Source) roots() *x509.CertPool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pool
}

// Subject is the subject of the certificate in use.
func (s *Source) Subject() string {
	if c := s.Certificate(); c != nil && c.Leaf != nil {
		return c.Leaf.Subject.String()
	}
	return ""
}

// NotAfter is when the certificate in use expires.
func (s *Source) NotAfter() time.Time {
	if c := s.Certificate(); c != nil && c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	return time.Time{}
}

// Server returns a server configuration (TLS 1.2 or newer) that asks for
// client certificates as auth says. Each handshake uses the certificate
// and CA read last. alpn are the application protocols offered ("h2" for
// gRPC; none for Kafka and Raft).
func (s *Source) Server(auth ClientAuth, alpn ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			s.mu.RLock()
			cert, pool := s.cert, s.pool
			s.mu.RUnlock()
			if auth != ClientAuthNone && pool == nil {
				// Without a CA no client certificate verifies: refuse
				// rather than trust the system roots for clients.
				pool = x509.NewCertPool()
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   auth.tls(),
				NextProtos:   alpn,
			}, nil
		},
	}
}

// Client returns a client configuration (TLS 1.2 or newer) that presents
// the certificate in use (also after a reload) and verifies the server
// against the CA. serverName is the name the server's certificate must
// carry; with a name, the CA is the one read last at each handshake.
// Empty means the host dialed, which crypto/tls, franz-go and gRPC fill in
// on their copy of the configuration; the CA is then the one in use when
// Client was called (GRPCClient follows reloads for gRPC).
func (s *Source) Client(serverName string) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.Certificate(), nil
		},
	}
	if serverName == "" {
		cfg.RootCAs = s.roots()
		return cfg
	}
	// The CA may change between handshakes, so the chain is verified here
	// against the current one instead of a fixed RootCAs. (No SNI is sent
	// for an IP address, so the name comes from here, not the state.)
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		return verifyServer(cs, serverName, s.roots())
	}
	return cfg
}

func verifyServer(cs tls.ConnectionState, name string, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return ErrNoCertificate
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		DNSName:       name,
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("tls: server certificate: %w", err)
	}
	return nil
}

// ClientConfig is a client configuration from files for a short-lived
// client (read once, not watched): with a certificate it is Load(files)'s
// Client(""); without one it only verifies the server, against the CA file
// or the system roots.
func ClientConfig(files Files) (*tls.Config, error) {
	if err := files.Validate(); err != nil && files.Enabled() {
		return nil, err
	}
	if files.Enabled() {
		s, err := Load(files, nil)
		if err != nil {
			return nil, err
		}
		return s.Client(""), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if files.CAFile != "" {
		b, err := os.ReadFile(files.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("tls: CA file %s holds no PEM certificate", files.CAFile)
		}
	}
	return cfg, nil
}

// GRPCServer returns gRPC server credentials with client certificates
// required (the native API between nodes and their clients).
func (s *Source) GRPCServer() credentials.TransportCredentials {
	return credentials.NewTLS(s.Server(ClientAuthRequire, "h2"))
}

// GRPCClient returns gRPC client credentials that verify the server
// against the name of the host dialed, with the certificate and CA read
// last at each handshake.
func (s *Source) GRPCClient() credentials.TransportCredentials {
	return &grpcClient{TransportCredentials: credentials.NewTLS(s.Client("")), src: s}
}

// grpcClient makes the configuration of each client handshake afresh.
type grpcClient struct {
	credentials.TransportCredentials
	src *Source
}

func (c *grpcClient) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	host, _, err := net.SplitHostPort(authority)
	if err != nil {
		host = authority
	}
	return credentials.NewTLS(c.src.Client(host)).ClientHandshake(ctx, authority, raw)
}

func (c *grpcClient) Clone() credentials.TransportCredentials {
	return &grpcClient{TransportCredentials: c.TransportCredentials.Clone(), src: c.src}
}

// PeerCommonName is the common name of the peer's verified certificate;
// ok is false when the peer presented none (or cs is nil).
func PeerCommonName(cs *tls.ConnectionState) (cn string, ok bool) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return "", false
	}
	if !cs.HandshakeComplete {
		return "", false
	}
	return cs.PeerCertificates[0].Subject.CommonName, true
}

// Anonymous is the principal of a peer without a certificate.
const Anonymous = "User:ANONYMOUS"

// PrincipalFromConn is the Kafka principal of a TLS connection's peer:
// User:<common name of its certificate>, or User:ANONYMOUS without one.
// Only a certificate the server verified is in cs (ClientAuthRequest or
// ClientAuthRequire).
func PrincipalFromConn(cs *tls.ConnectionState) string {
	cn, ok := PeerCommonName(cs)
	if !ok || cn == "" {
		return Anonymous
	}
	return "User:" + cn
}
