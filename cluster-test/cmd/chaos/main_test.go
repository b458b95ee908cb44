package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clustertest "github.com/cohort-coord/cohort/cluster-test"
	"github.com/cohort-coord/cohort/cluster-test/chaos"
)

func TestBadFlagsExitWith2(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--nodes", "2"}, "--nodes >= 3"},
		{[]string{"--nemesis", ","}, "at least one nemesis"},
		{[]string{"--nemesis", "flood", "--out", dir}, `unknown nemesis "flood"`},
		{[]string{"--replay", filepath.Join(dir, "missing.json")}, "no such file"},
		{[]string{"--duration", "soon"}, "invalid value"},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}

// A saved history is checked again: a lost acknowledged commit fails the
// replay with exit code 1 and writes the picture.
func TestReplay(t *testing.T) {
	rec := lostCommit(3, "kill")
	dir := t.TempDir()
	path := filepath.Join(dir, "history.json")
	if err := rec.Save(path); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--replay", path, "--out", dir}, &out, &errb); code != 1 || !strings.Contains(out.String(), "I1            1") {
		t.Fatalf("exit %d, output:\n%s%s", code, out.String(), errb.String())
	}
	if b, err := os.ReadFile(filepath.Join(dir, "timeline.html")); err != nil || !strings.Contains(string(b), "not linearizable") {
		t.Errorf("picture: %v", err)
	}
}

// --summarize prints the matrix table of saved runs: one row per nemesis
// set, the failed seed named, violations counted per invariant.
func TestSummarize(t *testing.T) {
	rec := lostCommit(41, "kill")
	dir := t.TempDir()
	if err := rec.Save(filepath.Join(dir, "history.json")); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--summarize", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"kill ", " 41", "I1 1,"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if code := run([]string{"--summarize"}, &out, &errb); code != 2 {
		t.Errorf("--summarize without directories: exit %d, want 2", code)
	}
}

// lostCommit is a history in which an acknowledged commit is not read back.
func lostCommit(seed uint64, nemesis string) *chaos.Record {
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	commit := &chaos.Op{Op: clustertest.Op{Kind: clustertest.OpCommit, Group: "g", Client: "a", Gen: 1, Topic: "t",
		Offsets: map[int32]int64{0: 7}, Acked: map[int32]bool{0: true}, Start: at(0), End: at(10)}}
	fetch := &chaos.Op{Op: clustertest.Op{Kind: chaos.OpFetch, Group: "g", Client: "f", Gen: -1, Topic: "t",
		Offsets: map[int32]int64{0: -1}, Start: at(20), End: at(30)}}
	return &chaos.Record{Seed: seed, Nodes: []string{"node1"}, Nemeses: []string{nemesis}, Start: t0, FaultsStart: t0, FaultsEnd: at(1000), Healed: at(1000), End: at(2000),
		Groups: []chaos.GroupInfo{{ID: "g", Topic: "t", Partitions: 1, Style: "eager"}}, Ops: []*chaos.Op{commit, fetch}}
}
