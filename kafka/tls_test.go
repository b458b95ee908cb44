package kafka

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/internal/testlog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/internal/testcerts"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// tlsFixture is a TLS listener with a CA and certificates for its clients.
type tlsFixture struct {
	l      *Listener
	groups *fakeGroups
	log    *testlog.Buffer
	ca     *testcerts.CA
	dir    string
	client *tlsconfig.Source // CN alice
	stop   func()            // stops the listener (also at cleanup)
}

func startTLS(t testing.TB, auth tlsconfig.ClientAuth) *tlsFixture {
	t.Helper()
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "cohort test CA")
	sf := ca.Issue(t, testcerts.Options{CommonName: "node1"}).Write(t, dir, "server", ca)
	src := sf.Load(t)
	client := ca.Issue(t, testcerts.Options{CommonName: "alice"}).Write(t, dir, "alice", ca).Load(t)
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.NodeID = 1
	cfg.TLS = src.Server(auth)
	topics := catalog.New()
	if err := topics.Apply(catalog.CreateTopic{Name: "t", ID: catalog.NewTopicID(), Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	fx := &tlsFixture{groups: &fakeGroups{}, log: &testlog.Buffer{}, ca: ca, dir: dir, client: client}
	l, err := New(cfg, fx.groups, topics, slog.New(slog.NewTextHandler(fx.log, nil)))
	if err != nil {
		t.Fatal(err)
	}
	fx.l = l
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx) }()
	var once sync.Once
	fx.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(fx.stop)
	return fx
}

// dialTLS is dial over TLS with cfg.
func dialTLS(t testing.TB, addr net.Addr, cfg *tls.Config) *rawClient {
	t.Helper()
	nc, err := tls.Dial("tcp", addr.String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, br: bufio.NewReader(nc), fmt: kmsg.NewRequestFormatter(kmsg.FormatterClientID("test-client"))}
}

// serverSidePrincipals are the principals of the listener's open
// connections.
func (fx *tlsFixture) serverSidePrincipals() []string {
	fx.l.mu.Lock()
	defer fx.l.mu.Unlock()
	var out []string
	for c := range fx.l.conns {
		if c.tls != nil {
			out = append(out, tlsconfig.PrincipalFromConn(c.tls))
		}
	}
	return out
}

