package member_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
)

// kafkaDescriber answers DescribeGroups over the Kafka protocol.
func kafkaDescriber(t testing.TB, seed, group string) describer {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return func() (string, map[string][]tp, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{group}
		res, err := req.RequestWith(ctx, cl)
		if err != nil {
			return "", nil, err
		}
		if len(res.Groups) != 1 || res.Groups[0].ErrorCode != 0 {
			return "", nil, fmt.Errorf("describe %v", res.Groups)
		}
		out := map[string][]tp{}
		for _, m := range res.Groups[0].Members {
			a, err := assignor.DecodeAssignment(m.MemberAssignment)
			if err != nil && len(m.MemberAssignment) > 0 {
				return "", nil, err
			}
			out[m.MemberID] = flatten(a.Topics)
		}
		return res.Groups[0].State, out, nil
	}
}

// The member suite against franz-go's kfake through the Kafka transport.
func TestMembersAgainstKfake(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fake Kafka cluster")
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			base := append(timing(), member.Topics("t"))
			if mode.balancers != nil {
				base = append(base, member.Balancers(mode.balancers...))
			}
			memberScenario(t, kfakeGroup(t, base...), allPartitions("t", 12))
		})
	}
}

// kfakeGroup starts a one-broker kfake cluster with the 12-partition topic
// t, stopped when the test ends, and returns group "g" on it, its members
// on the Kafka transport.
func kfakeGroup(t *testing.T, base ...member.Opt) *group {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(12, "t"), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	seed := c.ListenAddrs()[0]
	base = append(base, member.WithTransport(member.Kafka(seed)))
	g := newGroupOn(t, actor.NewActorSystem(), kafkaDescriber(t, seed, "g"), "g", base...)
	g.fetch = kafkaFetcher(t, seed, "g")
	return g
}

// kgoMember is a franz-go consumer in the group, recording into the same
// history.
type kgoMember struct {
	n  string
	cl *kgo.Client
	h  *history

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startKgo(t testing.TB, h *history, name, seed, group string, balancers ...kgo.GroupBalancer) *kgoMember {
	k := &kgoMember{n: name, h: h}
	opts := []kgo.Opt{
		kgo.SeedBrokers(seed),
		kgo.ClientID(name),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics("t"),
		kgo.SessionTimeout(6 * time.Second),
		kgo.HeartbeatInterval(300 * time.Millisecond),
		kgo.RebalanceTimeout(15 * time.Second),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			h.assigned(name, flattenMap(m))
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			time.Sleep(50 * time.Millisecond)
			h.released(name, "revoked", flattenMap(m))
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			h.released(name, "lost", flattenMap(m))
		}),
	}
	if len(balancers) > 0 {
		opts = append(opts, kgo.Balancers(balancers...))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	k.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	k.cancel = cancel
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	}()
	return k
}

func (k *kgoMember) close() {
	k.cancel()
	k.wg.Wait()
	k.cl.Close() // revokes (OnPartitionsRevoked) and leaves
}

func flattenMap(m map[string][]int32) []tp {
	var out []tp
	for t, ps := range m {
		for _, p := range ps {
			out = append(out, tp{t, p})
		}
	}
	return sortTPs(out)
}

func (k *kgoMember) name() string { return k.n }
func (k *kgoMember) memberID() string {
	id, _ := k.cl.GroupMetadata()
	return id
}
func (k *kgoMember) owned() []tp { return k.h.owned()[k.n] }
func (k *kgoMember) settled() bool {
	_, gen := k.cl.GroupMetadata()
	return gen > 0
}

