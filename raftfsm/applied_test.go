package raftfsm

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/cohort-coord/cohort/catalog"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// hashicorp/raft counts an entry applied once it is handed to the FSM's
// goroutine; Holds waits for the FSM itself. With the FSM held back, the
// entry creating a topic is "applied" by raft's count while the catalog
// still lacks the topic: Holds says no until the FSM ran it.
func TestHoldsWaitsForTheFSM(t *testing.T) {
	n := openLeader(t, testConfig(t.TempDir()))
	defer n.Close()
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { n.FSM.beforeApply.Store(nil); close(release) }) }
	defer open() // before Close, which waits for the FSM
	hold := func() { <-release }
	n.FSM.beforeApply.Store(&hold)
	before := n.raft.LastIndex()
	done := make(chan error, 1)
	go func() {
		done <- n.Catalog.Propose(context.Background(), catalog.CreateTopic{Name: "held", ID: catalog.NewTopicID(), Partitions: 3})
	}()
	waitFor(t, "raft to hand the entry to the FSM", func() bool {
		last := n.raft.LastIndex()
		return last > before && n.raft.AppliedIndex() >= last
	})
	last := n.raft.LastIndex()
	if n.Holds(last) {
		t.Fatal("Holds reports an entry the FSM has not applied yet")
	}
	if _, ok := n.Catalog.Get("held"); ok {
		t.Fatal("the topic is in the catalog before its entry was applied")
	}
	open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !n.Holds(last) {
		t.Fatal("Holds says no after the FSM applied the entry")
	}
	if _, ok := n.Catalog.Get("held"); !ok {
		t.Fatal("the topic is missing after its entry was applied")
	}

	// Entries at or below a snapshot are held; entries past the last
	// command (the noop a new leader writes, configuration changes) need no
	// Apply.
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if !n.Holds(n.raft.AppliedIndex()) {
		t.Fatal("Holds says no for entries in a snapshot")
	}
	if n.Holds(n.raft.LastIndex() + 1) {
		t.Fatal("Holds says yes for an entry not in the log")
	}
}

// A reopened node knows the registry its log holds before any entry is
// applied again: the snapshot's registrations with the log's after it.
func TestLoggedNodesAfterReopen(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	n := openLeader(t, cfg)
	ctx := context.Background()
	reg := func(id string) {
		t.Helper()
		if err := n.Register(ctx, &raftpb.NodeRegister{NodeId: id, RaftAddr: n.Addr(), KafkaAddr: "127.0.0.1:9092"}); err != nil {
			t.Fatal(err)
		}
	}
	reg("node-a")
	reg("node-b")
	reg("node-c")
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if err := n.Unregister(ctx, "node-b"); err != nil {
		t.Fatal(err)
	}
	reg("node-d")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var ids []string
	for _, r := range n.LoggedNodes() {
		ids = append(ids, r.GetNodeId())
	}
	if want := []string{"node-a", "node-c", "node-d"}; !slices.Equal(ids, want) {
		t.Fatalf("logged registry %v, want %v", ids, want)
	}
}
