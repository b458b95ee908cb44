package member

import (
	"errors"
	"fmt"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
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
	res, err := t.env.System.Root.RequestFuture(actor.NewPID(leader, actors.RouterName), &pb.CoordinatorFeaturesRequest{}, t.env.RequestTimeout).Result()
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
// (admin.RemoteTLS with a certificate from the nodes' CA). The coordinator
// is the Raft leader: FindCoordinator asks the nodes in
// turn for their cluster status and takes the leader's address.
func Native(addrs ...string) TransportFactory {
	return func(env TransportEnv) (Transport, error) {
		if len(addrs) == 0 {
			return nil, fmt.Errorf("%w: native transport without addresses", membership.ErrConfig)
		}
		if env.System == nil {
			return nil, fmt.Errorf("%w: native transport without an actor system", membership.ErrConfig)
		}
		return &nativeTransport{env: env, addrs: append([]string(nil), addrs...)}, nil
	}
}

type nativeTransport struct {
	env   TransportEnv
	addrs []string

	mu    sync.Mutex
	coord *actor.PID
	next  int
}

func (t *nativeTransport) Close() {}

func (t *nativeTransport) Send(req any, done func(any, error)) {
	switch r := req.(type) {
	case *membership.FindCoordinator:
		go func() { done(t.find(r.Group)) }()
	case *membership.MetadataRequest:
		// The native API has no topic metadata: topics are sized by the
		// member's configuration (Partitions).
		done(&membership.MetadataResponse{}, nil)
	case proto.Message:
		t.mu.Lock()
		coord := t.coord
		t.mu.Unlock()
		if coord == nil {
			done(nil, ErrNoCoordinator)
			return
		}
		if j, ok := r.(*pb.JoinGroupRequest); ok && j.GetApiVersion() == 0 {
			j.ApiVersion = nativeJoinVersion
		}
		f := t.env.System.Root.RequestFuture(coord, r, t.env.timeoutOf(req))
		go func() {
			res, err := f.Result()
			if err != nil {
				t.forget(coord)
				done(nil, fmt.Errorf("%s: %w", coord.Address, err))
				return
			}
			done(res, nil)
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

// find asks each node once for its status and takes the address of the
// node that coordinates group.
func (t *nativeTransport) find(group string) (any, error) {
	var errs []error
	for range t.addrs {
		t.mu.Lock()
		addr := t.addrs[t.next%len(t.addrs)]
		t.next++
		t.mu.Unlock()
		res, err := t.env.System.Root.RequestFuture(actor.NewPID(addr, clusterActor), &clusterpb.StatusRequest{}, t.env.RequestTimeout).Result()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", addr, err))
			continue
		}
		st, ok := res.(*clusterpb.StatusResponse)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: unexpected answer %T", addr, res))
			continue
		}
		leader := coordinatorIn(st, addr, group)
		if leader == "" {
			errs = append(errs, fmt.Errorf("%s: no leader known", addr))
			continue
		}
		t.mu.Lock()
		t.coord = actor.NewPID(leader, actors.RouterName)
		t.mu.Unlock()
		return &membership.CoordinatorFound{Exclusive: t.exclusiveOwnership(leader)}, nil
	}
	return nil, fmt.Errorf("%w: %w", ErrNoCoordinator, errors.Join(errs...))
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

func isJoin(req any) bool {
	switch req.(type) {
	case *pb.JoinGroupRequest:
		return true
	}
	return false
}