// Groups that mix cohort members with franz-go members, against cohortd over
// both transports: zero overlaps.
func TestMixedWithKgoAgainstCohortd(t *testing.T) {
	c := cohortd(t)
	node := c.Node(0)
	want := allPartitions("t", 12)
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			name := "mixed-" + tr.name
			base := append(timing(), tr.opts(node)...)
			base = append(base, member.Topics("t"))
			g := newGroup(t, c, name, base...)
			var kgos []*kgoMember
			defer func() {
				for _, k := range kgos {
					k.close()
				}
			}()
			addKgo := func() {
				k := startKgo(t, g.h, fmt.Sprintf("k%d", len(kgos)), node.KafkaAddr, name)
				kgos = append(kgos, k)
				g.others = append(g.others, k)
			}
			g.add()
			addKgo()
			g.add()
			addKgo()
			t.Logf("2+2 settled in %v", g.settle(want))
			g.add()
			addKgo()
			t.Logf("3+3 settled in %v", g.settle(want))
			kgos[0].close()
			g.others = g.others[1:]
			kgos = kgos[1:]
			t.Logf("3+2 settled in %v", g.settle(want))
			g.remove(g.members[0])
			t.Logf("2+2 settled in %v", g.settle(want))
			g.h.check(t)
		})
	}
}

// kafkaFetcher reads a group's committed offsets over the Kafka protocol.
func kafkaFetcher(t testing.TB, seed, group string) func() (map[tp]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return func() (map[tp]int64, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = group
		res, err := req.RequestWith(ctx, cl)
		if err != nil {
			return nil, err
		}
		out := map[tp]int64{}
		for _, t := range res.Topics {
			for _, p := range t.Partitions {
				out[tp{t.Topic, p.Partition}] = p.Offset
			}
		}
		return out, nil
	}
}

// advertiseExclusive makes a kfake cluster answer ApiVersions (Kafka 3.9's
// versions) with the exclusive-ownership feature, as a cohortd with the
// ownership guard will.
func advertiseExclusive(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.ApiVersions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ApiVersionsRequest)
		res := req.ResponseKind().(*kmsg.ApiVersionsResponse)
		res.Version = req.Version
		kversion.V3_9_0().EachMaxKeyVersion(func(k, v int16) {
			ak := kmsg.NewApiVersionsResponseApiKey()
			ak.ApiKey, ak.MaxVersion = k, v
			res.ApiKeys = append(res.ApiKeys, ak)
		})
		f := kmsg.NewApiVersionsResponseSupportedFeature()
		f.Name, f.MinVersion, f.MaxVersion = member.ExclusiveOwnershipFeature, 1, 1
		res.SupportedFeatures = append(res.SupportedFeatures, f)
		return res, nil, true
	})
}

// TestExclusiveOwnershipFeature: over the Kafka transport, a coordinator
// advertising cohort.exclusive-ownership makes default members
// ([cooperative-sticky, range]) follow the selected cooperative-sticky, so a
// second member joining takes only what moves; without it they run eager
// (Java's rule) and the first member revokes everything.
func TestExclusiveOwnershipFeature(t *testing.T) {
	for _, exclusive := range []bool{false, true} {
		t.Run(fmt.Sprintf("exclusive=%v", exclusive), func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(12, "t"), kfake.GroupMinSessionTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if exclusive {
				advertiseExclusive(c)
			}
			seed := c.ListenAddrs()[0]
			g := newGroupOn(t, actor.NewActorSystem(), kafkaDescriber(t, seed, "g"), "g",
				append(timing(), member.WithTransport(member.Kafka(seed)), member.Topics("t"))...)
			want := allPartitions("t", 12)
			first := g.add()
			g.settle(want)
			var revoked []int
			g.h.mu.Lock()
			g.h.onRevoke = func(name string, ps []tp) {
				if name == first.n {
					revoked = append(revoked, len(ps))
				}
			}
			g.h.mu.Unlock()
			g.add()
			g.settle(want)
			if first.m.Protocol() != "cooperative-sticky" {
				t.Fatalf("protocol %q", first.m.Protocol())
			}
			g.h.mu.Lock()
			defer g.h.mu.Unlock()
			wantRevoked := "[12]" // eager: everything
			if exclusive {
				wantRevoked = "[6]" // cooperative: what moves
			}
			if fmt.Sprint(revoked) != wantRevoked {
				t.Fatalf("first member revoked %v, want %s", revoked, wantRevoked)
			}
		})
	}
}

