package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// committedOf reads the group's committed offsets of topic through
// `cohortctl offsets`.
func committedOf(t *testing.T, addr, group, topic string) map[int32]int64 {
	t.Helper()
	var rows []offsetRow
	if _, errOut, code := ctl(t, addr, "offsets", group); code == 1 && strings.Contains(errOut, "does not exist") {
		return nil
	}
	ctlJSON(t, addr, &rows, "offsets", group)
	out := map[int32]int64{}
	for _, r := range rows {
		if r.Topic == topic && r.CurrentOffset != nil {
			out[r.Partition] = *r.CurrentOffset
		}
	}
	return out
}

func sameOffsets(a, b map[int32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// The same offset, describe and topic commands against cohort and the
// reference broker.
func TestOffsetResetAndDelete(t *testing.T) {
	for name, start := range servers() {
		t.Run(name, func(t *testing.T) { offsetCommands(t, start(t)) })
	}
}

func offsetCommands(t *testing.T, addr string) {
	if _, errOut, code := ctl(t, addr, "topics", "create", "--partitions", "3", "orders"); code != 0 {
		t.Fatalf("topics create: %s", errOut)
	}
	// Dry run: the plan, and nothing committed.
	var plan []resetRow
	ctlJSON(t, addr, &plan, "offsets", "reset", "billing", "--topic", "orders", "--to-offset", "5")
	if len(plan) != 3 || plan[0].NewOffset != 5 || plan[0].CurrentOffset != nil || plan[2].Partition != 2 || plan[0].Executed {
		t.Fatalf("dry-run plan: %+v", plan)
	}
	table, _, _ := ctl(t, addr, "offsets", "reset", "billing", "--topic", "orders", "--to-offset", "5")
	if !strings.Contains(table, "dry run: nothing changed") || !strings.Contains(table, "planned") {
		t.Fatalf("dry-run table:\n%s", table)
	}
	if got := committedOf(t, addr, "billing", "orders"); len(got) != 0 {
		t.Fatalf("a dry run committed %v", got)
	}

	// To an offset, shift by N, from a file.
	ctlJSON(t, addr, &plan, "offsets", "reset", "billing", "--topic", "orders", "--to-offset", "5", "--execute")
	if len(plan) != 3 || !plan[0].Executed || !plan[2].Executed {
		t.Fatalf("executed plan: %+v", plan)
	}
	if got := committedOf(t, addr, "billing", "orders"); !sameOffsets(got, map[int32]int64{0: 5, 1: 5, 2: 5}) {
		t.Fatalf("after --to-offset: %v", got)
	}
	ctlJSON(t, addr, &plan, "offsets", "reset", "billing", "--topic", "orders", "--partitions", "0,1", "--shift-by", "-2", "--execute")
	if len(plan) != 2 || plan[0].CurrentOffset == nil || *plan[0].CurrentOffset != 5 || plan[0].NewOffset != 3 {
		t.Fatalf("shift plan: %+v", plan)
	}
	csvPath := filepath.Join(t.TempDir(), "plan.csv")
	if err := os.WriteFile(csvPath, []byte("# topic,partition,offset\norders,2,9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctlJSON(t, addr, &plan, "offsets", "reset", "billing", "--from-file", csvPath, "--execute")
	if got := committedOf(t, addr, "billing", "orders"); !sameOffsets(got, map[int32]int64{0: 3, 1: 3, 2: 9}) {
		t.Fatalf("after --shift-by and --from-file: %v", got)
	}
	if err := os.WriteFile(csvPath, []byte("orders,x,9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := ctl(t, addr, "offsets", "reset", "billing", "--from-file", csvPath); code != 1 || !strings.Contains(errOut, "plan.csv:1") {
		t.Fatalf("bad CSV: %d %q", code, errOut)
	}
	if _, _, code := ctl(t, addr, "offsets", "reset", "billing", "--topic", "orders"); code != 2 {
		t.Fatalf("reset without a mode: exit %d, want 2", code)
	}

	// kafka-consumer-groups.sh's other modes, as dry runs: the log's ends
	// (an empty log: 0 on both), the committed offsets, a time (no record
	// after it: the log end), and --all-topics (the topics the group
	// committed for).
	for _, tc := range []struct {
		args []string
		want map[int32]int64
	}{
		{[]string{"--topic", "orders", "--to-earliest"}, map[int32]int64{0: 0, 1: 0, 2: 0}},
		{[]string{"--topic", "orders", "--to-latest"}, map[int32]int64{0: 0, 1: 0, 2: 0}},
		{[]string{"--topic", "orders", "--to-current"}, map[int32]int64{0: 3, 1: 3, 2: 9}},
		{[]string{"--all-topics", "--to-current"}, map[int32]int64{0: 3, 1: 3, 2: 9}},
		{[]string{"--all-topics", "--to-datetime", "2024-03-01T12:00:00.000"}, map[int32]int64{0: 0, 1: 0, 2: 0}},
		{[]string{"--topic", "orders:2", "--to-datetime", "2024-03-01T12:00:00Z"}, map[int32]int64{2: 0}},
		{[]string{"--topic", "orders", "--shift-by", "4"}, map[int32]int64{0: 7, 1: 7, 2: 13}},
	} {
		ctlJSON(t, addr, &plan, append([]string{"offsets", "reset", "billing"}, tc.args...)...)
		got := map[int32]int64{}
		for _, r := range plan {
			if r.Topic != "orders" || r.Executed {
				t.Fatalf("offsets reset %v: %+v", tc.args, plan)
			}
			got[r.Partition] = r.NewOffset
		}
		if !sameOffsets(got, tc.want) {
			t.Fatalf("offsets reset %v: plan %v, want %v", tc.args, got, tc.want)
		}
	}
	for _, args := range [][]string{
		{"--topic", "orders", "--to-datetime", "yesterday"},
		{"--topic", "orders", "--all-topics", "--to-earliest"},
		{"--topic", "orders", "--to-earliest", "--to-latest"},
		{"--to-earliest"},
	} {
		if _, errOut, code := ctl(t, addr, append([]string{"offsets", "reset", "billing"}, args...)...); code != 2 || strings.Count(errOut, "\n") != 2 {
			t.Fatalf("offsets reset %v: exit %d %q, want 2 and one line and the hint", args, code, errOut)
		}
	}
	if got := committedOf(t, addr, "billing", "orders"); !sameOffsets(got, map[int32]int64{0: 3, 1: 3, 2: 9}) {
		t.Fatalf("dry runs changed offsets: %v", got)
	}

	// Refused while the group has a live member.
	c := startConsumer(t, addr, "billing", "orders", "ctl-live")
	deadline := time.Now().Add(30 * time.Second)
	for {
		var sts []groupState
		ctlJSON(t, addr, &sts, "groups", "describe", "--state", "billing")
		if len(sts) == 1 && sts[0].State == "Stable" && sts[0].NumMembers == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group never stable: %+v", sts)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var members []groupMember
	ctlJSON(t, addr, &members, "groups", "describe", "--members", "billing")
	if len(members) != 1 || members[0].ClientID != "ctl-live" || len(members[0].Assignment["orders"]) != 3 {
		t.Fatalf("describe --members: %+v", members)
	}
	if _, errOut, code := ctl(t, addr, "offsets", "reset", "billing", "--topic", "orders", "--to-offset", "0", "--execute"); code != 1 || !strings.Contains(errOut, "1 live members") {
		t.Fatalf("reset with a live member: %d %q", code, errOut)
	}
	c.cl.Close()
	for deadline = time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var sts []groupState
		ctlJSON(t, addr, &sts, "groups", "describe", "--state", "billing")
		if len(sts) == 1 && sts[0].State == "Empty" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group not empty after its member left: %+v", sts)
		}
	}
	if got := committedOf(t, addr, "billing", "orders"); !sameOffsets(got, map[int32]int64{0: 3, 1: 3, 2: 9}) {
		t.Fatalf("the refused reset changed offsets: %v", got)
	}

	// OffsetDelete.
	var dels []deleteRow
	ctlJSON(t, addr, &dels, "offsets", "delete", "billing", "--topic", "orders", "--partitions", "0")
	if len(dels) != 1 || !dels[0].Deleted || dels[0].Partition != 0 {
		t.Fatalf("offsets delete: %+v", dels)
	}
	if got := committedOf(t, addr, "billing", "orders"); !sameOffsets(got, map[int32]int64{1: 3, 2: 9}) {
		t.Fatalf("after offsets delete: %v", got)
	}
	out, errOut, code := ctl(t, addr, "offsets", "delete", "billing", "--topic", "orders")
	if code != 0 || strings.Count(out, "deleted") != 2 {
		t.Fatalf("offsets delete of the rest: %d %q %q", code, out, errOut)
	}
	if got := committedOf(t, addr, "billing", "orders"); len(got) != 0 {
		t.Fatalf("after deleting every offset: %v", got)
	}

	// topics delete.
	if out, errOut, code := ctl(t, addr, "topics", "delete", "orders"); code != 0 || !strings.Contains(out, "deleted topic orders") {
		t.Fatalf("topics delete: %d %q %q", code, out, errOut)
	}
	var topics []topicInfo
	ctlJSON(t, addr, &topics, "topics", "list")
	if len(topics) != 0 {
		t.Fatalf("topics after delete: %+v", topics)
	}
}
