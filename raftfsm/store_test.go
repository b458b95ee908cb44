package raftfsm

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// newStoreCluster starts an n-node cluster and a Store on its leader
// (timeout bounds an entry's replication); both stop when the test ends.
func newStoreCluster(t *testing.T, n int, timeout time.Duration) (*cluster, *tnode, *Store) {
	c := newCluster(t, n, nil)
	l := c.leader()
	s := NewStore(l.r, l.fsm.FSM, timeout)
	t.Cleanup(func() {
		s.Close()
		c.shutdown()
	})
	return c, l, s
}

// Many writes issued at once leave in far fewer entries, each write gets
// its own outcome (a fenced one fails alone), and the log keeps the order
// of Append calls: the last commit of a partition wins.
func TestStoreGroupCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, l, s := newStoreCluster(t, 1, time.Second)
		if err := appendWait(t, s, "g", nil, groupRecord("g", 1, "m1")); err != nil {
			t.Fatal(err)
		}
		first := l.r.LastIndex()
		var ws []write
		for i := range 2000 {
			fence := &pb.WriteFence{Generation: 1, MemberId: "m1"}
			if i%100 == 50 {
				fence.MemberId = "stale"
			}
			ws = append(ws, write{group: "g", fence: fence, recs: []*pb.Record{offsetRecord("g", "t", int32(i%3), int64(i))}})
		}
		for i, err := range appendAll(t, s, ws) {
			if stale := i%100 == 50; stale != errors.Is(err, coordinator.ErrStoreFenced) || (!stale && err != nil) {
				t.Fatalf("write %d (stale %v): %v", i, stale, err)
			}
		}
		entries := l.r.LastIndex() - first
		if entries == 0 || entries > 2000/10 {
			t.Fatalf("2000 writes issued at once took %d entries", entries)
		}
		_, offsets, _ := l.fsm.Load("g")
		want := []int64{1998, 1999, 1997} // last commit of partitions 0, 1, 2
		if len(offsets) != 3 {
			t.Fatalf("offsets %v", offsets)
		}
		for i, o := range offsets {
			if o.GetOffset() != want[i] {
				t.Fatalf("partition %d at %d, want %d (Append order lost)", o.GetPartition(), o.GetOffset(), want[i])
			}
		}
	})
}

// Writes still queued when the store closes, and writes appended after it
// closed, fail with ErrStoreNotLeader: every done is called.
func TestStoreClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, nil)
		defer c.shutdown()
		l := c.leader()
		s := NewStore(l.r, l.fsm.FSM, time.Second)
		if err := appendWait(t, s, "g", nil, groupRecord("g", 1, "m1")); err != nil {
			t.Fatal(err)
		}
		// Cut the leader off so entries stay in flight and later writes
		// queue behind them, then close the store.
		c.isolate(l)
		outcomes := make(chan error, 100)
		for i := range 100 {
			g := fmt.Sprint("q", i)
			s.Append(g, []*pb.Record{groupRecord(g, 1, "m1")}, nil, func(err error) { outcomes <- err })
		}
		synctest.Wait()
		s.Close()
		s.Append("after", []*pb.Record{groupRecord("after", 1, "m1")}, nil, func(err error) { outcomes <- err })
		var notLeader int
		for range 101 {
			select {
			case err := <-outcomes:
				if !isStoreFailure(err) {
					t.Fatalf("write around Close: %v, want ErrStoreNotLeader or ErrStoreTimeout", err)
				}
				if errors.Is(err, coordinator.ErrStoreNotLeader) {
					notLeader++
				}
			case <-time.After(waitLimit):
				t.Fatalf("a write around Close never completed")
			}
		}
		if notLeader == 0 {
			t.Fatal("no write was failed by Close")
		}
		s.Close() // idempotent
		c.heal(l)
	})
}

// While an entry is in flight, writes queue behind it until it completes or
// until minPipelined of them can leave together; on an idle store a write
// leaves at once.
func TestStoreHoldsSmallBatchesBehindAnEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, l, s := newStoreCluster(t, 3, time.Minute)
		if err := appendWait(t, s, "g", nil, groupRecord("g", 1, "m1")); err != nil {
			t.Fatal(err)
		}
		// Cut the leader off: its next entry stays in flight.
		c.isolate(l)
		outcomes := make(chan error, 2*minPipelined)
		commit := func(i int) {
			s.Append("g", []*pb.Record{offsetRecord("g", "t", int32(i%3), int64(i))}, nil, func(err error) { outcomes <- err })
		}
		before := l.r.LastIndex()
		commit(0)
		synctest.Wait()
		if got := l.r.LastIndex(); got != before+1 {
			t.Fatalf("a write on an idle store: %d entries, want 1", got-before)
		}
		for i := 1; i < minPipelined; i++ {
			commit(i)
		}
		synctest.Wait()
		if got := l.r.LastIndex(); got != before+1 {
			t.Fatalf("%d writes behind an entry in flight left in %d entries, want 0", minPipelined-1, got-before-1)
		}
		commit(minPipelined)
		synctest.Wait()
		if got := l.r.LastIndex(); got != before+2 {
			t.Fatalf("%d writes behind an entry in flight left in %d entries, want 1", minPipelined, got-before-1)
		}
		c.heal(l)
		for range minPipelined + 1 {
			select {
			case err := <-outcomes:
				if err != nil && !isStoreFailure(err) {
					t.Fatalf("write: %v", err)
				}
			case <-time.After(waitLimit):
				t.Fatal("a write never completed")
			}
		}
	})
}
