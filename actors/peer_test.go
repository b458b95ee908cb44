package actors

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// peerAddr is the actor system address of another node of the cluster.
const peerAddr = "127.0.0.1:7001"

// relayAnswerer stands for a node's native API answering a request it
// routed for a peer: it carries the peer's address (Addressed).
type relayAnswerer struct {
	addr string
	out  chan proto.Message
}

func (r relayAnswerer) Answer(m proto.Message) { r.out <- m }
func (r relayAnswerer) ReplyAddress() string   { return r.addr }

// A heartbeat another node forwarded keeps its member's takeover window
// open however the answer travels back (a PID, or an answerer that names
// the peer): after a takeover, members whose heartbeats came through a peer
// rejoin directly, as they do when that peer dies, and the leader's rejoin
// gets the current generation instead of starting a rebalance. Heartbeats
// answered to this node itself close the window, and the leader's rejoin
// starts a rebalance, as in Kafka.
func TestForwardedHeartbeatsKeepTheTakeoverWindow(t *testing.T) {
	for _, tc := range []struct {
		name      string
		addr      string
		rebalance bool
	}{
		{"through a peer", peerAddr, false},
		{"direct", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				system := actor.NewActorSystem(quietLogs())
				svc, err := Start(system, Options{Config: testConfig(), Store: raftfsm.NewMemoryStore(), Logger: quietLogger(),
					Peer: func(addr string) bool { return addr == peerAddr }})
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					svc.Stop()
					system.Shutdown()
					time.Sleep(2 * time.Second) // protoactor's dead-letter throttle
				}()
				ids, gen := formGroup(t, svc, "g", 3)
				if err := svc.Deactivate(time.Second); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				if err := svc.ActivateAfter(time.Second, time.Now()); err != nil {
					t.Fatal(err)
				}
				for range 3 {
					time.Sleep(3 * time.Second)
					for _, id := range ids {
						out := make(chan proto.Message, 1)
						svc.Send(&pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: id}, relayAnswerer{addr: tc.addr, out: out})
						if code := (<-out).(*pb.HeartbeatResponse).GetErrorCode(); code != coordinator.ErrNone {
							t.Fatalf("heartbeat of %s: error %d", id, code)
						}
					}
				}
				// The peer died: every member rejoins here, one after the
				// other; the leader's rejoin is the one that may rebalance.
				rejoined := make(chan *pb.JoinGroupResponse, len(ids))
				rebalanced := false
				for i, id := range ids {
					go func() {
						rejoined <- ask[*pb.JoinGroupResponse](t, svc, joinReq("g", fmt.Sprintf("c%d", i), id))
					}()
					synctest.Wait()
					d := ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: "g"})
					if d.GetState() != "Stable" || d.GetGenerationId() != gen {
						rebalanced = true // PreparingRebalance, or past it
					}
				}
				if rebalanced != tc.rebalance {
					t.Fatalf("the rejoins started a rebalance: %v, want %v", rebalanced, tc.rebalance)
				}
				if !rebalanced {
					for range ids {
						if r := <-rejoined; r.GetErrorCode() != coordinator.ErrNone || r.GetGenerationId() != gen {
							t.Fatalf("rejoin of %s: error %d, generation %d; want generation %d", r.GetMemberId(), r.GetErrorCode(), r.GetGenerationId(), gen)
						}
					}
				}
				// A rebalance ends at the rebalance timeout without the
				// members answered before it: the waiting join is answered.
				time.Sleep(31 * time.Second)
			})
		})
	}
}
