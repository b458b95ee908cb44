package raftfsm

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// takeoverCluster opens three sharded nodes with the default timings
// (2 s heartbeat timeout) and every shard on every node; node1 leads all
// of them. dial, when set, gives the address node1 dials node2 and node3
// at.
func takeoverCluster(t *testing.T, dial func(addr string) string, closed map[*Node]bool) []*Node {
	t.Helper()
	open := func(id string, boot bool, peers map[string]string) *Node {
		cfg := testConfig(t.TempDir())
		def := DefaultConfig()
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = def.HeartbeatTimeout, def.ElectionTimeout, def.LeaderLeaseTimeout
		cfg.NodeID, cfg.Bootstrap, cfg.Shards, cfg.PeerAddrs = id, boot, 4, peers
		if dir := os.Getenv("COHORT_TAKEOVER_LOGS"); dir != "" {
			f, err := os.Create(filepath.Join(dir, id+".log"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			cfg.Logger = slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		n, err := Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !closed[n] {
				n.Close()
			}
		})
		return n
	}
	n2, n3 := open("node2", false, nil), open("node3", false, nil)
	var peers map[string]string
	if dial != nil {
		peers = map[string]string{"node2": dial(n2.Addr()), "node3": dial(n3.Addr())}
	}
	n1 := open("node1", true, peers)
	all := []*Node{n1, n2, n3}
	for _, r := range n1.replicas() {
		waitFor(t, "node1 to lead every group", r.IsLeader)
	}
	for _, n := range []*Node{n2, n3} {
		onLeader(t, "add "+n.ID(), all, func(l *Node) error { return l.AddVoter(n.ID(), n.Addr()) })
	}
	for _, r := range n1.Shards() {
		if _, _, err := n1.ReconcileVoters(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []*Node{n2, n3} {
		for _, r := range n.replicas() {
			waitFor(t, n.ID()+" to follow node1", func() bool { return r.LeaderID() == "node1" })
		}
	}
	return all
}

// A leader whose process is gone (its Raft port refuses connections) is
// replaced long before the heartbeat timeout, in every shard, and the dead
// node's shards spread over the two survivors.
func TestCrashedLeaderIsReplacedBeforeTheHeartbeatTimeout(t *testing.T) {
	closed := map[*Node]bool{}
	nodes := takeoverCluster(t, nil, closed)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	start := time.Now()
	n1.Close()
	closed[n1] = true
	won := map[string]int{}
	for k := range n2.replicas() {
		var leader string
		deadline := time.Now().Add(waitLimit)
		for {
			leader = n2.replicas()[k].LeaderID()
			if leader != "" && leader != "node1" && n3.replicas()[k].LeaderID() == leader {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no new leader of group %d: %s %+v, leader %q; %s %+v, leader %q", k,
					n2.ID(), n2.replicas()[k].Status(), n2.replicas()[k].LeaderID(), n3.ID(), n3.replicas()[k].Status(), n3.replicas()[k].LeaderID())
			}
			time.Sleep(10 * time.Millisecond)
		}
		won[leader]++
	}
	took := time.Since(start)
	if took >= n2.HeartbeatTimeout() {
		t.Fatalf("every group had a new leader after %v, not before the heartbeat timeout (%v)", took, n2.HeartbeatTimeout())
	}
	if won["node2"] == 0 || won["node3"] == 0 {
		t.Fatalf("new leaders %v: the dead node's groups did not spread", won)
	}
	for k, r := range n2.replicas() {
		if f2, f3 := r.ForcedElectionAt(), n3.replicas()[k].ForcedElectionAt(); f2.IsZero() && f3.IsZero() {
			t.Fatalf("group %d: neither survivor forced its election", k)
		}
	}
	t.Logf("new leaders %v after %v", won, took)
}

// A leader that is alive but silent (it reaches its followers through
// proxies that stop forwarding, as a stalled process or a partition looks)
// is not taken for dead: its port accepts, and nobody forces an election.
// Once the proxy forwards again, within the heartbeat timeout, node1 still
// leads every group.
func TestSilentLeaderIsNotTakenForDead(t *testing.T) {
	var paused atomic.Bool
	nodes := takeoverCluster(t, func(addr string) string { return gateProxy(t, addr, &paused) }, map[*Node]bool{})
	n1, n2 := nodes[0], nodes[1]
	paused.Store(true)
	time.Sleep(time.Second)
	paused.Store(false)
	time.Sleep(500 * time.Millisecond)
	for k, r := range n1.replicas() {
		if !r.IsLeader() {
			t.Fatalf("group %d: node1 lost its leadership to a one-second silence", k)
		}
		if f := n2.replicas()[k].ForcedElectionAt(); !f.IsZero() {
			t.Fatalf("group %d: node2 forced an election at %v", k, f)
		}
	}
}

// gateProxy forwards TCP connections to addr, in both directions, and
// holds every byte while paused is set.
func gateProxy(t *testing.T, addr string, paused *atomic.Bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	pump := func(dst, src net.Conn) {
		defer dst.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			for paused.Load() {
				time.Sleep(5 * time.Millisecond)
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if err == io.EOF {
					if tc, ok := dst.(*net.TCPConn); ok {
						tc.CloseWrite()
					}
				}
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			go pump(u, c)
			go pump(c, u)
		}
	}()
	return ln.Addr().String()
}
