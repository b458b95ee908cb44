package raftfsm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/catalog"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// These tests run on real files and a TCP transport, so they use real time
// (a socket cannot live in a synctest bubble) with short raft timeouts.

func testConfig(dir string) Config {
	cfg := DefaultConfig()
	cfg.NodeID = "node1"
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.Dir = dir
	cfg.Bootstrap = true
	cfg.HeartbeatTimeout = 100 * time.Millisecond
	cfg.ElectionTimeout = 100 * time.Millisecond
	cfg.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.ApplyTimeout = 5 * time.Second
	cfg.Logger = quiet
	return cfg
}

// openLeader opens a single-node cluster on dir and waits until it leads
// and has applied its whole log.
func openLeader(t testing.TB, cfg Config) *Node {
	t.Helper()
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the node to lead", n.IsLeader)
	if err := n.raft.Barrier(waitLimit).Error(); err != nil {
		n.Close()
		t.Fatal(err)
	}
	return n
}

// Group records, offsets, tombstones, topics and nodes written on a real
// data dir are all there, with the same hash, after a restart: first by
// replaying the raft-boltdb log, then from a file snapshot plus the log
// after it.
func TestOpenRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	if HasState(dir) {
		t.Fatal("empty dir reports raft state")
	}
	n := openLeader(t, cfg)
	if nosync := boltNoSync(t, n); nosync {
		t.Fatal("raft-boltdb runs with NoSync: acknowledged writes could be lost on a crash")
	}
	addr := n.Addr()
	ctx := context.Background()

	write := func(n *Node, round int) {
		t.Helper()
		var ws []write
		for i := range 30 {
			g := fmt.Sprintf("g%d", i)
			ws = append(ws, write{group: g, recs: []*pb.Record{groupRecord(g, int32(round), "m1", "m2"),
				offsetRecord(g, "orders", 0, int64(round*100+i)), offsetRecord(g, "orders", 1, int64(round*100+i+1))}})
		}
		ws = append(ws, write{group: "g0", fence: &pb.WriteFence{Generation: int32(round) - 5, MemberId: "m1"}, recs: []*pb.Record{offsetRecord("g0", "orders", 0, -1)}})
		errs := appendAll(t, n.Store, ws)
		for i, err := range errs[:len(errs)-1] {
			if err != nil {
				t.Fatalf("write %s: %v", ws[i].group, err)
			}
		}
		if errs[len(errs)-1] == nil {
			t.Fatal("a stale fence was accepted")
		}
		if err := appendWait(t, n.Store, "g29", nil, groupTombstone("g29"), offsetTombstone("g29", "orders", 1)); err != nil {
			t.Fatal(err)
		}
		topic := fmt.Sprintf("topic-%d", round)
		if err := n.Catalog.Propose(ctx, catalog.CreateTopic{Name: topic, ID: catalog.NewTopicID(), Partitions: int32(round)}); err != nil {
			t.Fatal(err)
		}
		if err := n.Register(ctx, &raftpb.NodeRegister{NodeId: fmt.Sprint("node", round), RaftAddr: n.Addr(), KafkaAddr: "127.0.0.1:9092"}); err != nil {
			t.Fatal(err)
		}
	}
	write(n, 1)
	write(n, 2)
	if err := n.Catalog.Propose(ctx, catalog.DeleteTopic{Name: "topic-1"}); err != nil {
		t.Fatal(err)
	}
	if err := n.Unregister(ctx, "node1"); err != nil {
		t.Fatal(err)
	}
	want := n.FSM.Hash()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if !HasState(dir) {
		t.Fatal("dir reports no raft state after a run")
	}

	// Restart: no snapshot yet, the state comes from the log.
	n = openLeader(t, cfg)
	if snaps := snapshotFiles(t, dir); len(snaps) != 0 {
		t.Fatalf("unexpected snapshots %v", snaps)
	}
	if got := n.FSM.Hash(); got != want {
		t.Fatalf("hash after log replay %s, before restart %s", got, want)
	}
	if n.Addr() != addr {
		t.Fatalf("restart bound %s, first run %s", n.Addr(), addr)
	}
	rec, offsets, _ := n.FSM.Load("g3")
	if rec.GetGeneration() != 2 || len(offsets) != 2 || offsets[0].GetOffset() != 203 {
		t.Fatalf("g3 after restart: %v %v", rec, offsets)
	}
	if rec, offsets, _ := n.FSM.Load("g29"); rec != nil || len(offsets) != 1 {
		t.Fatalf("tombstoned g29 after restart: %v %v", rec, offsets)
	}
	if _, ok := n.Catalog.Get("topic-2"); !ok {
		t.Fatal("topic-2 lost")
	}
	if _, ok := n.Catalog.Get("topic-1"); ok {
		t.Fatal("deleted topic-1 came back")
	}
	if _, ok := n.FSM.Node("node1"); ok {
		t.Fatal("removed node1 came back")
	}

	// Snapshot, write more, restart: snapshot plus the log after it.
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	write(n, 3)
	want = n.FSM.Hash()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = openLeader(t, cfg)
	defer n.Close()
	if snaps := snapshotFiles(t, dir); len(snaps) != 1 {
		t.Fatalf("snapshots %v, want one", snaps)
	}
	if got := n.FSM.Hash(); got != want {
		t.Fatalf("hash after snapshot restore and replay %s, before restart %s", got, want)
	}
	if rec, _, _ := n.FSM.Load("g3"); rec.GetGeneration() != 3 {
		t.Fatalf("g3 generation %d after restart, want 3", rec.GetGeneration())
	}
	// The restarted node takes writes.
	if err := appendWait(t, n.Store, "after", nil, groupRecord("after", 1, "m1")); err != nil {
		t.Fatal(err)
	}
}

