package raftfsm

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// acked remembers every write a Store acknowledged, to check later that
// each is present on whichever node leads.
type acked struct {
	groups  map[string]int32               // group -> generation
	offsets map[string]map[offsetKey]int64 // group -> offsets
}

func newAcked() *acked {
	return &acked{groups: map[string]int32{}, offsets: map[string]map[offsetKey]int64{}}
}

// writeRound writes one generation of n groups, each with two offsets,
// through s concurrently, requires every write to succeed, and records it.
func (a *acked) writeRound(t *testing.T, s *Store, prefix string, n int, gen int32) {
	t.Helper()
	var ws []write
	for i := range n {
		g := fmt.Sprintf("%s-%d", prefix, i)
		off := int64(gen)*100 + int64(i)
		ws = append(ws, write{group: g, recs: []*pb.Record{
			groupRecord(g, gen, "m1", "m2"),
			offsetRecord(g, "orders", 0, off),
			offsetRecord(g, "orders", 1, off+1),
		}})
	}
	for i, err := range appendAll(t, s, ws) {
		if err != nil {
			t.Fatalf("write %s: %v", ws[i].group, err)
		}
		g := ws[i].group
		a.groups[g] = gen
		if a.offsets[g] == nil {
			a.offsets[g] = map[offsetKey]int64{}
		}
		for _, r := range ws[i].recs {
			if o := r.GetOffset(); o != nil {
				a.offsets[g][offsetKey{o.GetTopic(), o.GetPartition()}] = o.GetOffset()
			}
		}
	}
}

// check requires every acknowledged write on f.
func (a *acked) check(t *testing.T, who string, f *FSM) {
	t.Helper()
	for g, gen := range a.groups {
		rec, offsets, err := f.Load(g)
		if err != nil || rec == nil {
			t.Fatalf("%s: acknowledged group %s missing (err %v)", who, g, err)
		}
		if rec.GetGeneration() != gen {
			t.Fatalf("%s: group %s generation %d, acknowledged %d", who, g, rec.GetGeneration(), gen)
		}
		got := map[offsetKey]int64{}
		for _, o := range offsets {
			got[offsetKey{o.GetTopic(), o.GetPartition()}] = o.GetOffset()
		}
		for k, want := range a.offsets[g] {
			if got[k] != want {
				t.Fatalf("%s: group %s %v offset %d, acknowledged %d", who, g, k, got[k], want)
			}
		}
	}
}

func isStoreFailure(err error) bool {
	return errors.Is(err, coordinator.ErrStoreNotLeader) || errors.Is(err, coordinator.ErrStoreTimeout)
}

// The leader crashes: a new one is elected among the others, writes go on
// through a store on it, and every write acknowledged before the crash is
// there.
func TestClusterLeaderChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, nil)
		defer c.shutdown()
		old := c.leader()
		s := NewStore(old.r, old.fsm.FSM, 2*time.Second)
		a := newAcked()
		a.writeRound(t, s, "g", 40, 1)
		if res, _ := apply(t, old, topicCreateCmd(t, "orders", 4)); res.Err != nil {
			t.Fatal(res.Err)
		}
		a.writeRound(t, s, "g", 40, 2)
		c.converge(old, c.nodes...)

		c.stop(old)
		if err := appendWait(t, s, "late", nil, groupRecord("late", 1)); !errors.Is(err, coordinator.ErrStoreNotLeader) {
			t.Fatalf("append on a shut-down leader: %v, want ErrStoreNotLeader", err)
		}
		s.Close()

		l := c.leader()
		if l == old {
			t.Fatal("shut-down node still leads")
		}
		a.check(t, string(l.id), l.fsm.FSM)
		if _, ok := l.fsm.catalog.Get("orders"); !ok {
			t.Fatalf("topic orders missing on the new leader")
		}
		s2 := NewStore(l.r, l.fsm.FSM, 2*time.Second)
		defer s2.Close()
		a.writeRound(t, s2, "g", 40, 3)
		a.writeRound(t, s2, "h", 10, 1)
		c.converge(l, c.running()...)
		for _, nd := range c.running() {
			a.check(t, string(nd.id), nd.fsm.FSM)
			if rec, _, _ := nd.fsm.Load("late"); rec != nil {
				t.Fatalf("%s: write refused on the shut-down leader was applied", nd.id)
			}
		}
	})
}

