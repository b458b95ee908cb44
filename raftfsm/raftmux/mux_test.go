package raftmux

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cohort-coord/cohort/internal/testcerts"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, shard := range []uint16{0, 1, 255, 256, 65535} {
		b := AppendHeader([]byte("x"), shard)
		if len(b) != 1+HeaderLen {
			t.Fatalf("header of %d is %d bytes", shard, len(b)-1)
		}
		got, err := DecodeHeader(b[1:])
		if err != nil || got != shard {
			t.Fatalf("DecodeHeader(AppendHeader(%d)) = %d, %v", shard, got, err)
		}
	}
	for _, c := range []struct {
		in   []byte
		want error
	}{
		{nil, ErrShortHeader},
		{[]byte("cR\x01\x00"), ErrShortHeader},
		{[]byte("GET /"), ErrBadMagic},
		{[]byte("\x16\x03\x01\x00\x01"), ErrBadMagic}, // a TLS ClientHello to a plain mux
		{[]byte("cR\x02\x00\x01"), ErrBadVersion},
	} {
		if _, err := DecodeHeader(c.in); !errors.Is(err, c.want) {
			t.Errorf("DecodeHeader(%q) = %v, want %v", c.in, err, c.want)
		}
	}
}

// FuzzDecodeHeader: the decoder never panics, and accepts exactly the
// headers AppendHeader writes.
func FuzzDecodeHeader(f *testing.F) {
	f.Add(AppendHeader(nil, 7))
	f.Add([]byte("cR\x01"))
	f.Add([]byte("\x16\x03\x01\x02\x00\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		shard, err := DecodeHeader(b)
		if err != nil {
			if len(b) >= HeaderLen && bytes.Equal(b[:HeaderLen], AppendHeader(nil, shard)) {
				t.Fatalf("refused a well-formed header %x: %v", b[:HeaderLen], err)
			}
			return
		}
		if !bytes.Equal(AppendHeader(nil, shard), b[:HeaderLen]) {
			t.Fatalf("accepted %x as shard %d", b[:HeaderLen], shard)
		}
	})
}

