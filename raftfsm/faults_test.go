package raftfsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// faultRun drives a cluster with a writer and a nemesis at once. topo
// guards the cluster's topology (which raft, transport and store each node
// has). It is a channel, not a sync.Mutex: a goroutine waiting on a mutex
// is not durably blocked, so virtual time would stop while the holder waits
// for raft timers (a shutdown, say), and the bubble would hang.
type faultRun struct {
	t      *testing.T
	c      *cluster
	rng    *rand.Rand
	topo   chan struct{}
	stores map[*tnode]*Store

	acked                        map[offsetKey]int64 // (group, partition) -> highest acknowledged offset
	ackedOffsets, failedOffsets  []int64
	ok, failed, faults, restarts int
}

func (f *faultRun) storeOfLeader() *Store {
	f.topo <- struct{}{}
	defer func() { <-f.topo }()
	for _, nd := range f.c.running() {
		if nd.r.State() == raft.Leader {
			if f.stores[nd] == nil {
				f.stores[nd] = NewStore(nd.r, nd.fsm.FSM, time.Second)
			}
			return f.stores[nd]
		}
	}
	return nil
}

// writeBatch commits increasing offsets of 8 keys through the leader's
// store and records the acknowledged ones.
func (f *faultRun) writeBatch(next *int64) {
	s := f.storeOfLeader()
	if s == nil {
		time.Sleep(50 * time.Millisecond)
		return
	}
	var ws []write
	var keys []offsetKey
	for i := range 8 {
		g := fmt.Sprint("g", i%4)
		*next++
		ws = append(ws, write{group: g, recs: []*pb.Record{offsetRecord(g, "t", int32(i/4), *next)}})
		keys = append(keys, offsetKey{g, int32(i / 4)})
	}
	for i, err := range appendAll(f.t, s, ws) {
		switch {
		case err == nil:
			f.ok++
			f.acked[keys[i]] = max(f.acked[keys[i]], ws[i].recs[0].GetOffset().GetOffset())
			f.ackedOffsets = append(f.ackedOffsets, ws[i].recs[0].GetOffset().GetOffset())
		case isStoreFailure(err):
			f.failed++
			f.failedOffsets = append(f.failedOffsets, ws[i].recs[0].GetOffset().GetOffset())
		default:
			f.t.Errorf("write failed with %v, want ErrStoreNotLeader or ErrStoreTimeout", err)
		}
	}
}

// faulty returns the nodes that are down or cut off.
func (f *faultRun) nemesisStep(cut map[*tnode]bool) {
	f.topo <- struct{}{}
	defer func() { <-f.topo }()
	c := f.c
	var leader *tnode
	for _, nd := range c.running() {
		if nd.r.State() == raft.Leader && !cut[nd] {
			leader = nd
		}
	}
	// At most one node is faulty at a time, so a majority can always go on.
	for nd := range cut {
		if f.rng.IntN(3) > 0 {
			c.heal(nd)
			delete(cut, nd)
		}
		return
	}
	for _, nd := range c.nodes {
		if nd.down {
			if f.rng.IntN(3) > 0 {
				c.restart(nd)
				f.restarts++
			}
			return
		}
	}
	target := c.nodes[f.rng.IntN(len(c.nodes))]
	if leader != nil && f.rng.IntN(2) == 0 {
		target = leader
	}
	f.faults++
	switch f.rng.IntN(4) {
	case 0, 1:
		c.isolate(target)
		cut[target] = true
	case 2:
		if s := f.stores[target]; s != nil {
			s.Close()
			delete(f.stores, target)
		}
		c.stop(target)
	case 3:
		if leader != nil {
			// Its outcome does not matter: the writer must cope either way.
			_ = leader.r.LeadershipTransfer()
		}
	}
}

// Under random partitions, crashes with restarts from the stored log and
// snapshots, and leadership transfers, no acknowledged write is lost, every
// failed write fails with a store error, and once healed every node has the
// same log, the same apply results and the same state.
func TestClusterRandomFaults(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { randomFaults(t, seed) })
		})
	}
}

