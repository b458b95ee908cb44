package member

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/membership"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/shard"
)

// clusterActor is the well-known name of cohortd's cluster administration
// actor, which answers StatusRequest on every node.
const clusterActor = "cluster"

// nativeJoinVersion is the JoinGroup version whose rules the native API
// follows for this member (the newest: MEMBER_ID_REQUIRED, reasons, KIP-814).
const nativeJoinVersion = 9

// exclusiveOwnership asks the coordinator at leader whether it enforces
// exclusive ownership (the ownership guard: a SyncGroup answer never hands
// out a partition another member has not released). When it does not say
// so, or cannot be asked, the member uses the Java consumer's rule for
// choosing between eager and cooperative, which is safe without the
// coordinator's help.
func (t *nativeTransport) exclusiveOwnership(leader string) bool {
	res, err := t.env.System.Root.RequestFuture(actor.NewPID(leader, actors.RouterName), &pb.CoordinatorFeaturesRequest{}, t.env.waitBound()).Result()
	if err != nil {
		return false
	}
	f, ok := res.(*pb.CoordinatorFeaturesResponse)
	return ok && f.GetExclusiveOwnership()
}

// Native returns the native transport (protoactor remote to cohortd): addrs
// are native API addresses of cohortd nodes (--remote-addr). The member's
// actor system must run protoactor remote, since answers come back through
// it; with TLS on the nodes' native API, that remote runs over TLS too
// (admin.RemoteTLS with a certificate from the nodes' CA). FindCoordinator
// asks every node at once for its cluster status and takes the address of
// the node that coordinates the group (its shard's leader) from the first
// answer that names one still reachable.
//
// A coordinator's death is noticed when its connection ends (protoactor's
// EndpointTerminatedEvent), not when a request times out: every request in
// flight to it fails at once, the member finds the group's coordinator
// again among the live nodes, and a node whose connection ended is not
// taken for the coordinator until it is reachable again.
func Native(addrs ...string) TransportFactory {
	return func(env TransportEnv) (Transport, error) {
		if len(addrs) == 0 {
			return nil, fmt.Errorf("%w: native transport without addresses", membership.ErrConfig)
		}
		if env.System == nil {
			return nil, fmt.Errorf("%w: native transport without an actor system", membership.ErrConfig)
		}
		t := &nativeTransport{
			env:     env,
			addrs:   append([]string(nil), addrs...),
			pending: map[uint64]*inflight{},
			down:    map[string]bool{},
			wake:    make(chan struct{}, 1),
			closed:  make(chan struct{}),
		}
		// Subscribe, not SubscribeWithPredicate: the latter sets the
		// predicate after the subscription is visible, a data race with
		// a Publish under way (onEndpointEvent ignores other events).
		t.sub = env.System.EventStream.Subscribe(t.onEndpointEvent)
		return t, nil
	}
}

// ErrCoordinatorGone is the error of a request whose coordinator's
// connection ended before it answered (the node died or stopped).
var ErrCoordinatorGone = errors.New("member: connection to the coordinator ended")

type nativeTransport struct {
	env   TransportEnv
	addrs []string
	sub   *eventstream.Subscription

	mu      sync.Mutex
	coord   *actor.PID
	next    uint64
	pending map[uint64]*inflight // requests sent and not yet answered
	down    map[string]bool      // addresses whose connection ended, until one connects again

	wake      chan struct{} // a node connected: find asks again at once
	closed    chan struct{} // closed by Close: find stops asking
	closeOnce sync.Once
}

// inflight is one request waiting for its answer: done runs once, with the
// answer or with the error of the connection that ended first.
type inflight struct {
	addr string
	once sync.Once
	done func(any, error)
}

func (f *inflight) finish(res any, err error) { f.once.Do(func() { f.done(res, err) }) }

// onEndpointEvent runs on the publisher's goroutine: it only marks the
// address and fails what waits on it.
func (t *nativeTransport) onEndpointEvent(evt any) {
	switch e := evt.(type) {
	case *remote.EndpointConnectedEvent:
		t.mu.Lock()
		delete(t.down, e.Address)
		t.mu.Unlock()
		select {
		case t.wake <- struct{}{}:
		default:
		}
	case *remote.EndpointTerminatedEvent:
		t.mu.Lock()
		t.down[e.Address] = true
		if t.coord != nil && t.coord.Address == e.Address {
			t.coord = nil
		}
		var failed []*inflight
		for id, f := range t.pending {
			if f.addr == e.Address {
				failed = append(failed, f)
				delete(t.pending, id)
			}
		}
		t.mu.Unlock()
		for _, f := range failed {
			f.finish(nil, fmt.Errorf("%s: %w", e.Address, ErrCoordinatorGone))
		}
	}
}

func (t *nativeTransport) Close() {
	t.closeOnce.Do(func() { close(t.closed) })
	t.env.System.EventStream.Unsubscribe(t.sub)
}

func (t *nativeTransport) Send(req any, done func(any, error)) {
	switch r := req.(type) {
	case *membership.FindCoordinator:
		go func() { done(t.find(r.Group)) }()
	case *membership.MetadataRequest:
		// The native API has no topic metadata: topics are sized by the
		// member's configuration (Partitions).
		done(&membership.MetadataResponse{}, nil)
	case proto.Message:
		if j, ok := r.(*pb.JoinGroupRequest); ok && j.GetApiVersion() == 0 {
			j.ApiVersion = nativeJoinVersion
		}
		t.mu.Lock()
		coord := t.coord
		if coord == nil {
			t.mu.Unlock()
			done(nil, ErrNoCoordinator)
			return
		}
		t.next++
		id := t.next
		f := &inflight{addr: coord.Address, done: done}
		t.pending[id] = f
		t.mu.Unlock()
		fut := t.env.System.Root.RequestFuture(coord, r, t.env.timeoutOf(req))
		go func() {
			res, err := fut.Result()
			t.mu.Lock()
			delete(t.pending, id)
			t.mu.Unlock()
			if err != nil {
				t.forget(coord)
				f.finish(nil, fmt.Errorf("%s: %w", coord.Address, err))
				return
			}
			f.finish(res, nil)
		}()
	default:
		done(nil, fmt.Errorf("native transport: unexpected request %T", req))
	}
}