// boltNoSync reads the NoSync flag of the bolt database behind the log.
func boltNoSync(t testing.TB, n *Node) bool {
	t.Helper()
	conn := reflect.ValueOf(n.logs).Elem().FieldByName("conn")
	if !conn.IsValid() || conn.IsNil() {
		t.Fatal("raft-boltdb store has no bolt handle")
	}
	f := conn.Elem().FieldByName("NoSync")
	if !f.IsValid() {
		t.Fatal("bolt handle has no NoSync field")
	}
	return f.Bool()
}

func snapshotFiles(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(dir, "snapshots"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// A second node on a data dir that an open node holds fails with an error
// rather than waiting for the file forever.
func TestOpenHeldDataDirFails(t *testing.T) {
	dir := t.TempDir()
	n := openLeader(t, testConfig(dir))
	defer n.Close()
	cfg := testConfig(dir)
	cfg.RaftAddr = "127.0.0.1:0"
	os.Remove(filepath.Join(dir, "raft-addr")) // another raft port, so the log file is what is contended
	done := make(chan error, 1)
	go func() {
		m, err := Open(cfg)
		if err == nil {
			m.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "held by another process") {
			t.Fatalf("second node on a held data dir: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("opening a held data dir still waits after 30s")
	}
}

// Status tells the last log index next to the commit index, and a leader
// reports no time since contact with a leader.
func TestStatusLastLogAndContact(t *testing.T) {
	n := openLeader(t, testConfig(t.TempDir()))
	defer n.Close()
	before := n.Status()
	if err := n.apply(context.Background(), raftpb.CommandType_COMMAND_TYPE_NODE_REGISTER, &raftpb.NodeRegister{NodeId: "node9"}); err != nil {
		t.Fatal(err)
	}
	st := n.Status()
	if st.LastLogIndex != before.LastLogIndex+1 || st.LastLogIndex != n.LastIndex() || st.CommitIndex != st.LastLogIndex {
		t.Fatalf("last log %d (before %d, raft %d), commit %d: want one more entry, committed", st.LastLogIndex, before.LastLogIndex, n.LastIndex(), st.CommitIndex)
	}
	if st.State != "Leader" || st.LastContact != 0 {
		t.Fatalf("state %s, last contact %v: a leader reports 0", st.State, st.LastContact)
	}
}
