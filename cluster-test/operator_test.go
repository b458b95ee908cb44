package clustertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// runCtl runs the cohortctl binary and returns its stdout, stderr and
// exit status.
func runCtl(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("cohortctl %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errOut.String(), code
}

// partitionsAt asks the node at addr (Metadata, all topics) how many
// partitions topic has; -1 when it does not list it.
func partitionsAt(ctx context.Context, conns *Conns, addr, topic string) (int, error) {
	res, err := conns.Request(ctx, addr, kmsg.NewPtrMetadataRequest())
	if err != nil {
		return 0, err
	}
	for _, mt := range res.(*kmsg.MetadataResponse).Topics {
		if mt.Topic != nil && *mt.Topic == topic && mt.ErrorCode == errNone {
			return len(mt.Partitions), nil
		}
	}
	return -1, nil
}

// What an operator meets on a 3-node, 16-shard cluster. A topic grown
// through the leader shows its new partition count on every node as soon
// as CreatePartitions returned (read your writes across nodes: a follower
// answers Metadata after a read barrier), and an offsets reset planned
// right after a grow covers the new partitions. Then, with one node
// stopped, every read-only cohortctl command given all three nodes
// succeeds, names the stopped node on stderr and exits 0, five runs each.
func TestOperatorCommandsWithANodeStopped(t *testing.T) {
	skipShort(t)
	ctl, err := Binary("./cmd/cohortctl")
	if err != nil {
		t.Fatal(err)
	}
	c := shardedCluster(t, 3)
	conns := NewConns("operator-test")
	t.Cleanup(conns.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	all := strings.Join(c.KafkaAddrs(), ",")

	// Grown on the leader, read at once on every node: 10 tries.
	for try := range 10 {
		leader := c.WaitLeader(20 * time.Second)
		topic := fmt.Sprintf("grown-%d", try)
		coord := &Coordinator{Conns: conns, Seeds: func() []string { return []string{leader.KafkaAddr} }, Group: topic}
		if err := CreateTopic(ctx, coord, topic, 2); err != nil {
			t.Fatal(err)
		}
		grow := kmsg.NewPtrCreatePartitionsRequest()
		gt := kmsg.NewCreatePartitionsRequestTopic()
		gt.Topic, gt.Count = topic, 5
		grow.Topics, grow.TimeoutMillis = append(grow.Topics, gt), 10000
		res, err := conns.Request(ctx, leader.KafkaAddr, grow)
		if err != nil {
			t.Fatal(err)
		}
		if code := res.(*kmsg.CreatePartitionsResponse).Topics[0].ErrorCode; code != errNone {
			t.Fatalf("grow %s at %s: error code %d", topic, leader.ID, code)
		}
		var seen []string
		for _, n := range c.Running() {
			k, err := partitionsAt(ctx, conns, n.KafkaAddr, topic)
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, fmt.Sprintf("%s=%d", n.ID, k))
			if k != 5 {
				t.Errorf("try %d: right after the grow on %s, %s", try, leader.ID, strings.Join(seen, " "))
			}
		}
	}

	// Through cohortctl, grown through each node in turn: topics list on
	// every node, and a reset plan, cover the five partitions.
	for i, n := range c.Running() {
		topic := fmt.Sprintf("ctl-grown-%d", i)
		if _, errOut, code := runCtl(t, ctl, "--bootstrap", n.KafkaAddr, "topics", "create", "--partitions", "2", topic); code != 0 {
			t.Fatalf("topics create %s: exit %d: %s", topic, code, errOut)
		}
		if _, errOut, code := runCtl(t, ctl, "--bootstrap", n.KafkaAddr, "topics", "alter", "--partitions", "5", topic); code != 0 {
			t.Fatalf("topics alter %s: exit %d: %s", topic, code, errOut)
		}
		for _, m := range c.Running() {
			out, errOut, code := runCtl(t, ctl, "--bootstrap", m.KafkaAddr, "--json", "topics", "list")
			var topics []struct {
				Topic      string `json:"topic"`
				Partitions int    `json:"partitions"`
			}
			if err := json.Unmarshal([]byte(out), &topics); code != 0 || err != nil {
				t.Fatalf("topics list at %s: exit %d %v: %s", m.ID, code, err, errOut)
			}
			i := slices.IndexFunc(topics, func(x struct {
				Topic      string `json:"topic"`
				Partitions int    `json:"partitions"`
			}) bool {
				return x.Topic == topic
			})
			if i < 0 || topics[i].Partitions != 5 {
				t.Errorf("topics list at %s after growing %s through %s: %+v", m.ID, topic, n.ID, topics)
			}
		}
		m := c.Running()[(i+1)%3]
		out, errOut, code := runCtl(t, ctl, "--bootstrap", m.KafkaAddr, "--json", "offsets", "reset", "plan-"+topic, "--topic", topic, "--to-offset", "0")
		var plan []map[string]any
		if err := json.Unmarshal([]byte(out), &plan); code != 0 || err != nil || len(plan) != 5 {
			t.Errorf("reset plan at %s right after growing %s through %s: exit %d: %v %s", m.ID, topic, n.ID, code, plan, errOut)
		}
	}

	// Groups on several shards, each with committed offsets.
	var groups []string
	for g := range 6 {
		group := fmt.Sprintf("ops-%d", g)
		groups = append(groups, group)
		coord := &Coordinator{Conns: conns, Seeds: c.KafkaAddrs, Group: group}
		_, _, err := coord.Retry(ctx, func() kmsg.Request {
			req := kmsg.NewPtrOffsetCommitRequest()
			req.Group, req.Generation = group, -1
			rt := kmsg.NewOffsetCommitRequestTopic()
			rt.Topic = "grown-0"
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = 0, int64(10+g)
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			return req
		}, func(r kmsg.Response) int16 { return r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode })
		if err != nil {
			t.Fatal(err)
		}
	}

	// The README's cohort-members on the native API: its topic, which
	// only the members named before, is in the cluster's topic list.
	membersBin, err := Binary("./cmd/cohort-members")
	if err != nil {
		t.Fatal(err)
	}
	var remoteAddrs []string
	for _, n := range c.Running() {
		remoteAddrs = append(remoteAddrs, n.RemoteAddr)
	}
	members := exec.Command(membersBin, "--remote", strings.Join(remoteAddrs, ","), "--members", "2", "--group", "native-demo", "--topic", "native-demo", "--partitions", "7")
	members.Env = cleanEnv()
	var membersOut syncOutput
	members.Stdout, members.Stderr = &membersOut, &membersOut
	if err := members.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { members.Process.Kill(); members.Wait() })
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(membersOut.String(), "assigned"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("cohort-members never assigned:\n%s", membersOut.String())
		}
	}
	if out, errOut, code := runCtl(t, ctl, "--bootstrap", all, "topics", "list"); code != 0 || !hasFields(out, "native-demo", "7") {
		t.Fatalf("topics list with cohort-members running: exit %d %q %q\n%s", code, out, errOut, membersOut.String())
	}
	groups = append(groups, "native-demo")

	stopped := c.Node(1)
	c.Stop(1)
	// The stopped node's shards are led by the others, spread evenly (a
	// ListGroups fan-out is not atomic: a shard moving between two answers
	// may be in neither, with Kafka's brokers too).
	t.Logf("leaders with %s stopped: %v", stopped.ID, waitBalanced(t, c, 60*time.Second))
	remotes := []string{stopped.RemoteAddr}
	for _, n := range c.Running() {
		remotes = append(remotes, n.RemoteAddr)
	}
	commands := []struct {
		args []string
		want []string // on stdout
		down string   // on stderr
	}{
		{[]string{"groups", "list"}, groups, stopped.KafkaAddr},
		{[]string{"groups", "describe", "ops-0", "ops-3", "ops-5"}, []string{"ops-0", "ops-3", "ops-5"}, stopped.KafkaAddr},
		{[]string{"groups", "describe", "--all-groups"}, groups, stopped.KafkaAddr},
		// (native-demo has rows only while its members hold an assignment:
		// they may be rejoining through another node now.)
		{[]string{"offsets", "--all-groups"}, groups[:6], stopped.KafkaAddr},
		{[]string{"--json", "offsets", "ops-2"}, []string{`"current_offset": 12`}, stopped.KafkaAddr},
		{[]string{"topics", "list"}, []string{"grown-9"}, stopped.KafkaAddr},
		{[]string{"cluster", "--remote", strings.Join(remotes, ","), "status"}, []string{stopped.ID + " ", "unreachable"}, stopped.RemoteAddr},
	}
	for run := range 5 {
		for _, cmd := range commands {
			out, errOut, code := runCtl(t, ctl, append([]string{"--bootstrap", all}, cmd.args...)...)
			if code != 0 {
				t.Errorf("run %d: cohortctl %s with %s stopped: exit %d: %s", run, strings.Join(cmd.args, " "), stopped.ID, code, errOut)
				continue
			}
			for _, w := range cmd.want {
				if !strings.Contains(out, w) {
					t.Errorf("run %d: cohortctl %s: no %q in\n%s", run, strings.Join(cmd.args, " "), w, out)
				}
			}
			if !strings.Contains(errOut, cmd.down) {
				t.Errorf("run %d: cohortctl %s: stderr does not name %s (%s): %q", run, strings.Join(cmd.args, " "), stopped.ID, cmd.down, errOut)
			}
		}
	}
}

// The README's cluster: 16 shards, the default move interval (a minute).
// The shards the bootstrap node leads from its first election never
// moved, so the first placement spreads them at once rather than a move
// interval later: every node leads 5 or 6 within 30 s of the cluster's
// start (measured on the README block itself: 4 to 5 s after the last
// node's /readyz).
func TestFirstPlacementIsNotHeldBack(t *testing.T) {
	skipShort(t)
	start := time.Now()
	c := StartCluster(t, 3, func(o *Options) { o.Args = append(o.Args, "--shards", fmt.Sprint(testShards)) })
	joined := time.Since(start)
	counts := waitBalanced(t, c, 30*time.Second)
	t.Logf("all joined after %v, leaders spread %v after the start: %v", joined.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), counts)
}

// hasFields reports whether a line of a table starts with these fields.
func hasFields(table string, fields ...string) bool {
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) >= len(fields) && slices.Equal(f[:len(fields)], fields) {
			return true
		}
	}
	return false
}

// syncOutput collects a process's output for reading while it runs.
type syncOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncOutput) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncOutput) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
