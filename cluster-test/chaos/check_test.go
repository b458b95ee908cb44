package chaos

import (
	"strings"
	"testing"
	"time"

	clustertest "github.com/cohort-coord/cohort/cluster-test"
)

var t0 = time.Unix(1_000_000, 0)

func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func commitOp(client string, gen int32, p int32, off int64, start, end int, acked bool, code int16, unknown bool) *Op {
	o := &Op{Op: clustertest.Op{Kind: clustertest.OpCommit, Group: "g", Client: client, MemberID: client, Gen: gen, Topic: "t",
		Offsets: map[int32]int64{p: off}, Acked: map[int32]bool{p: acked}, Code: code, Start: ms(start), End: ms(end)}}
	if unknown {
		o.ErrText = "i/o timeout"
	}
	return o
}

func fetchOp(p int32, off int64, start, end int) *Op {
	return &Op{Op: clustertest.Op{Kind: OpFetch, Group: "g", Client: "f", Gen: -1, Topic: "t", Offsets: map[int32]int64{p: off}, Start: ms(start), End: ms(end)}}
}

func record(ops ...*Op) *Record {
	return &Record{Start: t0, FaultsStart: t0, FaultsEnd: ms(100000), End: ms(100000), SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second,
		Groups: []GroupInfo{{ID: "g", Topic: "t", Partitions: 2, Style: "eager"}}, Ops: ops}
}

func invariants(vs []Violation) string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Invariant+": "+v.Text)
	}
	return strings.Join(out, "\n")
}

func TestLinearizableOffsets(t *testing.T) {
	cases := []struct {
		name  string
		ops   []*Op
		legal bool
	}{
		{"reads follow acknowledged commits", []*Op{commitOp("a", 1, 0, 1, 0, 10, true, 0, false), fetchOp(0, 1, 20, 30), commitOp("a", 1, 0, 2, 40, 50, true, 0, false), fetchOp(0, 2, 60, 70)}, true},
		{"a read concurrent with a commit sees either", []*Op{commitOp("a", 1, 0, 1, 0, 10, true, 0, false), commitOp("a", 1, 0, 2, 20, 50, true, 0, false), fetchOp(0, 1, 25, 30)}, true},
		{"an unanswered commit may apply late", []*Op{commitOp("a", 1, 0, 1, 0, 10, true, 0, false), commitOp("a", 1, 0, 2, 20, 30, false, 0, true), fetchOp(0, 1, 40, 50), fetchOp(0, 2, 60, 70)}, true},
		{"an unanswered commit may never apply", []*Op{commitOp("a", 1, 0, 1, 0, 10, true, 0, false), commitOp("a", 1, 0, 2, 20, 30, false, 0, true), fetchOp(0, 1, 40, 50)}, true},
		{"NOT_COORDINATOR is an unknown outcome", []*Op{commitOp("a", 1, 0, 5, 0, 10, false, 16, false), fetchOp(0, 5, 20, 30)}, true},
		{"an acknowledged commit is lost", []*Op{commitOp("a", 1, 0, 1, 0, 10, true, 0, false), commitOp("a", 1, 0, 2, 20, 30, true, 0, false), fetchOp(0, 1, 40, 50)}, false},
		{"a refused commit shows up", []*Op{commitOp("a", 1, 0, 1, 0, 10, true, 0, false), commitOp("z", 0, 0, 9, 20, 30, false, 22, false), fetchOp(0, 9, 40, 50)}, false},
		{"an unanswered commit undone", []*Op{commitOp("a", 1, 0, 2, 20, 30, false, 0, true), fetchOp(0, 2, 40, 50), fetchOp(0, -1, 60, 70)}, false},
		{"reads go back", []*Op{commitOp("a", 1, 0, 1, 0, 10, true, 0, false), commitOp("a", 1, 0, 2, 20, 60, true, 0, false), fetchOp(0, 2, 30, 35), fetchOp(0, 1, 40, 45)}, false},
	}
	for _, c := range cases {
		res, vs := checkLinearizable(record(c.ops...))
		if got := len(vs) == 0; got != c.legal {
			t.Errorf("%s: result %s, violations:\n%s", c.name, res, invariants(vs))
		}
		if !c.legal && (len(vs) == 0 || vs[0].At.IsZero()) {
			t.Errorf("%s: a violation without its moment: %v", c.name, vs)
		}
	}
	// A client that retries commits itself (franz-go, the member library)
	// reports the answer to its last attempt: UNKNOWN_MEMBER_ID from the
	// new coordinator after the first attempt was applied through a
	// leader that paused (the 5-minute pause run with seed 105).
	for _, style := range []string{"cooperative", "library"} {
		rec := record(commitOp("a", 1, 0, 1, 0, 10, true, 0, false), commitOp("a", 1, 0, 2, 20, 7000, false, 25, false), fetchOp(0, 2, 6000, 6100))
		rec.Groups[0].Style = style
		if _, vs := checkLinearizable(rec); len(vs) != 0 {
			t.Errorf("%s group: a refusal after the client's own retries is an unknown outcome, got:\n%s", style, invariants(vs))
		}
	}
}

