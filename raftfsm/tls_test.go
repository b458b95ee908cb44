package raftfsm

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/internal/testlog"

	"github.com/cohort-coord/cohort/internal/testcerts"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// nodeCert writes a certificate for node id name (DNS name id and
// 127.0.0.1) signed by ca, and loads it with ca as the trusted CA.
func nodeCert(t testing.TB, dir string, ca, trust *testcerts.CA, id string, dnsNames ...string) *tlsconfig.Source {
	t.Helper()
	if len(dnsNames) == 0 {
		dnsNames = []string{id}
	}
	f := ca.Issue(t, testcerts.Options{CommonName: id, DNSNames: dnsNames, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}).Write(t, dir, id, nil)
	f.CA = dir + "/" + id + "-ca.crt"
	testcerts.WriteFile(t, f.CA, trust.PEM)
	return f.Load(t)
}

// proxy forwards every connection to target (a stand-in for the chaos
// suite's fault-injection proxies) and returns its address.
func proxy(t testing.TB, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, u)
			}()
		}
	}()
	return ln.Addr().String()
}

func tlsNode(t testing.TB, id string, src *tlsconfig.Source, bootstrap bool, peers map[string]string, log *slog.Logger) *Node {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.NodeID, cfg.Bootstrap, cfg.TLS, cfg.PeerAddrs = id, bootstrap, src, peers
	slowTimings(&cfg)
	if log != nil {
		cfg.Logger = log
	}
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// slowTimings are twice the production timings: TLS handshakes under the
// race detector on a loaded machine take longer than testConfig's 50 ms
// lease allows.
func slowTimings(cfg *Config) {
	cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
}

// onLeader runs f on whichever of nodes leads until it succeeds: on a
// loaded machine a leader may miss its lease and step down mid-test.
func onLeader(t testing.TB, what string, nodes []*Node, f func(*Node) error) {
	t.Helper()
	var last error
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n.IsLeader() {
				if last = f(n); last == nil {
					return
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, last)
}

func register(t testing.TB, nodes []*Node, id string) {
	t.Helper()
	onLeader(t, "write "+id, nodes, func(n *Node) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return n.Register(ctx, &raftpb.NodeRegister{NodeId: id, RaftAddr: "127.0.0.1:1"})
	})
}

// TestRaftOverTLS: three nodes replicate over TLS; the leader reaches
// node2 through a TCP proxy (PeerAddrs), so the name it verifies is the
// node id, not the proxy's address.
func TestRaftOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "cluster CA")
	n2 := tlsNode(t, "node2", nodeCert(t, dir, ca, ca, "node2"), false, nil, nil)
	n3 := tlsNode(t, "node3", nodeCert(t, dir, ca, ca, "node3"), false, nil, nil)
	n1 := tlsNode(t, "node1", nodeCert(t, dir, ca, ca, "node1"), true, map[string]string{"node2": proxy(t, n2.Addr())}, nil)
	waitFor(t, "node1 to lead", n1.IsLeader)
	all := []*Node{n1, n2, n3}
	for _, n := range []*Node{n2, n3} {
		onLeader(t, "add "+n.ID(), all, func(l *Node) error { return l.AddVoter(n.ID(), n.Addr()) })
	}
	register(t, all, "written-over-tls")
	for _, n := range []*Node{n2, n3} {
		waitFor(t, n.ID()+" to apply the write", func() bool { _, ok := n.FSM.Node("written-over-tls"); return ok })
	}
	if h1, h2, h3 := n1.FSM.Hash(), n2.FSM.Hash(), n3.FSM.Hash(); h1 != h2 || h1 != h3 {
		t.Fatalf("hashes differ: %s %s %s", h1, h2, h3)
	}
	if got := n1.Voters(); len(got) != 3 {
		t.Fatalf("voters %v", got)
	}
	// Another node takes over as leader and replicates to node1 directly.
	onLeader(t, "transfer", all, func(l *Node) error {
		if l != n1 {
			return nil
		}
		return l.TransferLeadership("node2")
	})
	register(t, []*Node{n2, n3}, "written-by-new-leader")
	waitFor(t, "node1 to apply the new leader's write", func() bool { _, ok := n1.FSM.Node("written-by-new-leader"); return ok })
}

// TestRaftRefusesUntrustedNodes: a node whose certificate comes from
// another CA, and a node whose trusted certificate names another node id,
// are added as voters but never receive an entry; the cluster keeps
// committing and logs the refusals.
func TestRaftRefusesUntrustedNodes(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "cluster CA")
	other := testcerts.NewCA(t, "rogue CA")
	var log testlog.Buffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", log.String())
		}
	})
	n1 := tlsNode(t, "node1", nodeCert(t, dir, ca, ca, "node1"), true, nil, logger)
	n2 := tlsNode(t, "node2", nodeCert(t, dir, ca, ca, "node2"), false, nil, logger)
	waitFor(t, "node1 to lead", n1.IsLeader)
	trusted := []*Node{n1, n2}
	onLeader(t, "add node2", trusted, func(l *Node) error { return l.AddVoter("node2", n2.Addr()) })
	// rogue trusts the cluster CA but its own certificate is not from it;
	// impostor's certificate is from the cluster CA but names node9; plain
	// runs Raft without TLS. Each in turn is added as a third voter (the
	// two trusted ones are a majority), and the cluster keeps committing
	// without it.
	plainCfg := testConfig(t.TempDir())
	plainCfg.NodeID, plainCfg.Bootstrap = "plain", false
	slowTimings(&plainCfg)
	plain, err := Open(plainCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	outsiders := []*Node{
		tlsNode(t, "rogue", nodeCert(t, dir, other, ca, "rogue"), false, nil, nil),
		tlsNode(t, "impostor", nodeCert(t, dir, ca, ca, "impostor", "node9"), false, nil, nil),
		plain,
	}
	for _, n := range outsiders {
		onLeader(t, "add "+n.ID(), trusted, func(l *Node) error { return l.AddVoter(n.ID(), n.Addr()) })
		w := "written-with-" + n.ID()
		register(t, trusted, w)
		for _, tn := range trusted {
			waitFor(t, tn.ID()+" to apply "+w, func() bool { _, ok := tn.FSM.Node(w); return ok })
		}
		time.Sleep(300 * time.Millisecond) // heartbeats and retries to the outsider
		if last := n.raft.LastIndex(); last != 0 {
			t.Errorf("%s holds log entries up to %d", n.ID(), last)
		}
		if _, ok := n.FSM.Node(w); ok {
			t.Errorf("%s applied a cluster write", n.ID())
		}
		onLeader(t, "remove "+n.ID(), trusted, func(l *Node) error {
			if err := l.RemoveVoter(context.Background(), n.ID()); err != nil && !errors.Is(err, ErrUnknownNode) {
				return err
			}
			return nil
		})
	}
	if got := n1.Voters(); len(got) != 2 {
		t.Fatalf("voters after the outsiders: %v", got)
	}
	waitFor(t, "the refusals in the log", func() bool {
		s := log.String()
		return strings.Contains(s, "certificate is valid for node9, not impostor") && strings.Contains(s, "unknown authority")
	})
}