func TestHasExclusiveOwnership(t *testing.T) {
	for _, c := range []struct {
		name     string
		min, max int16
		want     bool
	}{
		{member.ExclusiveOwnershipFeature, 1, 1, true},
		{member.ExclusiveOwnershipFeature, 1, 2, true},
		{member.ExclusiveOwnershipFeature, 2, 3, false},
		{member.ExclusiveOwnershipFeature, 0, 0, false},
		{"cohort.other", 1, 1, false},
	} {
		res := kmsg.NewPtrApiVersionsResponse()
		f := kmsg.NewApiVersionsResponseSupportedFeature()
		f.Name, f.MinVersion, f.MaxVersion = c.name, c.min, c.max
		res.SupportedFeatures = append(res.SupportedFeatures, f)
		if got := member.HasExclusiveOwnership(res); got != c.want {
			t.Errorf("%s %d..%d: %v", c.name, c.min, c.max, got)
		}
	}
	if member.HasExclusiveOwnership(kmsg.NewPtrApiVersionsResponse()) {
		t.Error("no features: exclusive")
	}
}

// TestNotifyActor: partition changes as messages to a user actor; the member
// waits for the actor's answer before it moves on. Also CommitAsync and Mark.
func TestNotifyActor(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "t"), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seed := c.ListenAddrs()[0]
	system := actor.NewActorSystem()
	events := make(chan string, 16)
	pid := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		if ev, ok := ctx.Message().(*member.PartitionsEvent); ok {
			events <- fmt.Sprintf("%v %v", ev.Kind, flatten(ev.Partitions))
			ctx.Respond(true)
		}
	}))
	m, err := member.Start(system, "g", append(timing(), member.WithTransport(member.Kafka(seed)), member.Topics("t"), member.NotifyActor(pid))...)
	if err != nil {
		t.Fatal(err)
	}
	next := func() string {
		select {
		case e := <-events:
			return e
		case <-time.After(20 * time.Second):
			t.Fatal("no event")
			return ""
		}
	}
	if e := next(); e != "assigned [t/0 t/1 t/2 t/3]" {
		t.Fatalf("first event %q", e)
	}
	done := make(chan error, 1)
	m.CommitAsync(map[string]map[int32]int64{"t": {0: 7}}, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatalf("commit: %v", err)
	}
	m.Mark("t", 1, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if e := next(); e != "revoked [t/0 t/1 t/2 t/3]" {
		t.Fatalf("close event %q", e)
	}
	got, err := kafkaFetcher(t, seed, "g")()
	if err != nil {
		t.Fatal(err)
	}
	if got[tp{"t", 0}] != 7 || got[tp{"t", 1}] != 9 {
		t.Fatalf("committed %v, want t/0=7 (CommitAsync) and t/1=9 (marked, committed at Close)", got)
	}
	if err := m.Commit(ctx, nil); !errors.Is(err, member.ErrIllegalState) {
		t.Fatalf("commit after close: %v", err)
	}
}

// TestPartitionsGrow: over the Kafka transport the leader notices a topic
// grew and rebalances, so the new partitions get owners.
func TestPartitionsGrow(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "t"), kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	seed := c.ListenAddrs()[0]
	g := newGroupOn(t, actor.NewActorSystem(), kafkaDescriber(t, seed, "g"), "g",
		append(timing(), member.WithTransport(member.Kafka(seed)), member.Topics("t"), member.MetadataMaxAge(500*time.Millisecond))...)
	g.add()
	g.add()
	g.settle(allPartitions("t", 4))
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreatePartitionsRequest()
	rt := kmsg.NewCreatePartitionsRequestTopic()
	rt.Topic, rt.Count = "t", 8
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 5000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := req.RequestWith(ctx, cl)
	if err != nil || res.Topics[0].ErrorCode != 0 {
		t.Fatalf("create partitions: %v %v", err, res)
	}
	t.Logf("settled on 8 partitions in %v", g.settle(allPartitions("t", 8)))
	g.h.check(t)
}