func TestFencingAndGenerations(t *testing.T) {
	join := func(client string, gen int32, start, end int) *Op {
		return &Op{Op: clustertest.Op{Kind: clustertest.OpJoin, Group: "g", Client: client, MemberID: client, Gen: gen, Leader: "a", Protocol: "range", Start: ms(start), End: ms(end)}}
	}
	hb := func(client string, gen int32, start, end int) *Op {
		return &Op{Op: clustertest.Op{Kind: clustertest.OpHeartbeat, Group: "g", Client: client, MemberID: client, Gen: gen, Start: ms(start), End: ms(end)}}
	}
	clean := record(join("a", 1, 0, 10), join("b", 1, 0, 10), hb("b", 1, 20, 25), join("a", 2, 30, 40), hb("b", 1, 35, 45), join("b", 2, 50, 60),
		commitOp("z", 1, 0, 9, 70, 75, false, 22, false))
	if vs := append(checkFencing(clean), checkGenerations(clean, clean.ClusterOps())...); len(vs) != 0 {
		t.Fatalf("clean history:\n%s", invariants(vs))
	}
	stale := record(join("a", 1, 0, 10), join("a", 2, 30, 40), hb("b", 1, 50, 55), commitOp("z", 1, 0, 9, 70, 75, true, 0, false))
	if vs := checkFencing(stale); len(vs) != 2 || vs[0].At != ms(50) {
		t.Errorf("stale heartbeat and zombie commit: got\n%s", invariants(vs))
	}
	// A static member replacing itself: two ids of one client in one
	// generation, the second not in the leader's list, same partitions.
	syncAs := func(client, member string, gen int32, parts ...int32) *Op {
		return &Op{Op: clustertest.Op{Kind: clustertest.OpSync, Group: "g", Client: client, MemberID: member, Gen: gen, Assignment: parts, Start: ms(80), End: ms(90)}}
	}
	lead := join("a", 5, 0, 10)
	lead.Members = []string{"a", "s-1"}
	replaced := record(lead, syncAs("a", "a", 5, 0), syncAs("s", "s-1", 5, 1), syncAs("s", "s-2", 5, 1))
	if vs := checkGenerations(replaced, replaced.ClusterOps()); len(vs) != 0 {
		t.Errorf("static replacement: got\n%s", invariants(vs))
	}
	// The same with a zombie committing with the replaced ids, and the
	// static member leading: its new id leads the same generation (the
	// 5-minute pause run with seed 110).
	zombie := commitOp("zombie-s", 5, 0, 9, 95, 99, false, 25, false)
	zombie.MemberID = "s-2"
	lead2 := join("s", 5, 0, 10)
	lead2.MemberID, lead2.Leader, lead2.Members = "s-1", "s-1", []string{"s-1", "a"}
	again := join("s", 5, 50, 60)
	again.MemberID, again.Leader, again.Members = "s-2", "s-2", []string{"s-1", "a"}
	staticLeader := record(lead2, again, syncAs("s", "s-1", 5, 1), syncAs("s", "s-2", 5, 1), syncAs("a", "a", 5, 0), zombie)
	if vs := checkGenerations(staticLeader, staticLeader.ClusterOps()); len(vs) != 0 {
		t.Errorf("static leader replacing itself, with a zombie: got\n%s", invariants(vs))
	}
	replaced.Ops[3].Client = "other"
	if vs := checkGenerations(replaced, replaced.ClusterOps()); len(vs) != 2 {
		t.Errorf("a second consumer with the same partitions: got\n%s", invariants(vs))
	}
	back := record(join("a", 3, 0, 10), join("b", 2, 20, 30))
	if vs := checkGenerations(back, back.ClusterOps()); len(vs) != 1 || !strings.Contains(vs[0].Text, "joined generation 2 after generation 3") {
		t.Errorf("generation handed out after a higher one: got\n%s", invariants(vs))
	}
}

