package raftfsm

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"github.com/prometheus/client_golang/prometheus"
)

func openTestSharedLog(t testing.TB, dir string) *sharedLog {
	t.Helper()
	s, err := openSharedLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testShardLog(t testing.TB, s *sharedLog, k int) *shardLog {
	t.Helper()
	l, err := s.shard(k)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testEntry(index, term uint64) *raft.Log {
	return &raft.Log{
		Index: index, Term: term, Type: raft.LogCommand,
		Data:       fmt.Appendf(nil, "entry %d", index),
		AppendedAt: time.Unix(1_700_000_000, int64(index)),
	}
}

func sameEntry(a, b *raft.Log) bool {
	return a.Index == b.Index && a.Term == b.Term && a.Type == b.Type && bytes.Equal(a.Data, b.Data) &&
		bytes.Equal(a.Extensions, b.Extensions) && a.AppendedAt.Equal(b.AppendedAt)
}

// A shard's log in the shared file answers as raft-boltdb does: indexes 0
// when empty, ErrLogNotFound and "not found" for what is not there,
// inclusive ranges deleted, and everything back after a reopen; shards do
// not see each other's entries.
func TestSharedLogStoresLikeRaftBoltdb(t *testing.T) {
	dir := t.TempDir()
	s := openTestSharedLog(t, dir)
	a, b := testShardLog(t, s, 0), testShardLog(t, s, 1)
	if first, _ := a.FirstIndex(); first != 0 {
		t.Fatalf("empty log: first index %d", first)
	}
	if last, _ := a.LastIndex(); last != 0 {
		t.Fatalf("empty log: last index %d", last)
	}
	var got raft.Log
	if err := a.GetLog(1, &got); err != raft.ErrLogNotFound {
		t.Fatalf("missing entry: %v", err)
	}
	if _, err := a.GetUint64([]byte("CurrentTerm")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing key: %v", err)
	}
	var entries []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		entries = append(entries, testEntry(i, 2))
	}
	entries[3].Data, entries[4].Extensions = nil, []byte("ext")
	entries[5].AppendedAt = time.Time{}
	if err := a.StoreLogs(entries); err != nil {
		t.Fatal(err)
	}
	if err := b.StoreLog(testEntry(1, 7)); err != nil {
		t.Fatal(err)
	}
	if err := a.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatal(err)
	}
	if err := a.Set([]byte("LastVoteCand"), []byte("node2")); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	s.close()

	s = openTestSharedLog(t, dir)
	defer s.close()
	a, b = testShardLog(t, s, 0), testShardLog(t, s, 1)
	if first, last := must(a.FirstIndex()), must(a.LastIndex()); first != 4 || last != 10 {
		t.Fatalf("indexes %d..%d, want 4..10", first, last)
	}
	for i := uint64(4); i <= 10; i++ {
		if err := a.GetLog(i, &got); err != nil || !sameEntry(&got, entries[i-1]) {
			t.Fatalf("entry %d: %+v, %v; want %+v", i, got, err, entries[i-1])
		}
	}
	if err := a.GetLog(3, &got); err != raft.ErrLogNotFound {
		t.Fatalf("deleted entry: %v", err)
	}
	if term := must(a.GetUint64([]byte("CurrentTerm"))); term != 2 {
		t.Fatalf("term %d", term)
	}
	if v := must(a.Get([]byte("LastVoteCand"))); string(v) != "node2" {
		t.Fatalf("vote %q", v)
	}
	if err := b.GetLog(1, &got); err != nil || got.Term != 7 {
		t.Fatalf("shard 1's entry: %+v, %v", got, err)
	}
	if last := must(b.LastIndex()); last != 1 {
		t.Fatalf("shard 1 sees %d entries", last)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Shards that write at the same time share transactions, and every write
// is there once its call returned.
func TestSharedLogCommitsShardsTogether(t *testing.T) {
	s := openTestSharedLog(t, t.TempDir())
	defer s.close()
	const shards, writes = 8, 50
	logs := make([]*shardLog, shards)
	for k := range logs {
		logs[k] = testShardLog(t, s, k)
	}
	var wg sync.WaitGroup
	for k := range shards {
		wg.Go(func() {
			for i := uint64(1); i <= writes; i++ {
				if err := logs[k].StoreLogs([]*raft.Log{testEntry(i, uint64(k+1))}); err != nil {
					t.Error(err)
					return
				}
				var got raft.Log
				if err := logs[k].GetLog(i, &got); err != nil || got.Term != uint64(k+1) {
					t.Errorf("shard %d entry %d right after its write: %+v, %v", k, i, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for k, l := range logs {
		if last := must(l.LastIndex()); last != writes {
			t.Fatalf("shard %d: last index %d", k, last)
		}
	}
	txs := s.commits.Load()
	if txs >= shards*writes {
		t.Fatalf("%d transactions for %d writes of %d shards at once: none shared", txs, shards*writes, shards)
	}
	t.Logf("%d writes in %d transactions", shards*writes, txs)
}

// One shard's failing write fails that shard's call only; the shards
// committed with it keep theirs.
func TestSharedLogFailureIsTheShards(t *testing.T) {
	s := openTestSharedLog(t, t.TempDir())
	defer s.close()
	good := testShardLog(t, s, 0)
	bad := &shardLog{log: s, logs: []byte("no-such-bucket"), stable: []byte("no-such-bucket")}
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			if i%2 == 0 {
				errs[i] = good.StoreLog(testEntry(uint64(i+1), 1))
			} else {
				errs[i] = bad.Set([]byte("k"), []byte("v"))
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && err != nil {
			t.Fatalf("good write %d: %v", i, err)
		}
		if i%2 == 1 && err == nil {
			t.Fatalf("bad write %d succeeded", i)
		}
	}
	for i := 0; i < len(errs); i += 2 {
		var got raft.Log
		if err := good.GetLog(uint64(i+1), &got); err != nil {
			t.Fatalf("good entry %d: %v", i+1, err)
		}
	}
}

// A sharded node written before the shared log kept a raft-boltdb file per
// shard. Opened now, it moves each into the shared log, keeps its groups,
// term and vote, and leaves a folder where the file was, so that an older
// cohortd fails on the shard instead of starting it from an empty log.
func TestShardLogsMoveIntoTheSharedLog(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(dir)
	cfg.Shards = 2
	n := openLeader(t, cfg)
	var groups []string
	for k, rep := range n.Shards() {
		waitFor(t, "the shard to lead", rep.IsLeader)
		g := fmt.Sprintf("g-shard-%d", k)
		if err := appendWait(t, rep.Store, g, nil, groupRecord(g, 3, "m1")); err != nil {
			t.Fatal(err)
		}
		groups = append(groups, g)
	}
	hashes := []string{n.Shards()[0].FSM.Hash(), n.Shards()[1].FSM.Hash()}
	n.Close()

	// Put the shards back in files of their own, as the older layout had.
	s := openTestSharedLog(t, dir)
	type saved struct {
		entries []*raft.Log
		term    uint64
	}
	var before []saved
	for k := range 2 {
		l := testShardLog(t, s, k)
		path := filepath.Join(ShardDir(dir, k), "raft.db")
		old, err := raftboltdb.New(raftboltdb.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		var sv saved
		for i := must(l.FirstIndex()); i > 0 && i <= must(l.LastIndex()); i++ {
			var e raft.Log
			if err := l.GetLog(i, &e); err != nil {
				t.Fatal(err)
			}
			sv.entries = append(sv.entries, &e)
		}
		if err := old.StoreLogs(sv.entries); err != nil {
			t.Fatal(err)
		}
		for _, key := range stableKeys {
			if v, err := l.Get([]byte(key)); err == nil {
				if err := old.Set([]byte(key), v); err != nil {
					t.Fatal(err)
				}
			}
		}
		sv.term = must(old.GetUint64([]byte("CurrentTerm")))
		before = append(before, sv)
		old.Close()
	}
	s.close()
	if err := os.Remove(filepath.Join(dir, "shards", sharedLogFile)); err != nil {
		t.Fatal(err)
	}

	n = openLeader(t, cfg)
	for k, rep := range n.Shards() {
		waitFor(t, "the shard to lead", rep.IsLeader)
		if err := rep.Barrier(waitLimit); err != nil {
			t.Fatal(err)
		}
		if got, _, err := rep.FSM.Load(groups[k]); err != nil || got.GetGeneration() != 3 {
			t.Fatalf("shard %d: group %v, %v after the move", k, got, err)
		}
		if rep.FSM.Hash() != hashes[k] {
			t.Fatalf("shard %d: hash %s, was %s", k, rep.FSM.Hash(), hashes[k])
		}
		path := filepath.Join(ShardDir(dir, k), "raft.db")
		if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
			t.Fatalf("shard %d: %s is not the moved folder: %v", k, path, err)
		}
		if _, err := os.Stat(path + ".moved"); err != nil {
			t.Fatalf("shard %d: old file: %v", k, err)
		}
		if _, err := raftboltdb.New(raftboltdb.Options{Path: path}); err == nil {
			t.Fatalf("shard %d: an older cohortd would open the moved shard", k)
		}
	}
	n.Close()
	s = openTestSharedLog(t, dir)
	defer s.close()
	for k, sv := range before {
		l := testShardLog(t, s, k)
		if term := must(l.GetUint64([]byte("CurrentTerm"))); term < sv.term {
			t.Fatalf("shard %d: term %d, was %d", k, term, sv.term)
		}
		for _, want := range sv.entries {
			var got raft.Log
			if err := l.GetLog(want.Index, &got); err != nil || !sameEntry(&got, want) {
				t.Fatalf("shard %d entry %d: %+v, %v", k, want.Index, got, err)
			}
		}
	}
}

func FuzzDecodeLog(f *testing.F) {
	f.Add(encodeLog(testEntry(1, 1)))
	f.Add(encodeLog(&raft.Log{Type: raft.LogConfiguration, Extensions: []byte{1}}))
	f.Add([]byte{logVersion, 0xff})
	f.Fuzz(func(t *testing.T, v []byte) {
		var e raft.Log
		if err := decodeLog(9, v, &e); err != nil {
			return
		}
		// What decodes encodes back to the same bytes, but for the
		// variable-length forms of the same numbers.
		var again raft.Log
		if err := decodeLog(9, encodeLog(&e), &again); err != nil || !sameEntry(&e, &again) {
			t.Fatalf("%x: re-encoded entry %+v, %v; was %+v", v, again, err, e)
		}
	})
}

// /metrics counts the shared log's transactions and the writes they
// carried.
func TestSharedLogMetrics(t *testing.T) {
	cfg := testConfig(t.TempDir())
	cfg.Shards = 2
	n := openLeader(t, cfg)
	defer n.Close()
	reg := prometheus.NewRegistry()
	if err := n.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	for _, rep := range n.Shards() {
		waitFor(t, "the shard to lead", rep.IsLeader)
		if err := appendWait(t, rep.Store, "g", nil, groupRecord("g", 1, "m1")); err != nil {
			t.Fatal(err)
		}
	}
	txs, writes := gathered(t, reg, "cohort_raft_shared_log_transactions_total"), gathered(t, reg, "cohort_raft_shared_log_writes_total")
	if txs < 1 || writes < txs || writes != float64(n.shardLog.writes.Load()) {
		t.Fatalf("%v transactions, %v writes (log counted %d)", txs, writes, n.shardLog.writes.Load())
	}
}

// gathered is the value of the unlabelled counter name in reg.
func gathered(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// sharedLogChildEnv makes the test binary the writer process of
// TestSharedLogKeepsWhatItAcknowledgedThroughSIGKILL.
const sharedLogChildEnv = "COHORT_SHARED_LOG_WRITER_DIR"

// A process killed with SIGKILL while 8 shards write to its shared log
// loses none of the writes it reported done: on reopening, every shard
// holds every entry up to the last it acknowledged, and each entry is
// whole.
func TestSharedLogKeepsWhatItAcknowledgedThroughSIGKILL(t *testing.T) {
	if dir := os.Getenv(sharedLogChildEnv); dir != "" {
		sharedLogWriter(dir)
		return
	}
	for round := range 3 {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestSharedLogKeepsWhatItAcknowledgedThroughSIGKILL$")
		cmd.Env = append(os.Environ(), sharedLogChildEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := map[int]uint64{}
		sc := bufio.NewScanner(out)
		deadline := time.Now().Add(time.Duration(200+150*round) * time.Millisecond)
		for sc.Scan() {
			var k int
			var i uint64
			if _, err := fmt.Sscanf(sc.Text(), "%d %d", &k, &i); err == nil {
				acked[k] = max(acked[k], i)
			}
			if time.Now().After(deadline) && len(acked) == 8 {
				break
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		s := openTestSharedLog(t, dir)
		total := uint64(0)
		for k, last := range acked {
			l := testShardLog(t, s, k)
			for i := uint64(1); i <= last; i++ {
				var got raft.Log
				if err := l.GetLog(i, &got); err != nil || !sameEntry(&got, testEntry(i, uint64(k+1))) {
					t.Fatalf("round %d shard %d: acknowledged entry %d of %d: %+v, %v", round, k, i, last, got, err)
				}
			}
			total += last
		}
		s.close()
		if len(acked) != 8 || total == 0 {
			t.Fatalf("round %d: the writer acknowledged %v", round, acked)
		}
		t.Logf("round %d: %d acknowledged entries of 8 shards all there", round, total)
	}
}

// sharedLogWriter appends to 8 shards of the shared log in dir, one
// goroutine each, printing "shard index" after each append returned, until
// it is killed.
func sharedLogWriter(dir string) {
	s, err := openSharedLog(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var mu sync.Mutex
	for k := range 8 {
		l, err := s.shard(k)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		go func() {
			for i := uint64(1); ; i++ {
				if err := l.StoreLogs([]*raft.Log{testEntry(i, uint64(k+1))}); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				mu.Lock()
				fmt.Fprintf(os.Stdout, "%d %d\n", k, i)
				mu.Unlock()
			}
		}()
	}
	select {}
}