// The leader is cut off from both followers. Every write through its store
// fails with ErrStoreNotLeader or ErrStoreTimeout (never success), the
// majority elects a new leader and goes on, and once healed the old leader
// drops its unreplicated entries and reaches the same state.
func TestClusterPartitionedLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, nil)
		defer c.shutdown()
		old := c.leader()
		s := NewStore(old.r, old.fsm.FSM, time.Second)
		defer s.Close()
		a := newAcked()
		a.writeRound(t, s, "g", 20, 1)
		c.converge(old, c.nodes...)

		c.isolate(old)
		// Writes issued at once and one after another while the partition
		// lasts: none may be acknowledged.
		var ws []write
		for i := range 20 {
			g := fmt.Sprintf("lost-%d", i)
			ws = append(ws, write{group: g, recs: []*pb.Record{groupRecord(g, 1, "m1")}})
		}
		start := time.Now()
		for i, err := range appendAll(t, s, ws) {
			if !isStoreFailure(err) {
				t.Fatalf("write %s on the isolated leader: %v, want ErrStoreNotLeader or ErrStoreTimeout", ws[i].group, err)
			}
		}
		// The leader gives up once its lease (500 ms by default) runs out
		// without a quorum: the target is within the lease plus 100 ms.
		if d := time.Since(start); d > 600*time.Millisecond {
			t.Fatalf("writes on the isolated leader took %v to fail", d)
		}
		for i := range 5 {
			g := fmt.Sprintf("later-%d", i)
			if err := appendWait(t, s, g, nil, groupRecord(g, 1, "m1")); !isStoreFailure(err) {
				t.Fatalf("write %s on the isolated leader: %v", g, err)
			}
		}
		if old.r.State() == raft.Leader {
			t.Fatal("isolated leader did not step down")
		}

		var rest []*tnode
		for _, nd := range c.nodes {
			if nd != old {
				rest = append(rest, nd)
			}
		}
		l := c.leader(rest...)
		s2 := NewStore(l.r, l.fsm.FSM, time.Second)
		defer s2.Close()
		a.writeRound(t, s2, "g", 20, 2)
		a.writeRound(t, s2, "h", 5, 1)

		c.heal(old)
		c.converge(l, c.nodes...)
		for _, nd := range c.nodes {
			a.check(t, string(nd.id), nd.fsm.FSM)
			for _, w := range ws {
				if rec, _, _ := nd.fsm.Load(w.group); rec != nil {
					t.Fatalf("%s: refused write %s was applied", nd.id, w.group)
				}
			}
		}
	})
}

// A follower cut off while the leader writes and compacts its log past the
// follower's last entry can only catch up by InstallSnapshot: it restores
// the leader's snapshot, then goes on applying the log after it.
func TestClusterFollowerCatchUpBySnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, func(conf *raft.Config) {
			conf.SnapshotThreshold = 16
			conf.SnapshotInterval = 200 * time.Millisecond
			conf.TrailingLogs = 4
		})
		defer c.shutdown()
		l := c.leader()
		s := NewStore(l.r, l.fsm.FSM, time.Second)
		defer s.Close()
		a := newAcked()
		a.writeRound(t, s, "g", 10, 1)
		c.converge(l, c.nodes...)

		var f *tnode
		for _, nd := range c.nodes {
			if nd != l {
				f = nd
				break
			}
		}
		c.isolate(f)
		behind := f.r.LastIndex()
		for gen := int32(2); gen <= 40; gen++ {
			a.writeRound(t, s, "g", 10, gen)
		}
		for _, cmd := range [][]byte{topicCreateCmd(t, "orders", 8), nodeRegisterCmd(t, "node1"), topicCreateCmd(t, "gone", 1), topicDeleteCmd(t, "gone")} {
			if res, _ := apply(t, l, cmd); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		if err := l.r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			t.Fatalf("leader snapshot: %v", err)
		}
		first, err := l.logs.FirstIndex()
		if err != nil {
			t.Fatal(err)
		}
		if first <= behind+1 {
			t.Fatalf("leader log starts at %d: the follower's next entry %d was not compacted", first, behind+1)
		}
		if f.fsm.restoreCount() != 0 {
			t.Fatal("follower restored a snapshot while cut off")
		}

		c.heal(f)
		c.converge(l, c.nodes...)
		if f.fsm.restoreCount() == 0 {
			t.Fatalf("follower caught up from index %d without installing a snapshot", behind)
		}
		metas, err := f.snaps.List()
		if err != nil || len(metas) == 0 {
			t.Fatalf("follower snapshot store: %v, %d snapshots", err, len(metas))
		}
		if metas[0].Index <= behind {
			t.Fatalf("follower snapshot at %d, not past its log end %d", metas[0].Index, behind)
		}
		a.check(t, string(f.id), f.fsm.FSM)

		// The follower applies the log after the installed snapshot too.
		a.writeRound(t, s, "g", 10, 41)
		a.writeRound(t, s, "k", 3, 1)
		c.converge(l, c.nodes...)
		a.check(t, string(f.id), f.fsm.FSM)
		if _, ok := f.fsm.catalog.Get("orders"); !ok {
			t.Fatal("topic orders missing on the follower")
		}
		if _, ok := f.fsm.Node("node1"); !ok {
			t.Fatal("node1 missing on the follower")
		}
	})
}

