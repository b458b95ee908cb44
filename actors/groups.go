package actors

import (
	"cmp"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/internal/ratelog"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// RouterName is the well-known actor name of the groups actor; remote
// clients address it as actor.NewPID(nodeAddress, RouterName).
const RouterName = "groups"

// env is what every actor of one coordinator shares.
type env struct {
	cfg    coordinator.Config
	store  Store
	clock  Clock
	system *actor.ActorSystem
	log    *slog.Logger
	// lifecycle bounds the group lifecycle lines (lifecycle.go).
	lifecycle *ratelog.Limiter
	// directory maps group ids to their actors for local calls, which go
	// straight to the group actor; the router keeps it current.
	directory *directory
	// observer, when set, keeps the groups' views, history and metrics.
	observer *Observer
	// loading is how many stored groups are still loading (the router's
	// count, readable from any goroutine).
	loading atomic.Int64
	guard   guardCounters
	// lease, when set, must hold for a group actor to answer: false
	// answers NOT_COORDINATOR (see Options.Lease).
	lease func(now time.Time) bool
	// peer, when set, reports whether an address is another node's
	// (Options.Peer).
	peer func(addr string) bool
	// workers run the router's mailbox and the group actors' timer wakes
	// (workers.go).
	workers *workers
	// serving is the router's activation count while it coordinates and 0
	// once deactivation begins. A group actor answers only while it equals
	// the activation it was spawned in: one still draining its mailbox
	// after a deactivation (or a quick re-activation) answers
	// NOT_COORDINATOR instead of from state a newer leader may have changed.
	serving atomic.Uint64
	// consumer is what consumer groups (KIP-848) need (consumer.go).
	consumer consumerEnv
	// previousAlive is when the coordinator before this activation was last
	// known alive (nil: unknown); see Service.ActivateAfter.
	previousAlive atomic.Pointer[time.Time]
}

// takeover returns what a group restored in this activation knows of its
// members' sessions.
func (e *env) takeover(groupID string) coordinator.TakeoverSessions {
	var t coordinator.TakeoverSessions
	if p := e.previousAlive.Load(); p != nil {
		t.PreviousAlive = *p
	}
	if ss, ok := e.store.(SessionStore); ok {
		t.Silent = ss.Sessions(groupID)
	}
	return t
}

// Addressed is implemented by an Answerer that passes its answer on to an
// actor (a node's native API answers a request it routed to a shard through
// one): ReplyAddress is that actor's actor system address, "" when none.
// A wrapper around another Answerer reports the address of the one inside.
type Addressed interface {
	ReplyAddress() string
}

// ReplyAddress is the actor system address an answer to to goes to: a
// PID's, or an Addressed answerer's; "" for anything else.
func ReplyAddress(to coordinator.ReplyTo) string {
	switch r := to.(type) {
	case *actor.PID:
		if r != nil {
			return r.Address
		}
	case Addressed:
		return r.ReplyAddress()
	}
	return ""
}

// fromPeer reports whether an answer goes to another node of the cluster,
// which forwarded the request.
func (e *env) fromPeer(to coordinator.ReplyTo) bool {
	if e.peer == nil {
		return false
	}
	addr := ReplyAddress(to)
	return addr != "" && e.peer(addr)
}

// answers reports whether a group actor spawned in activation term may
// answer from its state at now (its clock reading for the request).
func (e *env) answers(term uint64, now time.Time) bool {
	return e.serving.Load() == term && (e.lease == nil || e.lease(now))
}

// guardCounters sum the ownership guard's decisions over every group.
type guardCounters struct {
	withheld, followUps atomic.Uint64
}

// call is a local request: the answer goes to reply, a channel of capacity
// 1 (Service.CallWithin) or a coordinator.Answerer (Service.Send).
type call struct {
	req   proto.Message
	reply coordinator.ReplyTo
}

// groupRequest is every native request addressed to one group.
type groupRequest interface {
	proto.Message
	GetGroupId() string
}

type groupsActor struct {
	env       *env
	children  map[string]*actor.PID
	summaries map[string]groupSummary
	// loading holds the groups whose actor has not reported its state yet;
	// ListGroups waits for them (in lists) so it never misses a stored group.
	loading  map[string]bool
	lists    []pendingList
	stopping bool
	active   bool   // activate on start
	terms    uint64 // activations so far
	behavior actor.Behavior
}

type pendingList struct {
	to  coordinator.ReplyTo
	req *pb.ListGroupsRequest
}

func newGroupsActor(e *env, active bool) actor.Producer {
	return func() actor.Actor {
		r := &groupsActor{env: e, children: map[string]*actor.PID{}, summaries: map[string]groupSummary{}, loading: map[string]bool{}, active: active}
		r.behavior = actor.NewBehavior()
		r.behavior.Become(r.fenced)
		return r
	}
}

// activate and deactivate switch the router between coordinating groups
// (active) and answering NOT_COORDINATOR (fenced); they are answered with
// themselves once done.
type (
	activate   struct{}
	deactivate struct{}
)

func (r *groupsActor) Receive(ctx actor.Context) { r.behavior.Receive(ctx) }

// fenced is the behavior while this node does not coordinate groups.
func (r *groupsActor) fenced(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if r.active {
			r.onActivate(ctx)
		}
	case *activate:
		r.onActivate(ctx)
		ctx.Respond(m)
	case *deactivate:
		ctx.Respond(m)
	case *stopGone:
		ctx.Stop(m.pid)
	case *call:
		if _, ok := m.req.(*pb.CoordinatorFeaturesRequest); ok {
			deliver(ctx, m.reply, coordinator.Features(&r.env.cfg))
			return
		}
		deliver(ctx, m.reply, coordinator.NotCoordinator(m.req, coordinator.ErrNotCoordinator))
	case *pb.CoordinatorFeaturesRequest:
		deliver(ctx, ctx.Sender(), coordinator.Features(&r.env.cfg))
	case *pb.ListGroupsRequest, groupRequest:
		deliver(ctx, ctx.Sender(), coordinator.NotCoordinator(m.(proto.Message), coordinator.ErrNotCoordinator))
	}
}

