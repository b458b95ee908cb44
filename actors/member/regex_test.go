package member_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/internal/testnode"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// A member subscribed by regex (member.Regex) over each transport: it is
// assigned the partitions of the topics whose whole name matches (not
// "orders-x-old", which the regex matches only in part, nor "audit"), and
// a topic created after it joined is assigned too. Two members share the
// matching partitions, each holding some, none held twice.
func TestRegexSubscription(t *testing.T) {
	t.Run("native", func(t *testing.T) {
		// The in-process coordinator, reached without a socket as a node's
		// is (inProcessCoordinator), over a catalog the test changes.
		var mu sync.Mutex
		version, topics := uint64(1), map[string]int32{}
		catalogOf := func() (uint64, map[string]int32) {
			mu.Lock()
			defer mu.Unlock()
			return version, maps.Clone(topics)
		}
		create := func(name string, parts int32) {
			mu.Lock()
			defer mu.Unlock()
			version++
			topics[name] = parts
		}
		system := regexCoordinator(t, catalogOf)
		regexScenario(t, system, member.WithTransport(member.Native(system.Address())), "native", create, catalogOf)
	})
	t.Run("kafka", func(t *testing.T) {
		cfg := testnode.Config(t)
		cfg.Kafka.ConsumerProtocol = true
		cfg.Consumer.SessionTimeout, cfg.Consumer.HeartbeatInterval = 6*time.Second, 300*time.Millisecond
		cfg.Consumer.RegexRefreshInterval, cfg.Consumer.RegexRefreshMinInterval = regexRefresh, regexRefreshMin
		n := testnode.Start(t, cfg)
		create := func(name string, parts int32) {
			if err := n.Topics().Propose(context.Background(), catalog.CreateTopic{Name: name, ID: catalog.NewTopicID(), Partitions: parts}); err != nil {
				t.Fatal(err)
			}
		}
		system := actor.NewActorSystem()
		t.Cleanup(system.Shutdown)
		regexScenario(t, system, member.WithTransport(member.Kafka(n.KafkaAddr())), "kafka", create, n.Topics().Partitions)
	})
}

// regexScenario runs TestRegexSubscription over one transport: create
// adds a topic, topics reads the catalog.
func regexScenario(t *testing.T, system *actor.ActorSystem, transport member.Opt, name string, create func(string, int32), topics func() (uint64, map[string]int32)) {
	create("orders-eu", 2)
	create("orders-us", 2)
	create("orders-x-old", 3)
	create("audit", 4)
	var ms []*member.Member
	for range 2 {
		opts := append(timing(), member.ConsumerProtocol(), transport, member.Regex(`orders-[a-z]{2}`))
		m, err := member.Start(system, "regex-"+name, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	held := func() []string {
		var all []string
		for _, m := range ms {
			all = append(all, flatten(m.Assignment())...)
		}
		slices.Sort(all)
		return all
	}
	want := func(what string, names ...string) {
		t.Helper()
		_, cat := topics()
		var w []string
		for _, tp := range names {
			for p := range cat[tp] {
				w = append(w, flatten([]assignor.TopicPartitions{{Topic: tp, Partitions: []int32{p}}})...)
			}
		}
		slices.Sort(w)
		waitForReal(t, what, func() bool {
			got := held()
			return slices.Equal(got, w) && len(ms[0].Assignment()) > 0 && len(ms[1].Assignment()) > 0
		})
	}
	want("the matching topics shared", "orders-eu", "orders-us")
	created := "orders-" + name[:2]
	create(created, 4)
	want("the topic created after the join assigned", "orders-eu", "orders-us", created)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, m := range ms {
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The coordinator's regex resolution timing in these tests: Kafka's 10
// minutes and 10 s, shortened (a topic created after the join is assigned
// at the resolution the catalog change asks for, no sooner than
// regexRefreshMin after the one before).
const regexRefresh, regexRefreshMin = 2 * time.Second, 500 * time.Millisecond

// regexCoordinator is inProcessCoordinator over the catalog topics reads.
func regexCoordinator(t *testing.T, topics func() (uint64, map[string]int32)) *actor.ActorSystem {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	cc := coordinator.DefaultConsumerConfig()
	cc.SessionTimeout, cc.HeartbeatInterval = 6*time.Second, 300*time.Millisecond
	cc.RegexRefreshInterval, cc.RegexRefreshMinInterval = regexRefresh, regexRefreshMin
	cfg := coordinator.DefaultConfig()
	svc, err := actors.Start(system, actors.Options{Config: cfg, Store: raftfsm.NewMemoryStore(), Logger: quiet, Consumer: &cc, Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	status := func(ctx actor.Context) {
		if _, ok := ctx.Message().(*clusterpb.StatusRequest); ok {
			ctx.Respond(&clusterpb.StatusResponse{NodeId: "n1", State: "Leader", LeaderId: "n1", Ready: true})
		}
	}
	if _, err := system.Root.SpawnNamed(actor.PropsFromFunc(status), "cluster"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		svc.Stop()
		system.Shutdown()
	})
	return system
}

// A regex subscription needs the consumer group protocol: with the classic
// one the member is refused at once, and an invalid regex too.
func TestRegexSubscriptionRefused(t *testing.T) {
	system := actor.NewActorSystem()
	defer system.Shutdown()
	if _, err := member.Start(system, "g", member.Regex("orders-.*")); !errors.Is(err, member.ErrConfig) {
		t.Fatalf("classic protocol with a regex: %v", err)
	}
	if _, err := member.Start(system, "g", member.ConsumerProtocol(), member.Regex("orders-(")); !errors.Is(err, member.ErrConfig) {
		t.Fatalf("invalid regex: %v", err)
	}
}
