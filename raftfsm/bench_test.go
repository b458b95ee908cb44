package raftfsm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// BenchmarkStoreAppend measures offset commits through Store.Append on a
// single node over real files (raft-boltdb with fsync on). One op is one
// Append of a fenced commit of `offsets` partitions; `inflight` Appends are
// kept outstanding, so group commit batches them into fewer entries.
// Reported: writes/s (Appends acknowledged), entries/s (raft entries) and
// writes/entry.
func BenchmarkStoreAppend(b *testing.B) {
	for _, bc := range []struct{ offsets, inflight int }{
		{1, 1}, {1, 16}, {1, 128}, {1, 1024}, {8, 128}, {64, 128},
	} {
		b.Run(fmt.Sprintf("offsets=%d/inflight=%d", bc.offsets, bc.inflight), func(b *testing.B) {
			benchStoreAppend(b, bc.offsets, bc.inflight)
		})
	}
}

func benchStoreAppend(b *testing.B, offsets, inflight int) {
	n := openLeader(b, testConfig(b.TempDir()))
	defer n.Close()
	groups := min(inflight, 256)
	commits := make([][]*pb.Record, groups)
	fence := &pb.WriteFence{Generation: 1, MemberId: "m1"}
	for g := range groups {
		id := fmt.Sprint("group-", g)
		if err := appendWait(b, n.Store, id, nil, groupRecord(id, 1, "m1", "m2")); err != nil {
			b.Fatal(err)
		}
		for p := range offsets {
			commits[g] = append(commits[g], offsetRecord(id, "orders", int32(p), int64(g*1000+p)))
		}
	}
	if err := n.raft.Barrier(waitLimit).Error(); err != nil {
		b.Fatal(err)
	}
	first := n.raft.LastIndex()
	sem := make(chan struct{}, inflight)
	var wg sync.WaitGroup
	var failed atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		sem <- struct{}{}
		wg.Add(1)
		g := i % groups
		n.Store.Append(fmt.Sprint("group-", g), commits[g], fence, func(err error) {
			if err != nil {
				failed.Add(1)
			}
			<-sem
			wg.Done()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d appends failed", f, b.N)
	}
	entries := n.raft.LastIndex() - first
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "writes/s")
	b.ReportMetric(float64(entries)/elapsed.Seconds(), "entries/s")
	b.ReportMetric(float64(b.N*offsets)/elapsed.Seconds(), "offsets/s")
	b.ReportMetric(float64(b.N)/float64(max(entries, 1)), "writes/entry")
}
