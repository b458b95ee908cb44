package raftmux

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/internal/testcerts"
)

// TestShardsOverOneMux runs S Raft groups over one port per node on three
// nodes, with raft-boltdb stores in temp dirs: every shard elects, applies
// entries that reach exactly its own FSM on every node, and after a node
// is shut down every shard elects again and keeps applying; restarted on
// the same port from its stores, the node catches up on every shard.
func TestShardsOverOneMux(t *testing.T) {
	for _, shards := range []int{4, 16} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			runShards(t, shards, Config{})
		})
	}
}

// TestShardsOverOneMuxTLS is TestShardsOverOneMux with TLS both ways.
func TestShardsOverOneMuxTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "raftmux-ca")
	src := ca.Issue(t, testcerts.Options{CommonName: "node"}).Write(t, t.TempDir(), "node", ca).Load(t)
	runShards(t, 4, Config{TLS: src})
}

func runShards(t *testing.T, shards int, cfg Config) {
	start := time.Now()
	ns := startCluster(t, 3, shards, cfg)
	leaders := waitLeaders(t, ns, 15*time.Second)
	t.Logf("%d shards elected in %v", shards, time.Since(start).Round(time.Millisecond))
	const perRound = 5
	applyRound(t, leaders, 0, perRound)
	checkFSMs(t, ns, 1, perRound)

	victim := leaders[0] // a node that leads at least one shard
	victim.stop()
	t.Logf("stopped %s, which led shard 0", victim.id)
	leaders = waitLeaders(t, ns, 15*time.Second)
	for s, l := range leaders {
		if l == victim {
			t.Fatalf("shard %d: stopped node still leader", s)
		}
	}
	applyRound(t, leaders, 1, perRound)
	checkFSMs(t, ns, 2, perRound)

	victim.restart(t, cfg)
	leaders = waitLeaders(t, ns, 15*time.Second)
	applyRound(t, leaders, 2, perRound)
	checkFSMs(t, ns, 3, perRound)

	var frames uint64
	for _, n := range ns {
		st := n.mux.Stats()
		frames += st.Frames
		if st.Accepted == 0 {
			t.Errorf("%s: mux accepted nothing: %+v", n.id, st)
		}
		if st.RefusedTLS+st.RefusedHeader+st.RefusedTimeout+st.RefusedShard != 0 {
			t.Errorf("%s: mux refused a peer's connection: %+v", n.id, st)
		}
	}
	if frames == 0 {
		t.Error("no RPC went through the muxes")
	}
	t.Logf("whole run %v", time.Since(start).Round(time.Millisecond))
}

// entry is the data of the i-th entry of round r on shard s.
func entry(s, r, i int) string { return fmt.Sprintf("shard%d/round%d/%d", s, r, i) }

// applyRound applies perRound entries to every shard, on its leader, all
// shards at once.
func applyRound(t *testing.T, leaders []*testNode, round, perRound int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(leaders))
	for s := range leaders {
		wg.Go(func() {
			r := leaders[s].shards[s].raft
			for i := range perRound {
				if err := r.Apply([]byte(entry(s, round, i)), 5*time.Second).Error(); err != nil {
					errs[s] = fmt.Errorf("entry %d on %s: %w", i, leaders[s].id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for s, err := range errs {
		if err != nil {
			t.Fatalf("shard %d: %v", s, err)
		}
	}
}

// checkFSMs waits until every live node's FSM of every shard holds exactly
// rounds×perRound entries, its own, in order.
func checkFSMs(t *testing.T, ns []*testNode, rounds, perRound int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, n := range ns {
		if n.down {
			continue
		}
		for s, sn := range n.shards {
			var want []string
			for r := range rounds {
				for i := range perRound {
					want = append(want, entry(s, r, i))
				}
			}
			for {
				got := sn.fsm.get()
				if slices.Equal(got, want) {
					break
				}
				if len(got) > len(want) || time.Now().After(deadline) || !slices.Equal(got, want[:len(got)]) {
					t.Fatalf("%s shard %d: FSM holds %q, want %q", n.id, s, got, want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
}