func (r *groupsActor) onActivate(ctx actor.Context) {
	r.stopping = false
	r.terms++
	r.env.serving.Store(r.terms)
	r.behavior.Become(r.serving)
	r.loadStored(ctx)
}

// serving is the behavior while this node coordinates groups.
func (r *groupsActor) serving(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *activate:
		ctx.Respond(m)
	case *deactivate:
		r.onDeactivate(ctx)
		ctx.Respond(m)
	case *actor.Stopping:
		r.stopping = true
	case *call:
		r.onRequest(ctx, m.req, m.reply)
	case *pb.ListGroupsRequest, *pb.CoordinatorFeaturesRequest, groupRequest:
		r.onRequest(ctx, m.(proto.Message), ctx.Sender())
	case *stopGone:
		ctx.Stop(m.pid)
	case *groupSummary:
		if r.children[m.id] != nil {
			r.summaries[m.id] = *m
		}
		r.loaded(ctx, m.id)
	case *groupReload:
		if r.children[m.id] == m.pid {
			r.forget(ctx, m.id)
			r.spawn(ctx, m.id)
			r.stopAfterGrace(ctx, m.pid)
		}
	case *groupGone:
		if r.children[m.id] == m.pid {
			r.forget(ctx, m.id)
		}
		r.stopAfterGrace(ctx, m.pid)
	case *actor.Terminated:
		r.onTerminated(ctx, m)
	}
}

// goneGrace is how long a gone group's actor keeps forwarding requests.
const goneGrace = 10 * time.Second

type stopGone struct{ pid *actor.PID }

// stopAfterGrace stops a group actor that gave its group up, goneGrace
// from now: local callers may still hold its PID for a moment, and it
// forwards what they send back here until then.
func (r *groupsActor) stopAfterGrace(ctx actor.Context, pid *actor.PID) {
	self := ctx.Self()
	time.AfterFunc(goneGrace, func() { r.env.system.Root.Send(self, &stopGone{pid: pid}) })
}

func (r *groupsActor) onRequest(ctx actor.Context, req proto.Message, to coordinator.ReplyTo) {
	switch m := req.(type) {
	case *pb.ListGroupsRequest:
		if len(r.loading) > 0 {
			r.lists = append(r.lists, pendingList{to: to, req: m})
			return
		}
		deliver(ctx, to, r.listGroups(m))
	case *pb.CoordinatorFeaturesRequest:
		deliver(ctx, to, coordinator.Features(&r.env.cfg))
	case groupRequest:
		r.route(ctx, m, to)
	}
}

func (r *groupsActor) forget(ctx actor.Context, id string) {
	r.env.directory.Delete(id)
	delete(r.children, id)
	delete(r.summaries, id)
	r.loaded(ctx, id)
}

// loaded marks a group as having reported; ListGroups requests waiting for
// the stored groups to load are answered once none is left loading.
func (r *groupsActor) loaded(ctx actor.Context, id string) {
	if !r.loading[id] {
		return
	}
	delete(r.loading, id)
	r.env.loading.Store(int64(len(r.loading)))
	if len(r.loading) > 0 {
		return
	}
	for _, l := range r.lists {
		deliver(ctx, l.to, r.listGroups(l.req))
	}
	r.lists = nil
}

