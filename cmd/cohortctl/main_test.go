package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/internal/testnode"
)

// startNode runs a real coordinator (node + Kafka listener) in process.
func startNode(t *testing.T) string {
	t.Helper()
	return testnode.Start(t, testnode.Config(t)).KafkaAddr()
}

func ctl(t *testing.T, addr string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := func(k string) string {
		if k == "COHORT_BOOTSTRAP_SERVERS" {
			return addr
		}
		return ""
	}
	code := run(context.Background(), args, env, &out, &errOut)
	return out.String(), errOut.String(), code
}

// describeOne is `groups describe --json GROUP`'s one group.
func describeOne(t *testing.T, addr, group string) groupInfo {
	t.Helper()
	var infos []groupInfo
	ctlJSON(t, addr, &infos, "groups", "describe", group)
	if len(infos) != 1 || infos[0].Group != group {
		t.Fatalf("groups describe %s: %+v", group, infos)
	}
	return infos[0]
}

// hasLine reports whether a line of a table starts with these fields.
func hasLine(table string, fields ...string) bool {
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) >= len(fields) && slices.Equal(f[:len(fields)], fields) {
			return true
		}
	}
	return false
}

// describeIfAny is describeOne, or a zero groupInfo while the group does
// not exist yet.
func describeIfAny(t *testing.T, addr, group string) groupInfo {
	t.Helper()
	out, errOut, code := ctl(t, addr, "--json", "groups", "describe", group)
	if code == 1 && strings.Contains(errOut, "group "+group+" does not exist") {
		return groupInfo{}
	}
	var infos []groupInfo
	if err := json.Unmarshal([]byte(out), &infos); code != 0 || err != nil || len(infos) != 1 {
		t.Fatalf("groups describe %s: exit %d %v: %s %s", group, code, err, out, errOut)
	}
	return infos[0]
}

func ctlJSON(t *testing.T, addr string, v any, args ...string) {
	t.Helper()
	out, errOut, code := ctl(t, addr, append([]string{"--json"}, args...)...)
	if code != 0 {
		t.Fatalf("cohortctl %v: exit %d: %s", args, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("cohortctl %v: %v\n%s", args, err, out)
	}
}

// consumer joins group g on topic with franz-go and reports what it owns.
type consumer struct {
	cl    *kgo.Client
	mu    sync.Mutex
	owned []int32
}

func startConsumer(t *testing.T, addr, group, topic, id string) *consumer {
	t.Helper()
	c := &consumer{}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addr), kgo.ClientID(id),
		kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.RangeBalancer()),
		kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.DisableAutoCommit(), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			c.mu.Lock()
			c.owned = slices.Sorted(slices.Values(m[topic]))
			c.mu.Unlock()
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	c.cl = cl
	go func() {
		for cl.Context().Err() == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			cl.PollFetches(ctx)
			cancel()
		}
	}()
	t.Cleanup(cl.Close)
	return c
}