func randomFaults(t *testing.T, seed uint64) {
	c := newCluster(t, 3, func(conf *raft.Config) {
		conf.SnapshotThreshold = 64
		conf.SnapshotInterval = 500 * time.Millisecond
		conf.TrailingLogs = 32
	})
	defer c.shutdown()
	f := &faultRun{t: t, c: c, rng: rand.New(rand.NewPCG(seed, 42)), topo: make(chan struct{}, 1), stores: map[*tnode]*Store{}, acked: map[offsetKey]int64{}}
	defer func() {
		for _, s := range f.stores {
			s.Close()
		}
	}()
	c.leader()

	const runFor = 120 * time.Second
	end := time.Now().Add(runFor)
	nemesisDone := make(chan struct{})
	go func() {
		defer close(nemesisDone)
		cut := map[*tnode]bool{}
		for time.Now().Before(end) {
			time.Sleep(time.Duration(500+f.rng.IntN(2500)) * time.Millisecond)
			f.nemesisStep(cut)
		}
		f.topo <- struct{}{}
		for nd := range cut {
			c.heal(nd)
		}
		for _, nd := range c.nodes {
			c.restart(nd)
		}
		<-f.topo
	}()
	var next int64
	for time.Now().Before(end) {
		f.writeBatch(&next)
		// In-memory entries commit without virtual time passing: pace
		// the writer so that the run spans the faults.
		time.Sleep(20 * time.Millisecond)
	}
	<-nemesisDone

	// A write goes through once the cluster has healed (a leadership
	// transfer or an election may still be under way at first).
	var err error
	waitFor(t, "a write to succeed after healing", func() bool {
		s := f.storeOfLeader()
		if s == nil {
			return false
		}
		err = appendWait(t, s, "final", nil, groupRecord("final", 1))
		if err != nil && !isStoreFailure(err) {
			t.Fatalf("write after healing: %v", err)
		}
		return err == nil
	})
	l := c.leader()
	c.converge(l, c.nodes...)
	if f.ok < 200 || f.faults < 5 {
		t.Fatalf("weak run: %d writes acknowledged, %d failed, %d faults", f.ok, f.failed, f.faults)
	}
	var restores int
	for _, nd := range c.nodes {
		restores += nd.fsm.restoreCount()
	}
	t.Logf("%d writes acknowledged, %d failed, %d faults, %d restarts, %d snapshot restores, log at %d",
		f.ok, f.failed, f.faults, f.restarts, restores, l.r.LastIndex())

	for _, nd := range c.nodes {
		for k, want := range f.acked {
			_, offsets, _ := nd.fsm.Load(k.topic)
			var got int64 = -1
			for _, o := range offsets {
				if o.GetPartition() == k.partition {
					got = o.GetOffset()
				}
			}
			if got < want {
				t.Fatalf("%s: %s/%d at %d, acknowledged %d: an acknowledged write was lost", nd.id, k.topic, k.partition, got, want)
			}
		}
	}
	// Every acknowledged write was applied (committed); a failed one may
	// or may not have been.
	applied := appliedOffsets(t, c.history)
	for _, o := range f.ackedOffsets {
		if !applied[o] {
			t.Fatalf("acknowledged commit of offset %d was never applied", o)
		}
	}
	var failedApplied int
	for _, o := range f.failedOffsets {
		if applied[o] {
			failedApplied++
		}
	}
	t.Logf("%d of %d failed writes were applied all the same", failedApplied, len(f.failedOffsets))

	// Freeze the logs (no more compaction) before comparing them.
	for nd, s := range f.stores {
		s.Close()
		delete(f.stores, nd)
	}
	c.shutdown()
	compareLogs(t, c)
}

// compareLogs requires every entry held after a snapshot by more than one
// node to be identical on those nodes, and the entries more than one node
// applied to have had the same result. (Below its snapshot a node's log may
// keep stale entries: a follower that installs a snapshot compacts only up
// to its own log end.)
func compareLogs(t *testing.T, c *cluster) {
	t.Helper()
	type span struct{ from, to uint64 }
	spans := map[*tnode]span{}
	var lo, hi uint64 = ^uint64(0), 0
	for _, nd := range c.nodes {
		first, _ := nd.logs.FirstIndex()
		last, _ := nd.logs.LastIndex()
		metas, err := nd.snaps.List()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range metas {
			first = max(first, m.Index+1)
		}
		spans[nd] = span{first, last}
		lo, hi = min(lo, first), max(hi, last)
	}
	var compared int
	for idx := lo; idx <= hi; idx++ {
		var ref *raft.Log
		var refNode *tnode
		for _, nd := range c.nodes {
			if sp := spans[nd]; idx < sp.from || idx > sp.to {
				continue
			}
			var l raft.Log
			if err := nd.logs.GetLog(idx, &l); err != nil {
				t.Fatalf("%s entry %d: %v", nd.id, idx, err)
			}
			if ref == nil {
				ref, refNode = &l, nd
				continue
			}
			compared++
			if l.Term != ref.Term || l.Type != ref.Type || !bytes.Equal(l.Data, ref.Data) {
				t.Fatalf("entry %d differs between %s and %s", idx, refNode.id, nd.id)
			}
		}
	}
	t.Logf("%d entries compared across nodes", compared)
	ref := c.nodes[0].fsm
	ref.mu.Lock()
	defer ref.mu.Unlock()
	for _, nd := range c.nodes[1:] {
		for idx, ra := range ref.results {
			if rb, ok := nd.fsm.result(idx); ok && !sameResult(ra, rb) {
				t.Fatalf("entry %d applied with %v %v on %s, %v %v on %s", idx, ra.Err, ra.Errs, c.nodes[0].id, rb.Err, rb.Errs, nd.id)
			}
		}
	}
}

// appliedOffsets returns every offset value that an applied entry wrote.
func appliedOffsets(t *testing.T, h *history) map[int64]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[int64]bool{}
	for _, data := range h.entries {
		var env raftpb.Envelope
		var ws raftpb.GroupWrites
		if proto.Unmarshal(data, &env) != nil || env.GetType() != raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES {
			continue
		}
		if err := proto.Unmarshal(env.GetPayload(), &ws); err != nil {
			t.Fatal(err)
		}
		for _, w := range ws.GetWrites() {
			for _, r := range w.GetRecords() {
				if o := r.GetOffset(); o != nil {
					out[o.GetOffset()] = true
				}
			}
		}
	}
	return out
}
