package actors

import (
	"cmp"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
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
}

type pendingList struct {
	to  *actor.PID
	req *pb.ListGroupsRequest
}

func newGroupsActor(e *env) actor.Producer {
	return func() actor.Actor {
		return &groupsActor{env: e, children: map[string]*actor.PID{}, summaries: map[string]groupSummary{}, loading: map[string]bool{}}
	}
}

func (r *groupsActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.onStarted(ctx)
	case *actor.Stopping:
		r.stopping = true
	case *pb.ListGroupsRequest:
		if len(r.loading) > 0 {
			r.lists = append(r.lists, pendingList{to: ctx.Sender(), req: m})
			return
		}
		ctx.Respond(r.listGroups(m))
	case groupRequest:
		r.route(ctx, m)
	case *groupSummary:
		if r.children[m.id] != nil {
			r.summaries[m.id] = *m
		}
		r.loaded(ctx, m.id)
	case *groupGone:
		if r.children[m.id] == m.pid {
			r.forget(ctx, m.id)
		}
		ctx.Stop(m.pid)
	case *actor.Terminated:
		r.onTerminated(ctx, m)
	}
}

func (r *groupsActor) forget(ctx actor.Context, id string) {
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
	if len(r.loading) > 0 {
		return
	}
	for _, l := range r.lists {
		if l.to != nil {
			ctx.Send(l.to, r.listGroups(l.req))
		}
	}
	r.lists = nil
}

// onStarted starts an actor for every stored group, so that ListGroups sees
// them and their timers (session expiry, offset retention) run.
func (r *groupsActor) onStarted(ctx actor.Context) {
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
	props := actor.PropsFromProducer(newGroupActor(id, r.env),
		actor.WithSupervisor(actor.NewOneForOneStrategy(10, time.Minute, actor.DefaultDecider)))
	pid := ctx.Spawn(props)
	r.children[id] = pid
	r.loading[id] = true
	return pid
}

func (r *groupsActor) route(ctx actor.Context, m groupRequest) {
	id := m.GetGroupId()
	pid := r.children[id]
	if pid == nil {
		resp, create := coordinator.Absent(&r.env.cfg, m)
		if !create {
			if resp != nil {
				ctx.Respond(resp)
			}
			return
		}
		pid = r.spawn(ctx, id)
	}
	ctx.Forward(pid)
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
	typeOK := len(req.GetTypesFilter()) == 0 || slices.ContainsFunc(req.GetTypesFilter(), func(t string) bool { return strings.EqualFold(t, "classic") })
	if !typeOK {
		return resp
	}
	for id, s := range r.summaries {
		if s.state == coordinator.Dead {
			continue
		}
		if f := req.GetStatesFilter(); len(f) > 0 && !slices.ContainsFunc(f, func(st string) bool { return strings.EqualFold(st, s.state.String()) }) {
			continue
		}
		resp.Groups = append(resp.Groups, &pb.ListedGroup{GroupId: id, ProtocolType: s.protocolType, State: s.state.String(), GroupType: "classic"})
	}
	slices.SortFunc(resp.Groups, func(a, b *pb.ListedGroup) int { return cmp.Compare(a.GroupId, b.GroupId) })
	return resp
}