func newMux(t *testing.T, cfg Config) *Mux {
	t.Helper()
	m, err := Listen("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// expectClosed fails unless the mux closes c within d.
func expectClosed(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v", d)
	}
	if err == nil {
		t.Fatal("read data from a refused connection")
	}
}

func waitStat(t *testing.T, m *Mux, what string, get func(Stats) uint64, want uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for get(m.Stats()) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d, want %d (%+v)", what, get(m.Stats()), want, m.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDialReachesItsShard(t *testing.T) {
	m := newMux(t, Config{})
	a, _ := m.Shard(1)
	b, _ := m.Shard(2)
	if _, err := m.Shard(2); !errors.Is(err, ErrShardInUse) {
		t.Fatalf("second Shard(2): %v", err)
	}
	addr := raft.ServerAddress(m.Addr().String())
	for _, l := range []*Layer{a, b} {
		c, err := l.Dial(addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte{byte(l.Shard())}); err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 1)
		if _, err := io.ReadFull(s, got); err != nil || got[0] != byte(l.Shard()) {
			t.Fatalf("shard %d accepted %v, %v", l.Shard(), got, err)
		}
		c.Close()
		s.Close()
	}
	waitStat(t, m, "Accepted", func(s Stats) uint64 { return s.Accepted }, 2)
	if st := m.Stats(); st.Dialed != 2 || st.Frames != 2 {
		t.Fatalf("stats %+v", st)
	}
	// A closed layer refuses its shard, and the id can be registered again.
	b.Close()
	if _, err := b.Accept(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	c, err := a.mux.dial(2, addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	expectClosed(t, c, 2*time.Second)
	waitStat(t, m, "RefusedShard", func(s Stats) uint64 { return s.RefusedShard }, 1)
	if _, err := m.Shard(2); err != nil {
		t.Fatalf("Shard(2) after its layer closed: %v", err)
	}
}

func TestBadConnectionsAreClosedAndCounted(t *testing.T) {
	m := newMux(t, Config{HeaderTimeout: 300 * time.Millisecond})
	if _, err := m.Shard(0); err != nil {
		t.Fatal(err)
	}
	dial := func(send []byte) net.Conn {
		c, err := net.Dial("tcp", m.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(send); err != nil {
			t.Fatal(err)
		}
		return c
	}
	expectClosed(t, dial([]byte("GET / HTTP/1.1\r\n\r\n")), 2*time.Second)
	waitStat(t, m, "RefusedHeader", func(s Stats) uint64 { return s.RefusedHeader }, 1)
	expectClosed(t, dial(AppendHeader(nil, 9)), 2*time.Second)
	waitStat(t, m, "RefusedShard", func(s Stats) uint64 { return s.RefusedShard }, 1)
	start := time.Now()
	silent, partial := dial(nil), dial([]byte("cR"))
	expectClosed(t, silent, 3*time.Second)
	expectClosed(t, partial, 3*time.Second)
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("a slow header was cut after %v, before HeaderTimeout", d)
	}
	waitStat(t, m, "RefusedTimeout", func(s Stats) uint64 { return s.RefusedTimeout }, 2)
	if st := m.Stats(); st.Accepted != 0 || st.RefusedTLS != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Close does not wait for a connection's header.
	dial(nil)
	done := make(chan struct{})
	go func() { m.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close waited for a silent connection")
	}
}

func TestTLSRefusesPlainAndUntrustedPeers(t *testing.T) {
	ca := testcerts.NewCA(t, "raftmux-ca")
	dir := t.TempDir()
	src := ca.Issue(t, testcerts.Options{CommonName: "node"}).Write(t, dir, "node", ca).Load(t)
	m := newMux(t, Config{TLS: src, HeaderTimeout: 2 * time.Second})
	l, _ := m.Shard(3)

	// A plain peer's header is not a ClientHello.
	c, err := net.Dial("tcp", m.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(AppendHeader(nil, 3))
	expectClosed(t, c, 3*time.Second)
	waitStat(t, m, "RefusedTLS", func(s Stats) uint64 { return s.RefusedTLS }, 1)

	// A peer whose certificate another CA signed.
	other := testcerts.NewCA(t, "other-ca")
	stranger := other.Issue(t, testcerts.Options{CommonName: "stranger"}).TLS(t)
	tc, err := tls.Dial("tcp", m.Addr().String(), &tls.Config{Certificates: []tls.Certificate{stranger}, RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
	if err == nil {
		// TLS 1.3: the client learns of the refusal on its first read.
		defer tc.Close()
		tc.Write(AppendHeader(nil, 3))
		expectClosed(t, tc, 3*time.Second)
	}
	waitStat(t, m, "RefusedTLS", func(s Stats) uint64 { return s.RefusedTLS }, 2)

	// A peer of the cluster gets through.
	peer := newMux(t, Config{TLS: src})
	pl, _ := peer.Shard(3)
	pc, err := pl.Dial(raft.ServerAddress(m.Addr().String()), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	pc.Write([]byte("x"))
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*tls.Conn); !ok {
		t.Fatalf("accepted a %T, want *tls.Conn", s)
	}
	if b, err := io.ReadAll(io.LimitReader(s, 1)); err != nil || string(b) != "x" {
		t.Fatalf("read %q, %v", b, err)
	}
	waitStat(t, m, "Accepted", func(s Stats) uint64 { return s.Accepted }, 1)
	if st := m.Stats(); st.RefusedHeader+st.RefusedShard+st.RefusedTimeout != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestServerNameNamesThePeer: with ServerName, a dialer verifies the
// peer's certificate against the name it returns (a node id), not the
// address dialed.
func TestServerNameNamesThePeer(t *testing.T) {
	ca := testcerts.NewCA(t, "raftmux-ca")
	dir := t.TempDir()
	n2 := ca.Issue(t, testcerts.Options{CommonName: "n2", DNSNames: []string{"n2"}}).Write(t, dir, "n2", ca).Load(t)
	n1 := ca.Issue(t, testcerts.Options{CommonName: "n1", DNSNames: []string{"n1"}}).Write(t, dir, "n1", ca).Load(t)
	server := newMux(t, Config{TLS: n2})
	sl, _ := server.Shard(0)
	addr := raft.ServerAddress(server.Addr().String())

	for _, c := range []struct {
		name string
		ok   bool
	}{{"n2", true}, {"n3", false}, {"", false}} { // "" verifies the host, 127.0.0.1
		dialer := newMux(t, Config{TLS: n1, ServerName: func(a raft.ServerAddress) string {
			if a != addr {
				t.Errorf("ServerName asked about %s", a)
			}
			return c.name
		}})
		l, _ := dialer.Shard(0)
		conn, err := l.Dial(addr, 2*time.Second)
		if (err == nil) != c.ok {
			t.Fatalf("ServerName %q: dial error %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil {
			continue
		}
		conn.Write([]byte("y"))
		s, err := sl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 1)
		if _, err := io.ReadFull(s, got); err != nil || got[0] != 'y' {
			t.Fatalf("read %q, %v", got, err)
		}
		s.Close()
		conn.Close()
	}
	waitStat(t, server, "RefusedTLS", func(s Stats) uint64 { return s.RefusedTLS }, 2)
	waitStat(t, server, "Accepted", func(s Stats) uint64 { return s.Accepted }, 1)
}
