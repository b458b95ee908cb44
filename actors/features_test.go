package actors

import (
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// CoordinatorFeatures is answered by the groups actor, also while it is
// fenced, and names the ownership guard only when it is on.
func TestCoordinatorFeatures(t *testing.T) {
	for _, tc := range []struct {
		guard, fenced bool
	}{{true, false}, {true, true}, {false, false}} {
		cfg := testConfig()
		cfg.OwnershipGuard = tc.guard
		system := actor.NewActorSystem(quietLogs())
		svc, err := Start(system, Options{Config: cfg, Store: raftfsm.NewMemoryStore(), Logger: quietLogger(), Fenced: tc.fenced})
		if err != nil {
			t.Fatal(err)
		}
		r := ask[*pb.CoordinatorFeaturesResponse](t, svc, &pb.CoordinatorFeaturesRequest{})
		if r.GetErrorCode() != coordinator.ErrNone || r.GetExclusiveOwnership() != tc.guard || (len(r.GetFeatures()) == 1) != tc.guard {
			t.Fatalf("guard %v fenced %v: %v", tc.guard, tc.fenced, r)
		}
		if tc.guard {
			if f := r.GetFeatures()[0]; f.GetName() != "cohort.exclusive-ownership" || f.GetMinVersion() != 1 || f.GetMaxVersion() != 1 {
				t.Fatalf("feature %v", f)
			}
		}
		// The same answer through the router PID (the path remote clients take).
		res, err := svc.Client.Call(t.Context(), &pb.CoordinatorFeaturesRequest{})
		if err != nil || res.(*pb.CoordinatorFeaturesResponse).GetExclusiveOwnership() != tc.guard {
			t.Fatalf("through the router: %v %v", res, err)
		}
		svc.Stop()
		system.Shutdown()
	}
}