func TestAgainstCoordinator(t *testing.T) {
	addr := startNode(t)

	// topics create / list
	out, errOut, code := ctl(t, addr, "topics", "create", "--partitions", "4", "orders")
	if code != 0 || !strings.Contains(out, "created topic orders with 4 partitions") {
		t.Fatalf("topics create: %d %q %q", code, out, errOut)
	}
	if _, errOut, code = ctl(t, addr, "topics", "create", "--partitions", "4", "orders"); code != 1 || !strings.Contains(errOut, "TOPIC_ALREADY_EXISTS") {
		t.Fatalf("duplicate create: %d %q", code, errOut)
	}
	var topics []topicInfo
	ctlJSON(t, addr, &topics, "topics", "list")
	if len(topics) != 1 || topics[0].Name != "orders" || topics[0].Partitions != 4 || len(topics[0].ID) != 36 {
		t.Fatalf("topics list: %+v", topics)
	}

	// Two consumers form a group.
	a := startConsumer(t, addr, "billing", "orders", "ctl-a")
	b := startConsumer(t, addr, "billing", "orders", "ctl-b")
	var info groupInfo
	deadline := time.Now().Add(30 * time.Second)
	for {
		info = describeIfAny(t, addr, "billing")
		total := 0
		for _, m := range info.Members {
			total += len(m.Assignment["orders"])
		}
		if info.State == "Stable" && len(info.Members) == 2 && total == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group never stable: %+v", info)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if info.Protocol != "range" || info.ProtocolType != "consumer" || info.Generation == nil || *info.Generation < 1 {
		t.Fatalf("describe: %+v", info)
	}
	owners := map[int32]string{}
	for _, m := range info.Members {
		if m.Host != "/127.0.0.1" || (m.ClientID != "ctl-a" && m.ClientID != "ctl-b") {
			t.Fatalf("member %+v", m)
		}
		for _, p := range m.Assignment["orders"] {
			owners[p] = m.ClientID
		}
	}
	if len(owners) != 4 {
		t.Fatalf("owners %v", owners)
	}
	table, _, _ := ctl(t, addr, "groups", "describe", "billing")
	for _, want := range []string{"STATE Stable", "GENERATION", "COORDINATOR", "TOTAL-LAG", strings.ReplaceAll(offsetsHeader, "\t", " ")} {
		if !hasLine(table, strings.Fields(want)...) {
			t.Fatalf("describe table lacks %q:\n%s", want, table)
		}
	}

	// groups list
	var groups []listedGroup
	ctlJSON(t, addr, &groups, "groups", "list")
	if len(groups) != 1 || groups[0].Group != "billing" || groups[0].State != "Stable" || groups[0].ProtocolType != "consumer" {
		t.Fatalf("groups list: %+v", groups)
	}

	// offsets: commit from a member, then read back with owners.
	for _, c := range []*consumer{a, b} {
		c.mu.Lock()
		owned := c.owned
		c.mu.Unlock()
		offs := map[string]map[int32]kgo.EpochOffset{"orders": {}}
		for _, p := range owned {
			offs["orders"][p] = kgo.EpochOffset{Epoch: -1, Offset: 10 + int64(p)}
		}
		var cerr error
		c.cl.CommitOffsetsSync(context.Background(), offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) { cerr = err })
		if cerr != nil {
			t.Fatal(cerr)
		}
	}
	var rows []offsetRow
	ctlJSON(t, addr, &rows, "offsets", "billing")
	if len(rows) != 4 {
		t.Fatalf("offsets: %+v", rows)
	}
	for _, r := range rows {
		if r.Topic != "orders" || r.CurrentOffset == nil || *r.CurrentOffset != 10+int64(r.Partition) || r.ClientID != owners[r.Partition] || r.LogEndOffset == nil {
			t.Fatalf("offset row %+v (owner %s)", r, owners[r.Partition])
		}
	}

	// groups delete: refused while members are there, done once empty.
	if _, errOut, code := ctl(t, addr, "groups", "delete", "billing"); code != 1 || !strings.Contains(errOut, "NON_EMPTY_GROUP") {
		t.Fatalf("delete non-empty: %d %q", code, errOut)
	}
	a.cl.Close()
	b.cl.Close()
	deadline = time.Now().Add(30 * time.Second)
	for {
		info = describeOne(t, addr, "billing")
		if info.State == "Empty" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group not empty after members left: %+v", info)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, errOut, code := ctl(t, addr, "groups", "delete", "billing"); code != 0 || !strings.Contains(out, "deleted group billing") {
		t.Fatalf("delete: %d %q %q", code, out, errOut)
	}
	ctlJSON(t, addr, &groups, "groups", "list")
	if len(groups) != 0 {
		t.Fatalf("groups after delete: %+v", groups)
	}
}