// sameResults waits until every running node applied entry index and
// requires the same outcome everywhere.
func sameResults(t *testing.T, c *cluster, index uint64) *ApplyResult {
	t.Helper()
	var first *ApplyResult
	for _, nd := range c.running() {
		var res *ApplyResult
		waitFor(t, fmt.Sprintf("%s to apply entry %d", nd.id, index), func() bool {
			var ok bool
			res, ok = nd.fsm.result(index)
			return ok
		})
		if first == nil {
			first = res
			continue
		}
		if errString(res.Err) != errString(first.Err) || len(res.Errs) != len(first.Errs) {
			t.Fatalf("%s: entry %d gave %v %v, another node %v %v", nd.id, index, res.Err, res.Errs, first.Err, first.Errs)
		}
		for i := range res.Errs {
			if errString(res.Errs[i]) != errString(first.Errs[i]) {
				t.Fatalf("%s: entry %d write %d gave %v, another node %v", nd.id, index, i, res.Errs[i], first.Errs[i])
			}
		}
	}
	return first
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// A write whose fence does not match the stored group (older or newer
// generation, unknown member, unknown group) is refused with
// ErrStoreFenced by the store and by every replica alike, and changes
// nothing; a matching fence lets it through.
func TestClusterFencing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, nil)
		defer c.shutdown()
		l := c.leader()
		s := NewStore(l.r, l.fsm.FSM, time.Second)
		defer s.Close()
		if err := appendWait(t, s, "g", nil, groupRecord("g", 5, "m1", "m2"), offsetRecord("g", "t", 0, 10)); err != nil {
			t.Fatal(err)
		}

		cases := []struct {
			name  string
			group string
			fence *pb.WriteFence
			ok    bool
		}{
			{"current generation and member", "g", &pb.WriteFence{Generation: 5, MemberId: "m2"}, true},
			{"older generation", "g", &pb.WriteFence{Generation: 4, MemberId: "m1"}, false},
			{"newer generation", "g", &pb.WriteFence{Generation: 6, MemberId: "m1"}, false},
			{"unknown member", "g", &pb.WriteFence{Generation: 5, MemberId: "ghost"}, false},
			{"empty member", "g", &pb.WriteFence{Generation: 5}, false},
			{"unknown group", "nobody", &pb.WriteFence{Generation: 5, MemberId: "m1"}, false},
		}
		var ws []write
		for i, tc := range cases {
			ws = append(ws, write{group: tc.group, fence: tc.fence, recs: []*pb.Record{offsetRecord(tc.group, "t", int32(i+1), 100+int64(i))}})
		}
		// Through the store, all at once.
		for i, err := range appendAll(t, s, ws) {
			if cases[i].ok != (err == nil) || (!cases[i].ok && !errors.Is(err, coordinator.ErrStoreFenced)) {
				t.Errorf("store, %s: %v", cases[i].name, err)
			}
		}
		// As one entry, so every replica's outcome can be compared.
		var gws []*raftpb.GroupWrite
		for _, w := range ws {
			gws = append(gws, writeOf(w.group, w.fence, offsetRecord(w.group, "u", 0, 7)))
		}
		c.converge(l, c.nodes...)
		_, idx := apply(t, l, writesCmd(t, gws...))
		c.converge(l, c.nodes...)
		res := sameResults(t, c, idx)
		if res.Err != nil || len(res.Errs) != len(cases) {
			t.Fatalf("entry result %v, %d errors", res.Err, len(res.Errs))
		}
		for i, tc := range cases {
			if tc.ok != (res.Errs[i] == nil) || (!tc.ok && !errors.Is(res.Errs[i], coordinator.ErrStoreFenced)) {
				t.Errorf("replicas, %s: %v", tc.name, res.Errs[i])
			}
		}
		_, offsets, _ := l.fsm.Load("g")
		got := map[offsetKey]int64{}
		for _, o := range offsets {
			got[offsetKey{o.GetTopic(), o.GetPartition()}] = o.GetOffset()
		}
		want := map[offsetKey]int64{{"t", 0}: 10, {"t", 1}: 100, {"u", 0}: 7}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("offsets of g = %v, want %v", got, want)
		}
		if rec, _, _ := l.fsm.Load("nobody"); rec != nil {
			t.Fatal("fenced write created group nobody")
		}

		// An entry of fenced writes only changes nothing anywhere.
		before := c.converge(l, c.nodes...)
		_, idx = apply(t, l, writesCmd(t, gws[1:]...))
		if after := c.converge(l, c.nodes...); after != before {
			t.Fatalf("fenced writes changed the state: %s -> %s", before, after)
		}
		for i, err := range sameResults(t, c, idx).Errs {
			if !errors.Is(err, coordinator.ErrStoreFenced) {
				t.Errorf("replicas, %s: %v", cases[i+1].name, err)
			}
		}

		// A rebalance to generation 6 fences the commits of generation 5.
		if err := appendWait(t, s, "g", &pb.WriteFence{Generation: 5, MemberId: "m1"}, groupRecord("g", 6, "m2", "m3")); err != nil {
			t.Fatal(err)
		}
		if err := appendWait(t, s, "g", &pb.WriteFence{Generation: 5, MemberId: "m1"}, offsetRecord("g", "t", 0, 11)); !errors.Is(err, coordinator.ErrStoreFenced) {
			t.Fatalf("commit of generation 5 after the rebalance: %v", err)
		}
		if err := appendWait(t, s, "g", &pb.WriteFence{Generation: 6, MemberId: "m1"}, offsetRecord("g", "t", 0, 11)); !errors.Is(err, coordinator.ErrStoreFenced) {
			t.Fatalf("commit of a member that left: %v", err)
		}
		if err := appendWait(t, s, "g", &pb.WriteFence{Generation: 6, MemberId: "m3"}, offsetRecord("g", "t", 0, 12)); err != nil {
			t.Fatal(err)
		}
		c.converge(l, c.nodes...)
		for _, nd := range c.nodes {
			rec, offsets, _ := nd.fsm.Load("g")
			if rec.GetGeneration() != 6 || offsets[0].GetOffset() != 12 {
				t.Fatalf("%s: generation %d offset %d, want 6 and 12", nd.id, rec.GetGeneration(), offsets[0].GetOffset())
			}
		}
	})
}

// Entries this version cannot apply (unknown type, other version, bytes
// that are no envelope) are refused with ErrBadCommand on every replica
// alike and change nothing.
func TestClusterRefusesBadCommands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, nil)
		defer c.shutdown()
		l := c.leader()
		if res, _ := apply(t, l, writesCmd(t, writeOf("g", nil, groupRecord("g", 1, "m1"), offsetRecord("g", "t", 0, 1)))); res.Err != nil {
			t.Fatal(res.Err)
		}
		before := c.converge(l, c.nodes...)
		for name, data := range badCommands(t) {
			res, idx := apply(t, l, data)
			if !errors.Is(res.Err, ErrBadCommand) {
				t.Fatalf("%s: leader result %v, want ErrBadCommand", name, res.Err)
			}
			if after := c.converge(l, c.nodes...); after != before {
				t.Fatalf("%s changed the state", name)
			}
			if r := sameResults(t, c, idx); !errors.Is(r.Err, ErrBadCommand) || len(r.Errs) != 0 {
				t.Fatalf("%s: replica result %v %v", name, r.Err, r.Errs)
			}
		}
	})
}