func TestOwnershipOverlap(t *testing.T) {
	sync := func(client string, gen int32, end int, parts ...int32) *Op {
		return &Op{Op: clustertest.Op{Kind: clustertest.OpSync, Group: "g", Client: client, MemberID: client, Gen: gen, Assignment: parts, Start: ms(end - 5), End: ms(end)}}
	}
	join := func(client string, start int) *Op {
		return &Op{Op: clustertest.Op{Kind: clustertest.OpJoin, Group: "g", Client: client, MemberID: client, Gen: 2, Leader: "a", Start: ms(start), End: ms(start + 50)}}
	}
	// a owns 0 and 1, rejoins at 100 (gives them up), b gets 1 at 160.
	clean := record(sync("a", 1, 10, 0, 1), join("a", 100), join("b", 100), sync("a", 2, 160, 0), sync("b", 2, 160, 1))
	if vs := checkOwnership(clean); len(vs) != 0 {
		t.Fatalf("clean handover:\n%s", invariants(vs))
	}
	// b gets 1 while a, which has not rejoined yet, still owns it.
	early := record(sync("a", 1, 10, 0, 1), join("b", 100), sync("b", 2, 160, 1), join("a", 200))
	vs := checkOwnership(early)
	if len(vs) != 1 || vs[0].At != ms(160) || !strings.Contains(vs[0].Text, "partition 1 owned by a") {
		t.Errorf("early handout: got\n%s", invariants(vs))
	}
	// A member silent for a session timeout (blocked on a paused
	// coordinator) loses its partitions then, even if it hears so later
	// (the 5-minute run with seed 8: franz-go consumers stuck 7 s on a
	// paused leader).
	silent := record(sync("a", 1, 10, 0), join("b", 8000), sync("b", 2, 8100, 0), join("a", 9000))
	if vs := checkOwnership(silent); len(vs) != 0 {
		t.Errorf("a silent member's partitions handed out after its session: got\n%s", invariants(vs))
	}
	silent.Ops = append(silent.Ops, &Op{Op: clustertest.Op{Kind: clustertest.OpHeartbeat, Group: "g", Client: "a", MemberID: "a", Gen: 1, Start: ms(5000), End: ms(5010)}})
	sortOps(silent.Ops)
	if vs := checkOwnership(silent); len(vs) != 1 {
		t.Errorf("the same handout while the member still heartbeats: got\n%s", invariants(vs))
	}
	// A crash ends ownership; franz-go callbacks open and close it.
	crash := record(sync("a", 1, 10, 0))
	crash.Events = []Event{{At: ms(50), Group: "g", Client: "a", Kind: "crash"},
		{At: ms(60), Group: "g", Client: "k", Kind: "assigned", Partitions: []int32{0}},
		{At: ms(90), Group: "g", Client: "k", Kind: "revoked", Partitions: []int32{0}},
		{At: ms(80), Group: "g", Client: "k2", Kind: "assigned", Partitions: []int32{0}}}
	if vs := checkOwnership(crash); len(vs) != 1 || !strings.Contains(vs[0].Text, "k (from") {
		t.Errorf("crash and callbacks: got\n%s", invariants(vs))
	}
}

