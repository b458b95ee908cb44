package chaos

import (
	"strings"
	"testing"
	"time"

	clustertest "github.com/cohort-coord/cohort/cluster-test"
)

// L3: a crashed member's partitions owned again within its session timeout,
// one failover, the rebalance timeout and 5 s; later than that (as when
// every takeover restarted the dead member's session) is a violation.
func TestCrashLiveness(t *testing.T) {
	sync := func(client string, gen int32, end int, parts ...int32) *Op {
		return &Op{Op: clustertest.Op{Kind: clustertest.OpSync, Group: "g", Client: client, MemberID: client, Gen: gen, Assignment: parts, Start: ms(end - 5), End: ms(end)}}
	}
	hb := func(client string, end int) *Op {
		return &Op{Op: clustertest.Op{Kind: clustertest.OpHeartbeat, Group: "g", Client: client, MemberID: client, Gen: 2, Start: ms(end - 5), End: ms(end)}}
	}
	run := func(reassignedAt int, faults ...Fault) []Violation {
		ops := []*Op{sync("a", 1, 10, 0), sync("b", 1, 10, 1)}
		for at := 200; at < 60_000; at += 200 {
			ops = append(ops, hb("b", at))
		}
		ops = append(ops, sync("b", 2, reassignedAt, 0, 1))
		sortOps(ops)
		rec := record(ops...)
		rec.SessionTimeout, rec.RebalanceTimeout = 6*time.Second, 6*time.Second
		rec.End = ms(70_000)
		rec.Events = []Event{{At: ms(100), Group: "g", Client: "a", Kind: "crash"}}
		rec.Faults = faults
		return checkCrashLiveness(rec)
	}
	// 6 s session + 6 s grace + 6 s rebalance + 5 s = 23 s after the crash.
	if vs := run(20_000); len(vs) != 0 {
		t.Errorf("reassigned 20 s after the crash: got\n%s", invariants(vs))
	}
	if vs := run(30_000); len(vs) != 1 || vs[0].Invariant != "L3" || !strings.Contains(vs[0].Text, "partition 0 of a") {
		t.Errorf("reassigned 30 s after the crash: got\n%s", invariants(vs))
	}
	// A 5 s kill during the wait adds its length.
	kill := Fault{Kind: "kill", Start: ms(3000), End: ms(8000)}
	if vs := run(27_000, kill); len(vs) != 0 {
		t.Errorf("reassigned 27 s after the crash with a 5 s fault: got\n%s", invariants(vs))
	}
	// Never reassigned, the run going on long past the bound.
	if vs := run(69_000); len(vs) != 1 {
		t.Errorf("never reassigned: got\n%s", invariants(vs))
	}
}