// onDeactivate stops every group actor (each answers its parked requests
// NOT_COORDINATOR) and forgets them. A poison pill, not a stop: the requests
// already in a mailbox are answered (NOT_COORDINATOR, the term is over)
// before the actor stops, where a stop would drop them unanswered.
func (r *groupsActor) onDeactivate(ctx actor.Context) {
	r.stopping = true // Service.Deactivate ended the term (env.serving) before sending this
	for id, pid := range r.children {
		r.env.directory.Delete(id)
		ctx.Poison(pid)
	}
	clear(r.children)
	clear(r.summaries)
	clear(r.loading)
	r.env.loading.Store(0)
	for _, l := range r.lists {
		deliver(ctx, l.to, coordinator.NotCoordinator(l.req, coordinator.ErrNotCoordinator))
	}
	r.lists = nil
	r.behavior.Become(r.fenced)
}

// loadStored starts an actor for every stored group, so that ListGroups sees
// them and their timers (session expiry, offset retention) run.
func (r *groupsActor) loadStored(ctx actor.Context) {
	ids, err := r.env.store.Groups()
	if err != nil {
		panic("list stored groups: " + err.Error())
	}
	for _, id := range ids {
		r.spawn(ctx, id)
	}
	if len(ids) > 0 {
		r.env.log.Info("groups loaded", slog.Int("groups", len(ids)))
	}
}

func (r *groupsActor) spawn(ctx actor.Context, id string) *actor.PID {
	props := actor.PropsFromProducer(newGroupActor(id, r.env, r.terms),
		actor.WithSupervisor(actor.NewOneForOneStrategy(10, time.Minute, actor.DefaultDecider)),
		// A group actor runs on the goroutine of whoever sends to it while
		// it is idle: no goroutine hand-off per request. It never blocks.
		actor.WithDispatcher(groupDispatcher))
	pid := ctx.Spawn(props)
	r.children[id] = pid
	r.env.directory.Store(id, pid)
	r.loading[id] = true
	r.env.loading.Store(int64(len(r.loading)))
	return pid
}

// groupDispatcher processes a group actor's mailbox on the sender's
// goroutine, up to this many messages before yielding.
var groupDispatcher = actor.NewSynchronizedDispatcher(300)

func (r *groupsActor) route(ctx actor.Context, m groupRequest, to coordinator.ReplyTo) {
	id := m.GetGroupId()
	pid := r.children[id]
	if pid == nil {
		resp, create := r.absent(m)
		if !create {
			if resp != nil {
				deliver(ctx, to, resp)
			}
			return
		}
		pid = r.spawn(ctx, id)
	}
	ctx.Forward(pid)
}

// absent answers a request for a group that has no actor, or reports that
// the request creates the group.
func (r *groupsActor) absent(m groupRequest) (proto.Message, bool) {
	switch m := m.(type) {
	case *pb.ConsumerGroupHeartbeatRequest:
		resp, create := coordinator.ConsumerAbsent(r.env.consumer.cfg, coordinator.ConsumerHeartbeatFromProto(m))
		if !create {
			return resp.Proto(), false
		}
		if refusal := r.env.consumer.refusal(); refusal != nil {
			return refusal, false
		}
		return nil, true
	case *pb.ConsumerGroupDescribeRequest:
		return coordinator.ConsumerDescribeAbsent(m.GetGroupId()), false
	}
	return coordinator.Absent(&r.env.cfg, m)
}

func (r *groupsActor) onTerminated(ctx actor.Context, m *actor.Terminated) {
	if r.stopping {
		return
	}
	for id, pid := range r.children {
		if pid.Equal(m.Who) {
			// Supervision gave up on it; the next request starts it afresh
			// from the store.
			r.forget(ctx, id)
			r.env.log.Warn("group actor stopped", slog.String("group", id))
			return
		}
	}
}

func (r *groupsActor) listGroups(req *pb.ListGroupsRequest) *pb.ListGroupsResponse {
	resp := &pb.ListGroupsResponse{Groups: []*pb.ListedGroup{}}
	matches := func(filter []string, v string) bool {
		return len(filter) == 0 || slices.ContainsFunc(filter, func(f string) bool { return strings.EqualFold(f, v) })
	}
	for id, s := range r.summaries {
		if s.state == coordinator.Dead {
			continue
		}
		typ, state := "classic", s.state.String()
		if s.consumerState != "" {
			typ, state = "consumer", s.consumerState
		}
		if !matches(req.GetTypesFilter(), typ) || !matches(req.GetStatesFilter(), state) {
			continue
		}
		resp.Groups = append(resp.Groups, &pb.ListedGroup{GroupId: id, ProtocolType: s.protocolType, State: state, GroupType: typ})
	}
	slices.SortFunc(resp.Groups, func(a, b *pb.ListedGroup) int { return cmp.Compare(a.GroupId, b.GroupId) })
	return resp
}