// topics alter grows a topic as kafka-topics.sh --alter --partitions does:
// the topic keeps its id, a count that is not an increase and an unknown
// topic are errors (exit 1) with the broker's code and message.
func TestTopicsAlter(t *testing.T) {
	addr := startNode(t)
	if _, errOut, code := ctl(t, addr, "topics", "create", "--partitions", "2", "orders"); code != 0 {
		t.Fatalf("topics create: %d %q", code, errOut)
	}
	var before []topicInfo
	ctlJSON(t, addr, &before, "topics", "list")
	out, errOut, code := ctl(t, addr, "topics", "alter", "--partitions", "3", "orders")
	if code != 0 || out != "altered topic orders to 3 partitions\n" {
		t.Fatalf("topics alter: %d %q %q", code, out, errOut)
	}
	var altered map[string]any
	ctlJSON(t, addr, &altered, "topics", "alter", "--partitions", "5", "orders")
	if len(altered) != 2 || altered["topic"] != "orders" || altered["partitions"] != float64(5) {
		t.Fatalf("topics alter --json: %v", altered)
	}
	var after []topicInfo
	ctlJSON(t, addr, &after, "topics", "list")
	if len(after) != 1 || after[0].Partitions != 5 || after[0].ID != before[0].ID {
		t.Fatalf("topics list: %+v, before %+v", after, before)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--partitions", "4", "orders"}, "cohortctl: alter orders: INVALID_PARTITIONS: The topic orders currently has 5 partition(s); 4 would not be an increase.\n"},
		{[]string{"--partitions", "5", "orders"}, ": Topic already has 5 partition(s).\n"},
		{[]string{"--partitions", "9", "nope"}, "alter nope: UNKNOWN_TOPIC_OR_PARTITION"},
	} {
		if out, errOut, code := ctl(t, addr, append([]string{"topics", "alter"}, tc.args...)...); code != 1 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Fatalf("topics alter %v: exit %d %q %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"groups"}, {"groups", "describe"}, {"nope"}, {"topics", "create"},
		{"topics", "alter", "t"}, {"topics", "alter", "--partitions", "0", "t"}, {"topics", "alter", "--partitions", "3"}, {"topics", "alter", "--partitions", "x", "t"}} {
		if _, _, code := ctl(t, "127.0.0.1:1", args...); code != 2 {
			t.Fatalf("%v: exit %d, want 2", args, code)
		}
	}
	if _, errOut, code := ctl(t, "127.0.0.1:1", "--timeout", "500ms", "groups", "list"); code != 1 || errOut == "" {
		t.Fatalf("unreachable broker: exit %d %q", code, errOut)
	}
	// A usage error is one line and where help is, not the whole help.
	for _, args := range [][]string{{"groups"}, {"nope"}, {"groups", "describe"}, {"--nope", "groups", "list"}, {"topics", "alter", "t"}} {
		_, errOut, code := ctl(t, "127.0.0.1:1", args...)
		if lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n"); code != 2 || len(lines) != 2 || lines[1] != helpHint {
			t.Errorf("%v: exit %d, stderr %q; want 2, one line and the hint", args, code, errOut)
		}
	}
}

