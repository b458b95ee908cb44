package clustertest

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"

	"github.com/cohort-coord/cohort/kafka/interop/clients"
)

// TestLibrdkafkaConsumerProtocolFailover: three librdkafka 2.15 consumers
// with group.protocol=consumer (KIP-848; @confluentinc/kafka-javascript,
// the interop driver), committing every 200 ms, on a 3-node cluster of 16
// shards whose node leading the group's shard is killed (SIGKILL) three
// times and restarted 3 s later. The consumers keep heartbeating to the
// shard's next leader: no rebalance callback of any kind, the same group
// epoch and partitions; no partition is ever held by two consumers (from
// their callbacks); every commit librdkafka acknowledged (offset_commit_cb
// without error) is read back. It logs how long after each kill every
// consumer had a commit acknowledged again.
func TestLibrdkafkaConsumerProtocolFailover(t *testing.T) {
	skipShort(t)
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	fam, err := clients.ScriptSetup(root).LibrdkafkaNode("consumer", "")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	const (
		members    = 3
		partitions = 6
		kills      = 3
	)
	c := shardedCluster(t, 3, patientRaft)
	waitBalanced(t, c, 90*time.Second)
	group, topic := "rdk-failover", "rdk-failover"
	coord := &Coordinator{Conns: NewConns("rdk-admin"), Seeds: c.KafkaAddrs, Group: group}
	defer coord.Conns.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// ConsumerGroupDescribe goes through a client of its own: Conns speaks
	// Kafka 2.8's versions.
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.KafkaAddrs()...), kgo.ClientID("rdk-describe"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := CreateTopic(ctx, coord, topic, partitions); err != nil {
		t.Fatal(err)
	}
	var procs []*clients.Proc
	for i := range members {
		p, err := fam.Start(fmt.Sprintf("rdk-%d", i), clients.Config{
			Bootstrap: c.KafkaAddrs(), Group: group, Topic: topic, ClientID: fmt.Sprintf("rdk-%d", i), Partitions: partitions,
			// librdkafka's reconnect backoff grows to 10 s by default (see
			// librdkafkaBackoffMax).
			Env: []string{"COMMIT_EVERY_MS=200", fmt.Sprintf("RECONNECT_BACKOFF_MAX_MS=%d", librdkafkaBackoffMax)},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !p.Exited() {
				p.Kill()
			}
		})
		procs = append(procs, p)
	}
	waitOwned := func(step string) int32 {
		deadline := time.Now().Add(60 * time.Second)
		for {
			epoch, why := rdkSettled(ctx, admin, group, topic, partitions, procs)
			if why == "" {
				return epoch
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the group is not settled within 60s: %s", step, why)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	before := waitOwned("3 consumers joined")
	baseline := make([]int, len(procs))
	owned := make([][]int32, len(procs))
	for i, p := range procs {
		baseline[i] = len(p.Reports())
		r, _ := p.Last()
		owned[i] = r.Owned
	}
	// backAfter is how long after since (CLOCK_MONOTONIC) every consumer
	// had a commit acknowledged that it sent after since; ok is false
	// while one has none.
	backAfter := func(since int64) (d time.Duration, ok bool) {
		for _, p := range procs {
			as, _ := p.Acks()
			i := slices.IndexFunc(as, func(a clients.Ack) bool { return a.Sent > since })
			if i < 0 {
				return 0, false
			}
			d = max(d, time.Duration(as[i].At-since))
		}
		return d, true
	}
	var back []time.Duration
	for i := range kills {
		victim := groupShardLeader(t, c, group)
		killed := monotonic(t)
		c.Kill(victim.Index)
		// The node comes back 3 s later, as a supervisor restarts it.
		time.Sleep(3 * time.Second)
		c.Restart(victim.Index)
		deadline := time.Now().Add(60 * time.Second)
		for {
			if d, ok := backAfter(killed); ok {
				back = append(back, d.Round(10*time.Millisecond))
				t.Logf("kill %d of %s (leader of shard %d): every consumer had a commit sent after the kill acknowledged within %v", i+1, victim.ID, shardOfGroup(group), d.Round(10*time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kill %d of %s: a consumer had no commit acknowledged within 60s of the restart", i+1, victim.ID)
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.WaitConverged(30 * time.Second)
		waitBalanced(t, c, 90*time.Second)
		if e := waitOwned(fmt.Sprintf("after kill %d", i+1)); e != before {
			t.Errorf("kill %d: group epoch %d, was %d", i+1, e, before)
		}
	}
	for i, p := range procs {
		reps := p.Reports()
		for _, r := range reps[baseline[i]:] {
			t.Errorf("%s: %s callback at %s during the kills: owns %v", p.Name, r.Event, r.At.Format("15:04:05.000"), r.Owned)
		}
		if last := reps[len(reps)-1]; !slices.Equal(last.Owned, owned[i]) {
			t.Errorf("%s owned %v before the kills and %v after", p.Name, owned[i], last.Owned)
		}
	}
	for _, p := range procs {
		if err := p.Close(30 * time.Second); err != nil {
			t.Fatalf("%v\nstderr: %s", err, p.StderrTail())
		}
	}
	var evs []clients.OwnEvent
	for _, p := range procs {
		evs = append(evs, p.Events()...)
	}
	for _, o := range monotonicOverlaps(evs) {
		t.Error(o)
	}
	acked := map[int32]int64{}
	commits, failed := 0, 0
	for _, p := range procs {
		as, f := p.Acks()
		failed += f
		commits += len(as)
		for _, a := range as {
			for part, off := range a.Offsets {
				acked[part] = max(acked[part], off)
			}
		}
	}
	got, _, err := FetchOffsets(ctx, coord, topic, partitions)
	if err != nil {
		t.Fatal(err)
	}
	if len(acked) != partitions {
		t.Errorf("commits acknowledged for %d of %d partitions", len(acked), partitions)
	}
	for p, want := range acked {
		if got[p] < want {
			t.Errorf("partition %d: committed offset %d, but %d was acknowledged", p, got[p], want)
		}
	}
	t.Logf("group epoch %d through %d kills; %d ownership events; %d commits acknowledged by offset_commit_cb, %d reported failed; back after each kill: %v",
		before, kills, len(evs), commits, failed, back)
}

// rdkSettled says what keeps the consumer group from being settled with the
// procs as its members ("" if nothing): ConsumerGroupDescribe shows it
// Stable with one member per consumer (by client id), each at the group
// epoch with its target reached, every partition assigned once, and each
// consumer's last callback left it owning what the coordinator says.
func rdkSettled(ctx context.Context, admin *kgo.Client, group, topic string, partitions int, procs []*clients.Proc) (int32, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	res, err := req.RequestWith(ctx, admin)
	if err != nil {
		return 0, err.Error()
	}
	gs := res.Groups
	if len(gs) != 1 {
		return 0, fmt.Sprintf("%d groups described", len(gs))
	}
	g := gs[0]
	switch {
	case g.ErrorCode != 0:
		return 0, fmt.Sprintf("ConsumerGroupDescribe: error code %d", g.ErrorCode)
	case g.State != "Stable" || g.Epoch <= 0 || g.AssignmentEpoch != g.Epoch:
		return 0, fmt.Sprintf("state %s, epoch %d, assignment epoch %d", g.State, g.Epoch, g.AssignmentEpoch)
	case len(g.Members) != len(procs):
		return 0, fmt.Sprintf("%d members, want %d", len(g.Members), len(procs))
	}
	byClient := map[string][]int32{}
	count := map[int32]int{}
	for _, m := range g.Members {
		var ps []int32
		for _, tp := range m.Assignment.TopicPartitions {
			if tp.Topic == topic || tp.Topic == "" {
				ps = append(ps, tp.Partitions...)
			}
		}
		slices.Sort(ps)
		if m.MemberEpoch != g.Epoch {
			return 0, fmt.Sprintf("member %s at epoch %d, group at %d", m.ClientID, m.MemberEpoch, g.Epoch)
		}
		byClient[m.ClientID] = ps
		for _, p := range ps {
			count[p]++
		}
	}
	for p := range int32(partitions) {
		if count[p] != 1 {
			return 0, fmt.Sprintf("partition %d assigned %d times: %v", p, count[p], byClient)
		}
	}
	for _, p := range procs {
		r, ok := p.Last()
		if !ok {
			return 0, p.Name + " reported no assignment yet"
		}
		if want := byClient[p.Name]; !slices.Equal(r.Owned, want) {
			return 0, fmt.Sprintf("%s owns %v, the coordinator says %v", p.Name, r.Owned, want)
		}
	}
	return g.Epoch, ""
}

// monotonic reads CLOCK_MONOTONIC, the clock of the driver's events.
func monotonic(t *testing.T) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano()
}

// monotonicOverlaps lists every instant two clients held one partition, from
// events stamped on CLOCK_MONOTONIC at both ends of their callbacks: a
// partition is held from the start of its assigned callback to the end of
// the callback that released it (or the end of the log).
func monotonicOverlaps(evs []clients.OwnEvent) []string {
	type iv struct {
		client   string
		from, to int64
	}
	open := map[string]map[int32]int64{}
	var all = map[int32][]iv{}
	sorted := slices.Clone(evs)
	at := func(e clients.OwnEvent) int64 {
		if e.Kind == "assigned" {
			return e.Begin
		}
		return e.At
	}
	slices.SortStableFunc(sorted, func(a, b clients.OwnEvent) int { return cmp.Compare(at(a), at(b)) })
	for _, e := range sorted {
		if open[e.Client] == nil {
			open[e.Client] = map[int32]int64{}
		}
		for _, p := range e.Parts {
			if e.Kind == "assigned" {
				open[e.Client][p] = at(e)
				continue
			}
			if from, ok := open[e.Client][p]; ok {
				all[p] = append(all[p], iv{e.Client, from, at(e)})
				delete(open[e.Client], p)
			}
		}
	}
	end := int64(math.MaxInt64)
	for c, ps := range open {
		for p, from := range ps {
			all[p] = append(all[p], iv{c, from, end})
		}
	}
	var out []string
	for p, l := range all {
		slices.SortFunc(l, func(a, b iv) int { return cmp.Compare(a.from, b.from) })
		for i := range l {
			for j := i + 1; j < len(l) && l[j].from < l[i].to; j++ {
				if l[j].client != l[i].client {
					out = append(out, fmt.Sprintf("partition %d held by %s and %s at once for %v", p, l[i].client, l[j].client, fmtHeld(min(l[i].to, l[j].to)-l[j].from)))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func fmtHeld(d int64) string {
	if d > int64(time.Hour) {
		return "the rest of the log"
	}
	return time.Duration(d).String()
}
