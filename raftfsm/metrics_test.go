package raftfsm

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// The Raft metrics of a real single-node cluster: its state and indexes,
// the stored offsets, and raft's own timings of commits, applies, log
// writes and a snapshot, bridged from go-metrics.
func TestRaftMetrics(t *testing.T) {
	n := openLeader(t, testConfig(t.TempDir()))
	closed := false
	defer func() {
		if !closed {
			n.Close()
		}
	}()
	reg := prometheus.NewRegistry()
	if err := n.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, g := range []string{"a", "b"} {
		done := make(chan error, 1)
		n.Store.Append(g, writeOf(g, nil, groupRecord(g, 1, "m1"), offsetRecord(g, "t", 0, 1), offsetRecord(g, "t", 1, 2)).GetRecords(), nil, func(err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Register(ctx, &raftpb.NodeRegister{NodeId: "node1", RaftAddr: n.Addr()}); err != nil {
		t.Fatal(err)
	}
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	b := func() *bridge {
		sinks.mu.RLock()
		defer sinks.mu.RUnlock()
		for b := range sinks.set {
			return b
		}
		return nil
	}()
	if b == nil {
		t.Fatal("no bridge registered")
	}
	if v := testutil.ToFloat64(b.snapshots); v < 1 {
		t.Errorf("snapshots %v, want at least 1", v)
	}
	for name, want := range map[string]float64{"cohort_stored_groups": 2, "cohort_stored_offsets": 4, "cohort_raft_leader_known": 1} {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range fams {
			if f.GetName() == name {
				found = true
				if got := f.GetMetric()[0].GetGauge().GetValue(); got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
		}
		if !found {
			t.Errorf("no %s", name)
		}
	}
	samples := func(o prometheus.Observer) uint64 {
		var m dto.Metric
		if err := o.(prometheus.Metric).Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	for name, o := range map[string]prometheus.Observer{"commit": b.commit, "apply": b.apply, "log store": b.store, "snapshot persist": b.snapshot.WithLabelValues("persist")} {
		if samples(o) < 1 {
			t.Errorf("no %s timing bridged", name)
		}
	}
	if samples(b.apply) < 3 || samples(b.commit) < 3 {
		t.Errorf("%d applies and %d commits timed, want at least 3 each", samples(b.apply), samples(b.commit))
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	n.Close()
	closed = true
	sinks.mu.RLock()
	left := len(sinks.set)
	sinks.mu.RUnlock()
	if left != 0 {
		t.Errorf("%d bridges left after Close", left)
	}
}
