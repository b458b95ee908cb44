package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// referenceEnv names a Kafka broker for the "reference" subtests, which run
// the same commands against it as against cohort. The broker must be fresh
// (no topics or groups), so one test runs per process: the cluster-test
// module runs TestKafkaConventions and TestOffsetResetAndDelete this way
// against a new franz-go kfake each (kfake stays out of this module), and a
// real Kafka broker can be named the same way.
const referenceEnv = "COHORT_CTL_REFERENCE_BROKER"

// servers are the brokers every convention is checked against with the
// same commands: cohort (with its default topic auto-creation) and, when
// referenceEnv is set, the reference broker.
func servers() map[string]func(*testing.T) string {
	s := map[string]func(*testing.T) string{"cohort": startNode}
	if addr := os.Getenv(referenceEnv); addr != "" {
		s["reference"] = func(*testing.T) string { return addr }
	}
	return s
}

// TestKafkaConventions checks cohortctl's kafka-consumer-groups.sh and rpk
// conventions against cohort and the reference broker.
func TestKafkaConventions(t *testing.T) {
	for name, start := range servers() {
		t.Run(name, func(t *testing.T) { conventions(t, start(t)) })
	}
}

// keysOf returns the sorted keys of a JSON object.
func keysOf(t *testing.T, m map[string]any) []string {
	t.Helper()
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// wantKeys fails unless every object of a JSON array has these keys.
func wantKeys(t *testing.T, what, out string, keys ...string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	if err := json.Unmarshal([]byte(out), &objs); err != nil || len(objs) == 0 {
		t.Fatalf("%s: %v: %q", what, err, out)
	}
	for _, o := range objs {
		for _, k := range keys {
			if _, ok := o[k]; !ok {
				t.Fatalf("%s: no key %q in %v", what, k, keysOf(t, o))
			}
		}
	}
	return objs
}

func conventions(t *testing.T, addr string) {
	mustCtl := func(args ...string) string {
		t.Helper()
		out, errOut, code := ctl(t, addr, args...)
		if code != 0 {
			t.Fatalf("cohortctl %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	mustCtl("topics", "create", "--partitions", "3", "orders")
	mustCtl("topics", "create", "--partitions", "2", "payments")

	// topic:P,... and repeated --topic; --json after the command.
	out := mustCtl("offsets", "reset", "g1", "--topic", "orders:0,2", "--topic", "payments", "--to-offset", "5", "--execute", "--json")
	plan := wantKeys(t, "reset", out, "group", "topic", "partition", "current_offset", "new_offset", "executed")
	var got []string
	for _, r := range plan {
		got = append(got, r["topic"].(string)+"/"+string('0'+rune(r["partition"].(float64))))
	}
	if want := []string{"orders/0", "orders/2", "payments/0", "payments/1"}; !slices.Equal(got, want) {
		t.Fatalf("reset orders:0,2 and payments planned %v, want %v", got, want)
	}
	if c := committedOf(t, addr, "g1", "orders"); !sameOffsets(c, map[int32]int64{0: 5, 2: 5}) {
		t.Fatalf("g1 orders after reset: %v", c)
	}
	mustCtl("offsets", "reset", "--group", "g2", "--topic", "orders", "--to-offset", "1", "--execute")

	// --dry-run changes nothing; --export prints the CSV --from-file reads.
	out = mustCtl("offsets", "reset", "g1", "--topic", "orders", "--shift-by", "2", "--dry-run")
	if !strings.Contains(out, "dry run: nothing changed") || !hasLine(out, "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET", "RESULT") {
		t.Fatalf("dry run table:\n%s", out)
	}
	if c := committedOf(t, addr, "g1", "orders"); !sameOffsets(c, map[int32]int64{0: 5, 2: 5}) {
		t.Fatalf("a dry run changed g1: %v", c)
	}
	csvOut := mustCtl("offsets", "reset", "g1", "--topic", "orders", "--shift-by", "2", "--export")
	if want := "orders,0,7\norders,1,2\norders,2,7\n"; csvOut != want {
		t.Fatalf("--export: %q, want %q", csvOut, want)
	}
	path := filepath.Join(t.TempDir(), "plan.csv")
	if err := os.WriteFile(path, []byte(csvOut), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCtl("offsets", "reset", "g1", "--from-file", path, "--execute")
	if c := committedOf(t, addr, "g1", "orders"); !sameOffsets(c, map[int32]int64{0: 7, 1: 2, 2: 7}) {
		t.Fatalf("g1 after --from-file of the export: %v", c)
	}

	// Repeated --group and --all-groups, Kafka's columns, the same keys.
	out = mustCtl("offsets", "--group", "g1", "--json", "--group", "g2")
	rows := wantKeys(t, "offsets", out, "group", "topic", "partition", "current_offset", "log_end_offset", "lag", "consumer_id", "host", "client_id")
	groups := map[string]int{}
	for _, r := range rows {
		groups[r["group"].(string)]++
	}
	if groups["g1"] != 5 || groups["g2"] != 3 {
		t.Fatalf("offsets of g1 and g2: rows per group %v", groups)
	}
	table := mustCtl("offsets", "--all-groups")
	if !hasLine(table, "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID") ||
		!hasLine(table, "g1", "orders", "1", "2") || !hasLine(table, "g2", "orders", "2", "1") {
		t.Fatalf("offsets --all-groups:\n%s", table)
	}
	table = mustCtl("groups", "describe", "g1", "g2")
	for _, want := range [][]string{{"GROUP", "g1"}, {"GROUP", "g2"}, {"COORDINATOR"}, {"TOTAL-LAG"}, {"g1", "payments", "1", "5"}} {
		if !hasLine(table, want...) {
			t.Fatalf("groups describe g1 g2 lacks %v:\n%s", want, table)
		}
	}
	out = mustCtl("groups", "describe", "--all-groups", "--json")
	descs := wantKeys(t, "describe", out, "group", "coordinator", "coordinator_id", "state", "total_lag", "members", "offsets", "num_members")
	if len(descs) != 2 || descs[0]["group"] != "g1" || descs[1]["group"] != "g2" || descs[0]["coordinator"] == "" {
		t.Fatalf("describe --all-groups: %v", descs)
	}
	out = mustCtl("groups", "describe", "--state", "--group", "g1", "--json")
	wantKeys(t, "describe --state", out, "group", "coordinator", "state", "protocol_type", "protocol", "generation", "num_members")
	wantKeys(t, "groups list", mustCtl("groups", "list", "--json"), "group", "protocol_type", "state")
	wantKeys(t, "topics list", mustCtl("topics", "list", "--json"), "topic", "partitions")

	// A group that does not exist: exit 1, named; the others still shown.
	for _, args := range [][]string{
		{"groups", "describe", "nosuch"},
		{"groups", "describe", "--state", "--group", "nosuch"},
		{"groups", "describe", "--members", "nosuch"},
		{"offsets", "nosuch"},
		{"groups", "delete", "nosuch"},
	} {
		if _, errOut, code := ctl(t, addr, args...); code != 1 || !strings.Contains(errOut, "group nosuch does not exist") {
			t.Fatalf("cohortctl %v: exit %d %q, want 1 and the group named", args, code, errOut)
		}
	}
	out, errOut, code := ctl(t, addr, "offsets", "g1", "nosuch")
	if code != 1 || !strings.Contains(errOut, "group nosuch does not exist") || !hasLine(out, "g1", "orders", "0", "7") {
		t.Fatalf("offsets g1 nosuch: exit %d %q\n%s", code, errOut, out)
	}

	// Partitions that do not exist are refused, dry run or not, and no
	// topic is created.
	for _, args := range [][]string{
		{"offsets", "reset", "g1", "--topic", "nosuch", "--to-offset", "0", "--execute"},
		{"offsets", "reset", "g1", "--topic", "nosuch", "--to-offset", "0"},
		{"offsets", "reset", "g1", "--topic", "nosuch:0", "--to-offset", "0", "--dry-run"},
	} {
		if _, errOut, code := ctl(t, addr, args...); code != 1 || !strings.Contains(errOut, "topic nosuch does not exist") {
			t.Fatalf("cohortctl %v: exit %d %q", args, code, errOut)
		}
	}
	if _, errOut, code := ctl(t, addr, "offsets", "reset", "g1", "--topic", "orders:7", "--to-offset", "0"); code != 1 || !strings.Contains(errOut, "no partition 7") {
		t.Fatalf("reset of orders:7: exit %d %q", code, errOut)
	}
	if err := os.WriteFile(path, []byte("nosuch,0,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := ctl(t, addr, "offsets", "reset", "g1", "--from-file", path, "--execute"); code != 1 || !strings.Contains(errOut, "topic nosuch does not exist") {
		t.Fatalf("reset from a file naming nosuch: exit %d %q", code, errOut)
	}
	var topics []topicInfo
	ctlJSON(t, addr, &topics, "topics", "list")
	var names []string
	for _, tp := range topics {
		names = append(names, tp.Name)
	}
	if !slices.Equal(names, []string{"orders", "payments"}) {
		t.Fatalf("topics after resets of nosuch: %v", names)
	}

	// Usage mistakes exit 2.
	for _, args := range [][]string{
		{"groups", "describe"},
		{"groups", "describe", "g1", "--all-groups"},
		{"offsets", "reset", "g1", "--topic", "orders", "--to-offset", "1", "--dry-run", "--execute"},
		{"offsets", "reset", "g1", "--topic", "orders:x", "--to-offset", "1"},
		{"groups", "list", "--json=maybe"},
	} {
		if _, _, code := ctl(t, addr, args...); code != 2 {
			t.Fatalf("cohortctl %v: exit %d, want 2", args, code)
		}
	}

	// A consumer-protocol (KIP-848) group is described as one, with its
	// member, as groups list types it (kfake answers DescribeGroups for
	// it Stable with no members).
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("kip848"), kgo.ConsumerGroup("next-gen"), kgo.ConsumeTopics("orders"),
		kgo.Balancers(kgo.RangeBalancer()), kgo.ServerSideBalancer(), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	go func() {
		for cl.Context().Err() == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			cl.PollFetches(ctx)
			cancel()
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		info := describeIfAny(t, addr, "next-gen")
		if info.Type == "consumer" && info.NumMembers == 1 && info.Members[0].ClientID == "kip848" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer-protocol group described as %+v", info)
		}
	}
	var listed []listedGroup
	ctlJSON(t, addr, &listed, "groups", "list")
	if i := slices.IndexFunc(listed, func(g listedGroup) bool { return g.Group == "next-gen" }); i < 0 || listed[i].Type != "consumer" {
		t.Fatalf("groups list: %+v", listed)
	}
}

func TestVersion(t *testing.T) {
	out, errOut, code := ctl(t, "127.0.0.1:1", "--version")
	if code != 0 || !strings.HasPrefix(out, "cohortctl ") || !strings.Contains(out, "revision ") {
		t.Fatalf("--version: exit %d %q %q", code, out, errOut)
	}
}