// Kafka's tools' and rpk's habits work, or are refused in one line that
// names cohortctl's way (exit 2).
func TestKafkaHabits(t *testing.T) {
	addr := startNode(t)
	if _, errOut, code := ctl(t, addr, "offsets", "reset", "habits", "--topic", "orders", "--to-offset", "1", "--execute"); code != 1 || !strings.Contains(errOut, "topic orders does not exist") {
		t.Fatalf("reset of a missing topic: exit %d %q", code, errOut)
	}
	if _, errOut, code := ctl(t, addr, "topics", "create", "--partitions", "2", "orders"); code != 0 {
		t.Fatalf("topics create: %s", errOut)
	}
	if _, errOut, code := ctl(t, addr, "offsets", "reset", "habits", "--topic", "orders", "--to-offset", "1", "--execute"); code != 0 {
		t.Fatalf("offsets reset: exit %d %q", code, errOut)
	}
	// --bootstrap-server (kafka-consumer-groups.sh), anywhere on the line;
	// it wins over the environment's default.
	for _, args := range [][]string{
		{"--bootstrap-server", addr, "groups", "list"},
		{"groups", "list", "--bootstrap-server", addr},
		{"groups", "list", "--bootstrap-server=" + addr},
		{"group", "describe", "habits", "--bootstrap-server", addr}, // rpk's singular
		{"--bootstrap", addr, "topic", "list"},
	} {
		out, errOut, code := ctl(t, "127.0.0.1:1", args...)
		if code != 0 || !strings.Contains(out, "habits") && !strings.Contains(out, "orders") {
			t.Errorf("%v: exit %d %q %q", args, code, out, errOut)
		}
	}
	// Help after any command: its own lines, exit 0.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "commands:"},
		{[]string{"-h"}, "commands:"},
		{[]string{"help"}, "commands:"},
		{[]string{"groups", "--help"}, "groups describe [--members | --state] GROUPS"},
		{[]string{"group", "describe", "--help"}, "groups describe [--members | --state] GROUPS"},
		{[]string{"offsets", "reset", "-h"}, "--to-datetime"},
		{[]string{"cluster", "--help"}, "cluster [--remote host:port,...]"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tc.args, func(string) string { return "" }, &out, &errOut)
		if code != 0 || !strings.Contains(out.String(), tc.want) || errOut.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 0 and %q", tc.args, code, out.String(), errOut.String(), tc.want)
		}
		if len(tc.args) > 1 && strings.Contains(out.String(), "acls list") {
			t.Errorf("%v: the whole help, not the command's", tc.args)
		}
	}
	// Kafka's action flags: one line naming cohortctl's command.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--describe", "--group", "habits"}, "'cohortctl groups describe GROUP...'"},
		{[]string{"--bootstrap-server", addr, "--list"}, "'cohortctl groups list'"},
		{[]string{"--reset-offsets", "--group", "habits", "--to-earliest"}, "'cohortctl offsets reset GROUP"},
		{[]string{"--group", "habits", "--describe"}, "'cohortctl groups describe --group G'"},
		{[]string{"groups", "--describe", "--group", "habits"}, "'cohortctl groups describe GROUP...'"},
		{[]string{"--delete-offsets", "--group", "habits"}, "'cohortctl offsets delete GROUP --topic T'"},
	} {
		_, errOut, code := ctl(t, addr, tc.args...)
		if code != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line with %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestBootstrapFromEnv: COHORT_BOOTSTRAP_SERVERS names the seed brokers;
// the older COHORT_BOOTSTRAP is read only when it is not a boolean, since a
// shell that runs cohortd may hold COHORT_BOOTSTRAP=true (its --bootstrap
// switch).
func TestBootstrapFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "127.0.0.1:9092"},
		{map[string]string{"COHORT_BOOTSTRAP_SERVERS": "a:1,b:2"}, "a:1,b:2"},
		{map[string]string{"COHORT_BOOTSTRAP_SERVERS": "a:1", "COHORT_BOOTSTRAP": "c:3"}, "a:1"},
		{map[string]string{"COHORT_BOOTSTRAP": "c:3"}, "c:3"},
		{map[string]string{"COHORT_BOOTSTRAP": "true"}, "127.0.0.1:9092"},
		{map[string]string{"COHORT_BOOTSTRAP": "false"}, "127.0.0.1:9092"},
		{map[string]string{"COHORT_BOOTSTRAP": "1", "COHORT_BOOTSTRAP_SERVERS": "a:1"}, "a:1"},
	} {
		if got := bootstrapFromEnv(func(k string) string { return tc.env[k] }); got != tc.want {
			t.Errorf("env %v: bootstrap %q, want %q", tc.env, got, tc.want)
		}
	}
}

// TestBootstrapTrueNotABroker: with cohortd's COHORT_BOOTSTRAP=true in the
// environment, cohortctl still reaches the broker COHORT_BOOTSTRAP_SERVERS
// names and the default would be used without it, never a broker "true".
func TestBootstrapTrueNotABroker(t *testing.T) {
	addr := startNode(t)
	var out, errOut bytes.Buffer
	env := map[string]string{"COHORT_BOOTSTRAP": "true", "COHORT_BOOTSTRAP_SERVERS": addr}
	if code := run(context.Background(), []string{"topics", "list"}, func(k string) string { return env[k] }, &out, &errOut); code != 0 {
		t.Fatalf("topics list with COHORT_BOOTSTRAP=true: exit %d: %s", code, errOut.String())
	}
}