func TestTLSListenerServesTLSClients(t *testing.T) {
	fx := startTLS(t, tlsconfig.ClientAuthRequest)
	c := dialTLS(t, fx.l.Addr(), fx.client.Client("localhost"))
	r := c.do(&kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse)
	if r.ErrorCode != 0 || len(r.ApiKeys) == 0 {
		t.Fatalf("ApiVersions over TLS: code %d, %d keys", r.ErrorCode, len(r.ApiKeys))
	}
	if got := fx.serverSidePrincipals(); len(got) != 1 || got[0] != "User:alice" {
		t.Fatalf("server-side principals %v, want [User:alice]", got)
	}

	// A real client: franz-go over TLS, without a client certificate
	// (allowed under request), joins through the listener.
	cl, err := kgo.NewClient(kgo.SeedBrokers(fx.l.Addr().String()), kgo.DialTLSConfig(&tls.Config{RootCAs: fx.ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].NodeID != 1 {
		t.Fatalf("metadata brokers %+v", md.Brokers)
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "g", "m", 1
	if _, err := hb.RequestWith(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if fx.groups.count() != 1 {
		t.Fatalf("group core saw %d requests, want the heartbeat", fx.groups.count())
	}
	if st := fx.l.Stats(); st.BadConnections != 0 {
		t.Fatalf("bad connections %d", st.BadConnections)
	}
}

// TestPlaintextClientOnTLSPort: a Kafka request in plaintext is not a TLS
// handshake: the connection is closed and logged, nothing reaches the
// group core, and TLS clients are still served.
func TestPlaintextClientOnTLSPort(t *testing.T) {
	fx := startTLS(t, tlsconfig.ClientAuthNone)
	plain := dial(t, fx.l.Addr())
	plain.send(&kmsg.ApiVersionsRequest{Version: 3})
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group = "g"
	plain.send(hb)
	plain.expectClosed()
	waitUntil(t, "the bad connection count", func() bool { return fx.l.Stats().BadConnections == 1 })
	if !strings.Contains(fx.log.String(), "TLS handshake failed") {
		t.Fatalf("no log line for the plaintext client; log:\n%s", fx.log.String())
	}
	if n := fx.groups.count(); n != 0 || fx.l.Stats().Requests != 0 {
		t.Fatalf("plaintext requests served: core %d, listener %d", n, fx.l.Stats().Requests)
	}
	c := dialTLS(t, fx.l.Addr(), fx.client.Client("localhost"))
	if r := c.do(&kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
		t.Fatalf("TLS client after a plaintext one: code %d", r.ErrorCode)
	}
}

// TestRequiredClientCertificates: under require, a client without a
// certificate, with an expired one or with one from another CA gets a
// closed connection and no request served.
func TestRequiredClientCertificates(t *testing.T) {
	fx := startTLS(t, tlsconfig.ClientAuthRequire)
	other := testcerts.NewCA(t, "other CA")
	load := func(c *testcerts.Cert, name string) *tls.Config {
		f := c.Write(t, fx.dir, name, nil)
		f.CA = fx.dir + "/ca.crt"
		return f.Load(t).Client("localhost")
	}
	cases := map[string]*tls.Config{
		"no certificate": {RootCAs: fx.ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12},
		"expired":        load(fx.ca.Issue(t, testcerts.Options{CommonName: "old", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}), "expired"),
		"untrusted CA":   load(other.Issue(t, testcerts.Options{CommonName: "mallory"}), "mallory"),
	}
	bad := uint64(0)
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			// With TLS 1.3 the client finishes its side of the handshake
			// before the server has checked the certificate; the refusal
			// shows on the first read.
			nc, err := tls.Dial("tcp", fx.l.Addr().String(), cfg)
			if err == nil {
				defer nc.Close()
				c := &rawClient{t: t, nc: nc, br: bufio.NewReader(nc), fmt: kmsg.NewRequestFormatter()}
				// The write may already fail (the server's alert came
				// first); the read must.
				req := &kmsg.ApiVersionsRequest{Version: 3}
				nc.Write(c.fmt.AppendRequest(nil, req, 1))
				if _, err := c.recv(req, 1); err == nil {
					t.Fatal("request answered")
				}
			}
			bad++
			waitUntil(t, "the refusal", func() bool { return fx.l.Stats().BadConnections == bad })
		})
	}
	if fx.l.Stats().Requests != 0 {
		t.Fatalf("%d requests served to refused clients", fx.l.Stats().Requests)
	}
	if n := strings.Count(fx.log.String(), "TLS handshake failed"); n != len(cases) {
		t.Fatalf("%d handshake failures logged, want %d", n, len(cases))
	}
	c := dialTLS(t, fx.l.Addr(), fx.client.Client("localhost"))
	if r := c.do(&kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
		t.Fatalf("trusted client: code %d", r.ErrorCode)
	}
}

// TestTLSHandshakeStopsWithTheListener: a client that connects and sends
// nothing does not keep Serve from returning.
func TestTLSHandshakeStopsWithTheListener(t *testing.T) {
	fx := startTLS(t, tlsconfig.ClientAuthNone)
	nc, err := net.Dial("tcp", fx.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	waitUntil(t, "the accept", func() bool { return fx.l.Stats().Accepted == 1 })
	start := time.Now()
	fx.stop()
	if d := time.Since(start); d > TLSHandshakeTimeout/2 {
		t.Fatalf("stopping the listener took %v", d)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := io.ReadAll(nc); err != nil || len(n) != 0 {
		t.Fatalf("read %d bytes, %v; want a closed connection", len(n), err)
	}
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A client that connects and leaves before the TLS handshake (a TCP health
// check) is no warning: the line goes to DEBUG, while a plaintext client
// after it is still logged.
func TestLeavingBeforeHandshakeNotWarned(t *testing.T) {
	fx := startTLS(t, tlsconfig.ClientAuthNone)
	nc, err := net.Dial("tcp", fx.l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	waitUntil(t, "the closed connection counted", func() bool { return fx.l.Stats().BadConnections == 1 })
	plain := dial(t, fx.l.Addr())
	plain.send(&kmsg.ApiVersionsRequest{Version: 3})
	plain.expectClosed()
	waitUntil(t, "the plaintext connection counted", func() bool { return fx.l.Stats().BadConnections == 2 })
	if n := strings.Count(fx.log.String(), "TLS handshake failed"); n != 1 || !strings.Contains(fx.log.String(), "first record does not look like a TLS handshake") {
		t.Fatalf("%d handshake failures logged at INFO and above, want the plaintext client's only:\n%s", n, fx.log.String())
	}
}
