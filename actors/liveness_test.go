package actors

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// takeoverRun forms a two-member group (10 s sessions), then keeps one
// member heartbeating every 3 s while the other is silent, and takes the
// group over every 10 s (the coordinator is fenced for a second, then
// activated again, as a failover does). It returns how long after the
// silent member's last word the group lost it, and whether the live member
// ever had to rejoin; carry says whether the takeovers carry sessions over.
func takeoverRun(t *testing.T, carry bool, every, horizon time.Duration) (removedAfter time.Duration, liveRejoined bool) {
	t.Helper()
	svc := startService(t, raftfsm.NewMemoryStore())
	defer func() {
		// Stopping may dead-letter a group's last wake, and protoactor's
		// dead-letter log throttle then keeps a goroutine for a second:
		// the bubble must outlive it.
		svc.Stop()
		time.Sleep(2 * time.Second)
	}()
	ids, gen := formGroup(t, svc, "g", 2)
	live, dead := ids[0], ids[1]
	lastWord := time.Now()
	start := time.Now()
	active := true
	nextTakeover := start.Add(every - time.Second) // off the 10 s session ends: no tie to break
	var resume time.Time
	ctx := context.Background()
	for time.Since(start) < horizon {
		time.Sleep(time.Second)
		now := time.Now()
		switch {
		case active && !now.Before(nextTakeover):
			if err := svc.Deactivate(time.Second); err != nil {
				t.Fatal(err)
			}
			active, resume = false, now.Add(time.Second)
			nextTakeover = nextTakeover.Add(every)
		case !active && !now.Before(resume):
			alive := time.Time{}
			if carry {
				alive = resume.Add(-time.Second) // the last contact with the previous leader
			}
			if err := svc.ActivateAfter(time.Second, alive); err != nil {
				t.Fatal(err)
			}
			active = true
		}
		if !active {
			continue
		}
		if int(time.Since(start)/time.Second)%3 == 0 {
			res, err := svc.Call(ctx, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: live})
			if err != nil {
				t.Fatal(err)
			}
			if code := res.(*pb.HeartbeatResponse).ErrorCode; code == coordinator.ErrUnknownMemberID || code == coordinator.ErrIllegalGeneration {
				return 0, true
			}
		}
		d := ask[*pb.DescribeGroupResponse](t, svc, &pb.DescribeGroupRequest{GroupId: "g"})
		has := func(id string) bool {
			for _, m := range d.Members {
				if m.MemberId == id {
					return true
				}
			}
			return false
		}
		if !has(live) {
			return 0, true
		}
		if !has(dead) {
			return time.Since(lastWord), false
		}
	}
	return -1, false
}

// A member that stopped heartbeating is removed one session timeout after
// its last heartbeat, plus at most one takeover's time (the second the
// coordinator is fenced and the 6 s grace), while a takeover comes every
// 10 s; the member that keeps heartbeating is never removed. Without the
// sessions carried over (the activation does not know when the previous
// coordinator was alive), every takeover restarts the silent member's
// session, and it is never removed.
func TestSilentMemberExpiresThroughTakeovers(t *testing.T) {
	// within runs takeovers every `every` and wants the silent member gone
	// within its 10 s session, one takeover (the second fenced and the 6 s
	// grace) and slack, with the live member kept.
	within := func(every, slack time.Duration) func(t *testing.T) {
		return func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				after, rejoined := takeoverRun(t, true, every, 2*time.Minute)
				if rejoined {
					t.Fatal("the live member was removed")
				}
				if bound := 10*time.Second + time.Second + 6*time.Second + slack; after < 0 || after > bound {
					t.Fatalf("silent member removed %v after its last word, want within %v", after, bound)
				}
				t.Logf("silent member removed %v after its last word", after)
			})
		}
	}
	t.Run("carried", within(10*time.Second, time.Second)) // 1 s of polling
	// Takeovers faster than the silence threshold (5 s) and than the
	// grace: the estimate written 2 s after each takeover keeps the end
	// from moving.
	t.Run("quick", within(4*time.Second, 4*time.Second))
	t.Run("restarted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			after, rejoined := takeoverRun(t, false, 10*time.Second, 2*time.Minute)
			if rejoined {
				t.Fatal("the live member was removed")
			}
			if after >= 0 {
				t.Fatalf("silent member removed %v after its last word with full sessions at every takeover; the test would not tell the cases apart", after)
			}
		})
	})
}
