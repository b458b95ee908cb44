package clustertest

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// The member emulators against franz-go's fake Kafka cluster: groups form,
// commits are acknowledged and fetched back, and the history passes the
// checkers. This keeps the emulators honest independently of cohortd.
func TestEmulatorsAgainstKfake(t *testing.T) {
	fake, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	cfg := DefaultWorkload()
	cfg.Groups, cfg.Members = 2, 3
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	w, err := StartWorkload(ctx, fake.ListenAddrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	views, err := w.WaitStable(30*time.Second, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range w.Groups {
		d, _, err := DescribeGroup(ctx, g.Coord)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range d.Members {
			ids = append(ids, m.MemberID)
		}
		if d.State != "Stable" || !slices.Equal(sortedCopy(ids), views[g.ID].Members) {
			t.Fatalf("%s: described %s %v, members see %v", g.ID, d.State, sortedCopy(ids), views[g.ID])
		}
	}
	joins := w.Joins()
	w.SetCommits(true)
	start := time.Now()
	for _, m := range w.Members() {
		for m.LastOK(OpCommit).Before(start) {
			if time.Since(start) > 20*time.Second {
				t.Fatalf("%s committed nothing", m.Name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	fetched := fetchWorkload(t, ctx, w)
	for k, o := range fetched {
		if o < 1 {
			t.Errorf("%s %s/%d: fetched %d after commits", k.Group, k.Topic, k.Partition, o)
		}
	}
	ops := w.History.Ops()
	for _, err := range CheckGenerations(ops) {
		t.Error(err)
	}
	for _, err := range CheckOffsets(ops, fetched) {
		t.Error(err)
	}
	if n := w.Joins() - joins; n != 0 {
		t.Errorf("%d joins after the groups were stable", n)
	}
	t.Logf("history: %s; offsets %v", Summary(ops), slices.Sorted(maps.Values(fetched)))
}
