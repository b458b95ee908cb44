package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clustertest "github.com/cohort-coord/cohort/cluster-test"
)

func TestMain(m *testing.M) {
	code := m.Run()
	clustertest.RemoveBinaries()
	RemoveSeededBinary()
	os.Exit(code)
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts cohortd processes")
	}
}

// ciDuration is how long each CI run injects faults; COHORT_CHAOS_CI_DURATION
// changes it (a longer matrix outside CI).
func ciDuration(t *testing.T, def time.Duration) time.Duration {
	if v := os.Getenv("COHORT_CHAOS_CI_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("COHORT_CHAOS_CI_DURATION=%q: %v", v, err)
		}
		return d
	}
	return def
}

// keep writes the history and the picture of a run to
// $COHORT_CHAOS_OUT/<test> when that is set, or to the test log on failure.
func keep(t *testing.T, rep *Report) {
	dir := os.Getenv("COHORT_CHAOS_OUT")
	if dir == "" {
		return
	}
	dir = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Log(err)
		return
	}
	rep.Record.Save(filepath.Join(dir, "history.json"))
	os.WriteFile(filepath.Join(dir, "timeline.html"), []byte(rep.Timeline()), 0o644)
}

// TestNemeses is the CI matrix: each nemesis alone against 3 nodes for a
// minute of faults, and the checkers must find nothing. A run below its
// workload floor (operations, faults, leader changes) fails too.
func TestNemeses(t *testing.T) {
	skipShort(t)
	d := ciDuration(t, time.Minute)
	for i, nem := range Nemeses {
		t.Run(nem, func(t *testing.T) {
			rep := runNemesis(t, DefaultConfig(d, uint64(1000+i)), nem)
			if nem == "snapshot" && rep.Record.SnapshotInstalls == 0 {
				t.Error("no follower installed a snapshot")
			}
		})
	}
}

// runNemesis runs cfg with nemesis nem alone and fails t on any violation,
// an invalid run, or faults of another kind.
func runNemesis(t *testing.T, cfg Config, nem string) *Report {
	t.Helper()
	cfg.Nemeses = []string{nem}
	cfg.Floor.Faults = max(2, int(cfg.Duration/(20*time.Second)))
	cfg.MoveLeaders()
	rep, err := Run(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	keep(t, rep)
	t.Log("\n" + rep.Summary())
	if len(rep.Invalid) > 0 {
		t.Errorf("run invalid: %v", rep.Invalid)
	}
	for _, v := range rep.Violations {
		t.Errorf("%s at %v: %s", v.Invariant, v.At.Sub(rep.Record.Start).Round(time.Millisecond), v.Text)
	}
	if n := len(rep.Record.Faults); n == 0 || rep.Record.Faults[0].Kind != nem {
		t.Errorf("faults %v, want %s only", rep.Record.Faults, nem)
	}
	return rep
}

// TestNemesesSharded runs the nemeses that move leadership, and planned
// shard moves, against 3 nodes of 16 shards: each shard is led by its own
// node, so a fault hits the shards of its victims while the others go on.
func TestNemesesSharded(t *testing.T) {
	skipShort(t)
	d := ciDuration(t, 40*time.Second)
	for i, nem := range []string{"kill", "partition", "move"} {
		t.Run(nem, func(t *testing.T) {
			cfg := DefaultConfig(d, uint64(3000+i))
			cfg.Shards = 16
			runNemesis(t, cfg, nem)
		})
	}
}

// TestSeededBugs runs each seeded bug once (a cohortd built with the
// seededbugs tag) and requires the invariant it breaks to be reported.
func TestSeededBugs(t *testing.T) {
	skipShort(t)
	d := ciDuration(t, 12*time.Second)
	cases := []struct {
		bug     string
		nemeses []string
		want    []string // invariants of which at least one must be violated
	}{
		{"ack-before-apply", []string{"kill"}, []string{"I1"}},
		{"no-generation-check", []string{"transfer"}, []string{"I2"}},
		// An old leader that keeps answering serves stale offsets (I1),
		// heartbeats of a generation the new leader replaced (I2),
		// generations that went back (I3), a group the coordinator does
		// not describe as its members see it (I5).
		{"stale-leader", []string{"transfer"}, []string{"I1", "I2", "I3", "I5"}},
		{"early-handout", []string{"kill"}, []string{"I4"}},
	}
	for i, c := range cases {
		t.Run(c.bug, func(t *testing.T) {
			cfg := DefaultConfig(d, uint64(2000+i))
			cfg.Nemeses, cfg.Bugs = c.nemeses, c.bug
			rep, err := Run(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			keep(t, rep)
			by := rep.ByInvariant()
			t.Logf("%s: violations %v", c.bug, by)
			found := false
			for _, inv := range c.want {
				found = found || by[inv] > 0
			}
			if !found {
				t.Errorf("seeded bug %s: no %v violation; report:\n%s", c.bug, c.want, rep.Summary())
			}
			if rep.Passed() {
				t.Errorf("seeded bug %s: the run passed", c.bug)
			}
		})
	}
}
