package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/internal/testlog"

	"github.com/cohort-coord/cohort/internal/testcerts"
	"github.com/cohort-coord/cohort/tlsconfig"
)

func load(t *testing.T, f testcerts.Files, log io.Writer) *tlsconfig.Source {
	t.Helper()
	if log == nil {
		log = io.Discard
	}
	s, err := tlsconfig.Load(f.TLSFiles(), slog.New(slog.NewTextHandler(log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// handshake runs a real TLS handshake over 127.0.0.1 and returns the
// server's view of the connection, or the first error of either side.
func handshake(t *testing.T, server, client *tls.Config) (*tls.ConnectionState, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		st  *tls.ConnectionState
		err error
	}
	ch := make(chan result, 1)
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer nc.Close()
		tc := tls.Server(nc, server)
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			ch <- result{err: err}
			return
		}
		// Read the client's byte: with TLS 1.3 a refused client
		// certificate shows on the client only at its first read.
		var b [1]byte
		if _, err := tc.Read(b[:]); err != nil {
			ch <- result{err: err}
			return
		}
		tc.Write(b[:])
		st := tc.ConnectionState()
		ch <- result{st: &st}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	tc := tls.Client(nc, client)
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	cerr := tc.Handshake()
	if cerr == nil {
		_, cerr = tc.Write([]byte{1})
	}
	if cerr == nil {
		var b [1]byte
		_, cerr = tc.Read(b[:])
	}
	if cerr != nil {
		tc.Close()
	}
	r := <-ch
	if cerr != nil {
		return nil, cerr
	}
	return r.st, r.err
}

func TestMutualTLSAndPrincipal(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	srv := load(t, ca.Issue(t, testcerts.Options{CommonName: "node1"}).Write(t, dir, "server", ca), nil)
	cli := load(t, ca.Issue(t, testcerts.Options{CommonName: "alice"}).Write(t, dir, "client", ca), nil)

	st, err := handshake(t, srv.Server(tlsconfig.ClientAuthRequire), cli.Client("localhost"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Version < tls.VersionTLS12 {
		t.Errorf("version %x", st.Version)
	}
	if got := tlsconfig.PrincipalFromConn(st); got != "User:alice" {
		t.Errorf("principal %q, want User:alice", got)
	}
	// request: a client without a certificate is anonymous.
	anon := &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
	st, err = handshake(t, srv.Server(tlsconfig.ClientAuthRequest), anon)
	if err != nil {
		t.Fatal(err)
	}
	if got := tlsconfig.PrincipalFromConn(st); got != tlsconfig.Anonymous {
		t.Errorf("principal %q, want %s", got, tlsconfig.Anonymous)
	}
	// require: the same client is refused.
	if _, err := handshake(t, srv.Server(tlsconfig.ClientAuthRequire), anon); err == nil {
		t.Error("client without a certificate accepted under require")
	}
	if got := tlsconfig.PrincipalFromConn(nil); got != tlsconfig.Anonymous {
		t.Errorf("nil state: %q", got)
	}
}

func TestRefusedCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	other := testcerts.NewCA(t, "other")
	srv := load(t, ca.Issue(t, testcerts.Options{CommonName: "node1"}).Write(t, dir, "server", ca), nil)
	expired := ca.Issue(t, testcerts.Options{CommonName: "old", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	untrusted := other.Issue(t, testcerts.Options{CommonName: "mallory"})
	wrongName := ca.Issue(t, testcerts.Options{CommonName: "x", DNSNames: []string{"elsewhere"}})
	good := load(t, ca.Issue(t, testcerts.Options{CommonName: "alice"}).Write(t, dir, "client", ca), nil)

	var warned testlog.Buffer
	load(t, expired.Write(t, dir, "expired", nil), &warned)
	if !strings.Contains(warned.String(), "the certificate is not valid now") {
		t.Errorf("loading an expired certificate logged no warning: %q", warned.String())
	}
	cases := []struct {
		name   string
		server *tls.Config
		client *tls.Config
		want   string // in the error
	}{
		{"expired client", srv.Server(tlsconfig.ClientAuthRequire), load(t, expired.Write(t, dir, "expired", nil), nil).Client("localhost"), "expired"},
		{"untrusted client", srv.Server(tlsconfig.ClientAuthRequire), load(t, untrusted.Write(t, dir, "untrusted", nil), nil).Client("localhost"), "unknown certificate authority"},
		{"untrusted client under request", srv.Server(tlsconfig.ClientAuthRequest), load(t, untrusted.Write(t, dir, "untrusted", nil), nil).Client("localhost"), "unknown certificate authority"},
		{"expired server", load(t, expired.Write(t, dir, "expired", nil), nil).Server(tlsconfig.ClientAuthNone), good.Client("localhost"), "expired"},
		{"untrusted server", load(t, untrusted.Write(t, dir, "untrusted", nil), nil).Server(tlsconfig.ClientAuthNone), good.Client("localhost"), "unknown authority"},
		{"wrong server name", load(t, wrongName.Write(t, dir, "wrong", nil), nil).Server(tlsconfig.ClientAuthNone), good.Client("localhost"), "not localhost"},
		{"TLS 1.1 client", srv.Server(tlsconfig.ClientAuthNone), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}, "version"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := handshake(t, c.server, c.client)
			if err == nil {
				t.Fatal("handshake succeeded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	f := ca.Issue(t, testcerts.Options{}).Write(t, dir, "n", ca)
	bad := dir + "/bad.pem"
	testcerts.WriteFile(t, bad, []byte("not a pem"))
	cases := []tlsconfig.Files{
		{CertFile: f.Cert},
		{KeyFile: f.Key},
		{CAFile: f.CA},
		{CertFile: f.Cert, KeyFile: dir + "/missing.key"},
		{CertFile: f.Cert, KeyFile: bad},
		{CertFile: f.Key, KeyFile: f.Cert},
		{CertFile: f.Cert, KeyFile: f.Key, CAFile: bad},
	}
	for _, c := range cases {
		if _, err := tlsconfig.Load(c, nil); err == nil {
			t.Errorf("Load(%+v) succeeded", c)
		}
	}
	if _, err := tlsconfig.Load(tlsconfig.Files{}, nil); err == nil {
		t.Error("Load without files succeeded")
	}
	for _, s := range []string{"none", "request", "requested", "require", "REQUIRED", ""} {
		if _, err := tlsconfig.ParseClientAuth(s); err != nil {
			t.Errorf("ParseClientAuth(%q): %v", s, err)
		}
	}
	if _, err := tlsconfig.ParseClientAuth("always"); err == nil {
		t.Error(`ParseClientAuth("always") succeeded`)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRotation: a changed file is picked up by the next handshake without
// a new tls.Config; a broken file keeps the previous certificate and says
// so in the log; SIGHUP reloads at once.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	f := ca.Issue(t, testcerts.Options{CommonName: "first"}).Write(t, dir, "server", ca)
	var log testlog.Buffer
	srv := load(t, f, &log)
	cli := load(t, ca.Issue(t, testcerts.Options{CommonName: "client"}).Write(t, dir, "client", ca), nil)
	server, client := srv.Server(tlsconfig.ClientAuthRequire), cli.Client("localhost")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); srv.Watch(ctx, 20*time.Millisecond) }()
	defer func() { cancel(); <-done }()

	serverCN := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			defer nc.Close()
			tc := tls.Server(nc, server)
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			tc.Handshake()
			io.Copy(io.Discard, tc)
		}()
		tc, err := tls.Dial("tcp", ln.Addr().String(), client)
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		return tc.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if cn := serverCN(); cn != "first" {
		t.Fatalf("server CN %q, want first", cn)
	}

	second := ca.Issue(t, testcerts.Options{CommonName: "second"})
	testcerts.WriteFile(t, f.Key, second.KeyPEM)
	testcerts.WriteFile(t, f.Cert, second.CertPEM)
	waitFor(t, "the rotated certificate", func() bool { return serverCN() == "second" })

	// A broken certificate: the previous one stays, and the log says why.
	testcerts.WriteFile(t, f.Cert, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n"))
	waitFor(t, "the reload error in the log", func() bool {
		return strings.Contains(log.String(), "certificate files do not load; the previous certificate stays in use")
	})
	if cn := serverCN(); cn != "second" {
		t.Fatalf("server CN %q after a broken file, want second", cn)
	}
	if n := strings.Count(log.String(), "do not load"); n != 1 {
		t.Errorf("the same broken file was logged %d times, want once", n)
	}
	if err := srv.Reload(); err == nil {
		t.Error("Reload of a broken file returned no error")
	}

	// SIGHUP with a long poll interval: reloads at once.
	cancel()
	<-done
	// The test's own handler keeps a SIGHUP that arrives before Watch's
	// from ending the process; the signal is repeated until Watch sees one.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { defer close(done2); srv.Watch(ctx2, time.Hour) }()
	defer func() { cancel2(); <-done2 }()
	third := ca.Issue(t, testcerts.Options{CommonName: "third"})
	testcerts.WriteFile(t, f.Key, third.KeyPEM)
	testcerts.WriteFile(t, f.Cert, third.CertPEM)
	waitFor(t, "the certificate after SIGHUP", func() bool {
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		return serverCN() == "third"
	})
	if !strings.Contains(log.String(), "SIGHUP") {
		t.Error("no log line for SIGHUP")
	}
}

// TestCARotation: a client trusts a new CA as soon as the CA file has it.
func TestCARotation(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := testcerts.NewCA(t, "old"), testcerts.NewCA(t, "new")
	srv := load(t, newCA.Issue(t, testcerts.Options{}).Write(t, dir, "server", newCA), nil)
	cf := oldCA.Issue(t, testcerts.Options{CommonName: "c"}).Write(t, dir+"/", "client", nil)
	cf.CA = dir + "/client-ca.crt"
	testcerts.WriteFile(t, cf.CA, oldCA.PEM)
	cli := load(t, cf, nil)
	_, err := handshake(t, srv.Server(tlsconfig.ClientAuthNone), cli.Client("localhost"))
	if err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("err %v, want unknown authority", err)
	}
	testcerts.WriteFile(t, cf.CA, append(append([]byte{}, oldCA.PEM...), newCA.PEM...))
	if err := cli.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, srv.Server(tlsconfig.ClientAuthNone), cli.Client("localhost")); err != nil {
		t.Fatalf("after the CA rotation: %v", err)
	}
}