func TestFailoverRebalances(t *testing.T) {
	join := func(client string, gen int32, end int) *Op {
		return &Op{Op: clustertest.Op{Kind: clustertest.OpJoin, Group: "g", Client: client, MemberID: client, Gen: gen, Leader: "a", Start: ms(end - 10), End: ms(end)}}
	}
	hb := func(client string, end int) *Op {
		return &Op{Op: clustertest.Op{Kind: clustertest.OpHeartbeat, Group: "g", Client: client, MemberID: client, Gen: 1, Start: ms(end - 5), End: ms(end)}}
	}
	var ops []*Op
	for i := 0; i < 100; i++ {
		ops = append(ops, hb("a", 1000+i*200), hb("b", 1000+i*200))
	}
	ops = append(ops, join("a", 1, 500), join("b", 1, 500), join("a", 2, 12000))
	sortOps(ops)
	rec := record(ops...)
	if vs := checkFailoverRebalances(rec); len(vs) != 1 || vs[0].At != ms(12000) {
		t.Errorf("a rebalance while everyone heartbeats: got\n%s", invariants(vs))
	}
	rec.Events = []Event{{At: ms(9000), Group: "g", Client: "c", Kind: "add"}}
	if vs := checkFailoverRebalances(rec); len(vs) != 0 {
		t.Errorf("a rebalance after a member joined: got\n%s", invariants(vs))
	}
	// A member that could not reach any coordinator for a session timeout
	// and was then told UNKNOWN_MEMBER_ID.
	rec.Events = nil
	expired := hb("c", 9000)
	expired.Code = 25
	rec.Ops = append(rec.Ops, hb("c", 1000), expired)
	sortOps(rec.Ops)
	if vs := checkFailoverRebalances(rec); len(vs) != 0 {
		t.Errorf("a rebalance after an earned expiry: got\n%s", invariants(vs))
	}
	// The same answer one second after a successful heartbeat is not earned.
	rec.Ops = append(rec.Ops, hb("c", 8000))
	sortOps(rec.Ops)
	if vs := checkFailoverRebalances(rec); len(vs) != 1 {
		t.Errorf("UNKNOWN_MEMBER_ID right after a heartbeat: got\n%s", invariants(vs))
	}

	// A crashed member's expiry that failovers kept postponing (session
	// timers restart on each takeover) causes the next generation, 25 s
	// after the crash (the 5-minute run with seed 7).
	var long []*Op
	for i := 0; i < 250; i++ {
		long = append(long, hb("a", 1000+i*200), hb("b", 1000+i*200))
	}
	long = append(long, join("a", 1, 500), join("b", 1, 500), join("a", 2, 45000), join("b", 2, 45000))
	sortOps(long)
	rec = record(long...)
	rec.Events = []Event{{At: ms(20000), Group: "g", Client: "c", Kind: "crash"}}
	if vs := checkFailoverRebalances(rec); len(vs) != 0 {
		t.Errorf("a late expiry of a crashed member: got\n%s", invariants(vs))
	}
	rec.Events = nil
	if vs := checkFailoverRebalances(rec); len(vs) != 1 {
		t.Errorf("the same rebalance without the crash: got\n%s", invariants(vs))
	}
}

func TestRecordRoundTrip(t *testing.T) {
	rec := record(commitOp("a", 1, 0, 1, 0, 10, false, 0, true), fetchOp(0, 1, 20, 30))
	rec.Live = map[string][]Violation{"I7": {{Invariant: "I7", At: ms(5), Text: "hashes differ"}}}
	path := t.TempDir() + "/h.json"
	if err := rec.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ops := got.ClusterOps()
	if len(ops) != 2 || ops[0].Err == nil || ops[0].Err.Error() != "i/o timeout" || ops[1].Offsets[0] != 1 {
		t.Errorf("ops after a round trip: %+v %+v", ops[0], ops[1])
	}
	rep := Check(got, Floor{})
	if rep.ByInvariant()["I7"] != 1 || !strings.Contains(rep.Timeline(), "hashes differ") || !strings.Contains(rep.Summary(), "I7") {
		t.Errorf("live violation lost: %v", rep.Violations)
	}
}
