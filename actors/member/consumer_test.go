package member_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/coordinator"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// inProcessCoordinator starts cohort's group service (the group actors a
// node runs, over an in-memory store) on a fresh actor system whose
// catalog holds topic "t" with six partitions, next to a stand-in for a
// node's cluster actor that says this system leads. Members started on the
// system reach it through the native transport (Native(system.Address())),
// as they reach a node's, without a socket: protoactor delivers to local
// PIDs directly. consumer sets whether consumer groups may be created.
func inProcessCoordinator(t *testing.T, consumer bool) (*actor.ActorSystem, *actors.Service) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	topics := map[string]int32{"t": 6}
	cc := coordinator.DefaultConsumerConfig()
	cc.SessionTimeout, cc.HeartbeatInterval = 6*time.Second, 300*time.Millisecond
	cfg := coordinator.DefaultConfig()
	cfg.InitialRebalanceDelay = 0
	opts := actors.Options{Config: cfg, Store: raftfsm.NewMemoryStore(), Logger: quiet, Consumer: &cc,
		Topics: func() (uint64, map[string]int32) { return 1, topics }}
	if !consumer {
		opts.ConsumerGroups = func() error { return fmt.Errorf("consumer groups are off") }
	}
	svc, err := actors.Start(system, opts)
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
	return system, svc
}

// holders tracks, from the callbacks, which member holds which partition,
// and records every partition given to a member while another held it.
type holders struct {
	mu      sync.Mutex
	by      map[int32]string
	clashes []string
	lost    []string
}

func (h *holders) opts(name string) []member.Opt {
	return []member.Opt{
		member.OnAssigned(func(_ context.Context, _ *member.Member, ps []assignor.TopicPartitions) {
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, p := range partitionsOf(ps) {
				if other, ok := h.by[p]; ok && other != name {
					h.clashes = append(h.clashes, fmt.Sprintf("t/%d given to %s while %s holds it", p, name, other))
				}
				h.by[p] = name
			}
		}),
		member.OnRevoked(func(_ context.Context, _ *member.Member, ps []assignor.TopicPartitions) {
			time.Sleep(200 * time.Millisecond) // finishing the work takes a while
			h.release(name, ps)
		}),
		member.OnLost(func(_ context.Context, _ *member.Member, ps []assignor.TopicPartitions) {
			h.mu.Lock()
			h.lost = append(h.lost, fmt.Sprintf("%s lost %v", name, partitionsOf(ps)))
			h.mu.Unlock()
			h.release(name, ps)
		}),
	}
}

func (h *holders) release(name string, ps []assignor.TopicPartitions) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range partitionsOf(ps) {
		if h.by[p] == name {
			delete(h.by, p)
		}
	}
}

// shares returns each member's partitions, sorted, in the form "a:0,1".
func (h *holders) shares() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	per := map[string][]int32{}
	for p, name := range h.by {
		per[name] = append(per[name], p)
	}
	var out []string
	for name, ps := range per {
		slices.Sort(ps)
		out = append(out, fmt.Sprintf("%s:%v", name, ps))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func partitionsOf(ps []assignor.TopicPartitions) []int32 {
	var out []int32
	for _, tp := range ps {
		out = append(out, tp.Partitions...)
	}
	return out
}

// waitFor polls cond in virtual time for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// balanced reports whether every name holds two of the six partitions and
// its member says so too.
func balanced(h *holders, ms map[string]*member.Member) func() bool {
	return func() bool {
		h.mu.Lock()
		count := map[string]int{}
		for _, name := range h.by {
			count[name]++
		}
		total := len(h.by)
		h.mu.Unlock()
		if total != 6 {
			return false
		}
		for name, m := range ms {
			if count[name] != 6/len(ms) || len(partitionsOf(m.Assignment())) != 6/len(ms) {
				return false
			}
		}
		return true
	}
}

// Three consumer-protocol members on a six-partition topic scale to one and
// back to three against cohort's group actors: from the callbacks, no
// partition is ever given to a member while another holds it, nothing is
// lost, and every member ends with its share.
func TestConsumerProtocolScales(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		system, svc := inProcessCoordinator(t, true)
		h := &holders{by: map[int32]string{}}
		start := func(name string) *member.Member {
			opts := append(timing(), member.ConsumerProtocol(), member.ServerAssignor("uniform"),
				member.WithTransport(member.Native(system.Address())), member.Topics("t"))
			m, err := member.Start(system, "scaling", append(opts, h.opts(name)...)...)
			if err != nil {
				t.Fatal(err)
			}
			return m
		}
		ms := map[string]*member.Member{}
		for _, name := range []string{"a", "b", "c"} {
			ms[name] = start(name)
		}
		waitFor(t, "three shares of two", balanced(h, ms))
		t.Logf("three members: %s", h.shares())
		for _, m := range ms {
			if m.GroupProtocol() != "consumer" || m.Generation() <= 0 || len(m.MemberID()) != 22 {
				t.Fatalf("member %s: protocol %s epoch %d", m.MemberID(), m.GroupProtocol(), m.Generation())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, name := range []string{"b", "c"} {
			if err := ms[name].Close(ctx); err != nil {
				t.Fatalf("close %s: %v", name, err)
			}
			delete(ms, name)
		}
		waitFor(t, "one member with all six", balanced(h, ms))
		t.Logf("one member: %s", h.shares())
		for _, name := range []string{"d", "e"} {
			ms[name] = start(name)
		}
		waitFor(t, "three shares of two again", balanced(h, ms))
		t.Logf("three members again: %s", h.shares())
		if err := ms["a"].EnforceRebalance("why"); !errors.Is(err, member.ErrUnsupported) {
			t.Fatalf("EnforceRebalance: %v", err)
		}
		res, err := svc.Call(ctx, &pb.ConsumerGroupDescribeRequest{GroupId: "scaling"})
		if err != nil {
			t.Fatal(err)
		}
		if d := res.(*pb.ConsumerGroupDescribeResponse); d.GetState() != "Stable" || len(d.GetMembers()) != 3 {
			t.Fatalf("group %s with %d members", d.GetState(), len(d.GetMembers()))
		}
		for _, m := range ms {
			if err := m.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.clashes) > 0 || len(h.lost) > 0 || len(h.by) != 0 {
			t.Fatalf("clashes %v, lost %v, held after close %v", h.clashes, h.lost, h.by)
		}
	})
}

// A consumer-protocol member whose coordinator does not serve the protocol
// (its first heartbeat is answered UNSUPPORTED_VERSION) speaks the classic
// protocol instead, with the same callbacks.
func TestConsumerProtocolFallsBackToClassic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		system, _ := inProcessCoordinator(t, false)
		h := &holders{by: map[int32]string{}}
		opts := append(timing(), member.ConsumerProtocol(), member.WithTransport(member.Native(system.Address())),
			member.Topics("t"), member.Partitions("t", 6)) // the classic leader assigns
		m, err := member.Start(system, "old-style", append(opts, h.opts("a")...)...)
		if err != nil {
			t.Fatal(err)
		}
		ms := map[string]*member.Member{"a": m}
		waitFor(t, "all six through the classic protocol", balanced(h, ms))
		if m.GroupProtocol() != "classic" || m.Protocol() == "" {
			t.Fatalf("group protocol %s, assignor %q", m.GroupProtocol(), m.Protocol())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := m.EnforceRebalance("classic supports it"); err != nil {
			t.Fatal(err)
		}
		if err := m.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