func (t *nativeTransport) forget(pid *actor.PID) {
	t.mu.Lock()
	if t.coord == pid {
		t.coord = nil
	}
	t.mu.Unlock()
}

// electionPoll is how often find asks the nodes again while the group's
// coordinator is down or unknown (its shard is electing a leader).
const electionPoll = 100 * time.Millisecond

// find asks every node at once for its status and takes the coordinator
// the first answer names that is not known to be down. While the answers
// name none that is up (the coordinator died and its shard elects a new
// leader, which takes about a second) it asks again every electionPoll, for
// up to the wait bound, so that the member reaches the new leader as soon as
// it serves rather than after a backoff grown through the election; a node
// that connects again wakes it early, and Close ends it.
func (t *nativeTransport) find(group string) (any, error) {
	deadline := time.Now().Add(t.env.waitBound())
	for {
		coord, err := t.findOnce(group)
		if err == nil {
			return &membership.CoordinatorFound{Exclusive: t.exclusiveOwnership(coord)}, nil
		}
		if time.Now().Add(electionPoll).After(deadline) {
			return nil, err
		}
		poll := time.NewTimer(electionPoll)
		select {
		case <-poll.C:
		case <-t.wake: // a node came back: it may lead now
			poll.Stop()
		case <-t.closed:
			poll.Stop()
			return nil, err
		}
	}
}

// statusAnswer is one node's answer to findOnce's status request.
type statusAnswer struct {
	addr  string
	coord string // the group's coordinator by that node's status, "" when none
	err   error
}

// findOnce asks every node once, at the same time. A node that is down
// does not hold the others up: its request waits in the background until
// its bound. Addresses known down are asked too, so that their connection
// is tried again and a node that came back is marked up.
func (t *nativeTransport) findOnce(group string) (string, error) {
	t.mu.Lock()
	asked := slices.Clone(t.addrs)
	for addr := range t.down {
		if !slices.Contains(asked, addr) {
			asked = append(asked, addr)
		}
	}
	// Once every node not known down has answered, none of them naming a
	// coordinator that is up, the down ones are not waited for.
	wasUp := map[string]bool{}
	for _, addr := range asked {
		if !t.down[addr] {
			wasUp[addr] = true
		}
	}
	t.mu.Unlock()
	upLeft := len(wasUp)
	answers := make(chan statusAnswer, len(asked))
	timeout := t.env.waitBound()
	for _, addr := range asked {
		go func() {
			res, err := t.env.System.Root.RequestFuture(actor.NewPID(addr, clusterActor), &clusterpb.StatusRequest{}, timeout).Result()
			if err != nil {
				answers <- statusAnswer{addr: addr, err: err}
				return
			}
			st, ok := res.(*clusterpb.StatusResponse)
			if !ok {
				answers <- statusAnswer{addr: addr, err: fmt.Errorf("unexpected answer %T", res)}
				return
			}
			answers <- statusAnswer{addr: addr, coord: coordinatorIn(st, addr, group)}
		}()
	}
	var errs []error
	for range asked {
		a := <-answers
		if wasUp[a.addr] {
			upLeft--
		}
		if coord, err := t.take(a); err == nil {
			return coord, nil
		} else {
			errs = append(errs, err)
		}
		if len(wasUp) > 0 && upLeft == 0 {
			break
		}
	}
	return "", fmt.Errorf("%w: %w", ErrNoCoordinator, errors.Join(errs...))
}

// take makes the coordinator a's answer names the transport's, unless it
// names none or one whose connection ended.
func (t *nativeTransport) take(a statusAnswer) (string, error) {
	switch {
	case a.err != nil:
		return "", fmt.Errorf("%s: %w", a.addr, a.err)
	case a.coord == "":
		return "", fmt.Errorf("%s: no leader known", a.addr)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.down[a.coord] {
		return "", fmt.Errorf("%s: names %s, whose connection ended", a.addr, a.coord)
	}
	t.coord = actor.NewPID(a.coord, actors.RouterName)
	return a.coord, nil
}

// coordinatorIn returns the native API address of the node that
// coordinates group according to the status a node at addr answered, ""
// when it knows none. A node's status names one Raft leader, which
// coordinates every group; once groups are spread over shards, the answer
// depends on group.
func coordinatorIn(st *clusterpb.StatusResponse, addr, group string) string {
	if shards := st.GetShards(); len(shards) > 1 {
		// Several shards: the group's coordinator is the leader of its
		// shard (listed by shard id).
		leader := shards[shard.Of(group, len(shards))].GetLeaderId()
		if leader == st.GetNodeId() {
			return addr
		}
		for _, m := range st.GetMembers() {
			if m.GetNodeId() == leader && leader != "" {
				return m.GetRemoteAddr()
			}
		}
		return ""
	}
	if st.GetState() == "Leader" {
		return addr
	}
	for _, m := range st.GetMembers() {
		if m.GetLeader() && m.GetRemoteAddr() != "" {
			return m.GetRemoteAddr()
		}
	}
	return ""
}
