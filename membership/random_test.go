package membership

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// chooser yields choices from a byte string (fuzzing) or a PRNG.
type chooser interface {
	intn(n int) int
}

type prng struct{ r *rand.Rand }

func (p prng) intn(n int) int { return p.r.IntN(n) }

type bytesChooser struct{ b []byte }

func (c *bytesChooser) intn(n int) int {
	if len(c.b) < 2 {
		return 0
	}
	v := int(binary.BigEndian.Uint16(c.b))
	c.b = c.b[2:]
	return v % n
}

var (
	joinCodes      = []int16{0, 0, 0, kerr.MemberIDRequired.Code, kerr.UnknownMemberID.Code, kerr.RebalanceInProgress.Code, kerr.CoordinatorLoadInProgress.Code, kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code, kerr.FencedInstanceID.Code, kerr.InconsistentGroupProtocol.Code, kerr.IllegalGeneration.Code}
	syncCodes      = []int16{0, 0, 0, kerr.RebalanceInProgress.Code, kerr.UnknownMemberID.Code, kerr.IllegalGeneration.Code, kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code, kerr.FencedInstanceID.Code}
	heartbeatCodes = []int16{0, 0, 0, 0, kerr.RebalanceInProgress.Code, kerr.IllegalGeneration.Code, kerr.UnknownMemberID.Code, kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code, kerr.FencedInstanceID.Code}
	commitCodes    = []int16{0, 0, 0, kerr.RebalanceInProgress.Code, kerr.IllegalGeneration.Code, kerr.UnknownMemberID.Code, kerr.NotCoordinator.Code, kerr.CoordinatorLoadInProgress.Code, kerr.FencedInstanceID.Code}
)

// explore drives a machine with random answers, timer fires, callback
// completions (in order, as the shell runs them) and API calls, and checks
// after every step that:
//   - the partitions the application was told it owns (assigned minus
//     revoked and lost) are what the machine says it owns, an assignment
//     never repeats an owned partition and a revocation never names one not
//     owned;
//   - no JoinGroup or SyncGroup goes out while a revoke or lost callback the
//     machine waits for has not returned;
//   - no commit goes out while a join or sync is in flight;
//   - SyncGroup and Heartbeat carry a member id and a generation >= 0;
//   - nothing goes out after the member stopped.
func explore(t *testing.T, c chooser, steps int) {
	cfgs := []Config{testConfig(coopOnly...), testConfig(), testConfig(rangeOne...)}
	cfg := cfgs[c.intn(len(cfgs))]
	if c.intn(2) == 0 {
		cfg.InstanceID = "i"
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := New(cfg)
	now := t0
	var fx Effects
	type pending struct {
		id  uint64
		msg any
	}
	var reqs []pending
	var cbs []Callback
	app := set{}
	waiting := 0 // Wait callbacks not yet done
	stopped := false
	gen := int32(1)
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\nafter:\n%v", fmt.Sprintf(format, args...), log)
	}
	absorb := func(what string) {
		log = append(log, fmt.Sprintf("%s -> phase %v gen %d", what, m.Phase(), m.Generation()))
		for _, r := range fx.Requests {
			if stopped {
				fail("request %T after stop", r.Msg)
			}
			switch q := r.Msg.(type) {
			case *pb.JoinGroupRequest:
				if waiting > 0 {
					fail("JoinGroup while a callback the member waits for runs")
				}
			case *pb.SyncGroupRequest:
				if waiting > 0 {
					fail("SyncGroup while a callback the member waits for runs")
				}
				if q.GetGenerationId() < 0 || q.GetMemberId() == "" {
					fail("SyncGroup with generation %d member %q", q.GetGenerationId(), q.GetMemberId())
				}
			case *pb.HeartbeatRequest:
				if q.GetGenerationId() < 0 || q.GetMemberId() == "" {
					fail("Heartbeat with generation %d member %q", q.GetGenerationId(), q.GetMemberId())
				}
			case *pb.OffsetCommitRequest:
				if m.joinID != 0 || m.syncID != 0 {
					fail("commit while a join or sync is in flight")
				}
			}
			reqs = append(reqs, pending{r.ID, r.Msg})
			log = append(log, fmt.Sprintf("  send %T", r.Msg))
		}
		for _, cb := range fx.Callbacks {
			s := setOf(cb.Partitions)
			switch cb.Kind {
			case Assigned:
				for p := range s {
					if _, ok := app[p]; ok {
						fail("%v assigned again", p)
					}
					app[p] = struct{}{}
				}
			case Revoked, Lost:
				for p := range s {
					if _, ok := app[p]; !ok {
						fail("%v %v but not owned", p, cb.Kind)
					}
					delete(app, p)
				}
			}
			if cb.Wait {
				waiting++
			}
			cbs = append(cbs, cb)
			log = append(log, fmt.Sprintf("  callback %v %s wait=%v", cb.Kind, tpString(cb.Partitions), cb.Wait))
		}
		if fx.Stopped {
			stopped = true
		}
		if fmt.Sprint(app.list()) != fmt.Sprint(m.Owned()) {
			fail("application owns %v, machine %v", app.list(), m.Owned())
		}
		fx.Reset()
	}
	answer := func(p pending) any {
		switch q := p.msg.(type) {
		case *FindCoordinator:
			if c.intn(4) == 0 {
				return nil
			}
			return &CoordinatorFound{Exclusive: c.intn(2) == 0}
		case *MetadataRequest:
			if c.intn(4) == 0 {
				return nil
			}
			return &MetadataResponse{Partitions: map[string]int32{"t": 6}}
		case *pb.JoinGroupRequest:
			code := joinCodes[c.intn(len(joinCodes))]
			if code != 0 {
				return &pb.JoinGroupResponse{ErrorCode: int32(code), MemberId: "m1"}
			}
			if c.intn(3) == 0 {
				gen++
			}
			names := []string{}
			for _, b := range cfg.Balancers {
				names = append(names, b.ProtocolName())
			}
			proto := names[c.intn(len(names))]
			leader := "other"
			var members []*pb.JoinGroupMember
			if c.intn(2) == 0 {
				leader = "m1"
				for _, pr := range q.GetProtocols() {
					if pr.GetName() == proto {
						members = append(members, &pb.JoinGroupMember{MemberId: "m1", Metadata: pr.GetMetadata()})
						members = append(members, &pb.JoinGroupMember{MemberId: "m2", Metadata: pr.GetMetadata()})
					}
				}
			}
			return &pb.JoinGroupResponse{MemberId: "m1", GenerationId: gen, ProtocolName: &proto, Leader: leader, Members: members}
		case *pb.SyncGroupRequest:
			code := syncCodes[c.intn(len(syncCodes))]
			if code != 0 {
				return &pb.SyncGroupResponse{ErrorCode: int32(code)}
			}
			var ps []int32
			for p := range int32(6) {
				if c.intn(2) == 0 {
					ps = append(ps, p)
				}
			}
			return &pb.SyncGroupResponse{Assignment: assignmentOf(tp("t", ps...))}
		case *pb.HeartbeatRequest:
			return &pb.HeartbeatResponse{ErrorCode: int32(heartbeatCodes[c.intn(len(heartbeatCodes))])}
		case *pb.OffsetCommitRequest:
			code := commitCodes[c.intn(len(commitCodes))]
			return &pb.OffsetCommitResponse{Topics: []*pb.TopicPartitionErrors{{Name: "t", Partitions: []*pb.PartitionError{{Partition: 0, ErrorCode: int32(code)}}}}}
		case *pb.LeaveGroupRequest:
			return &pb.LeaveGroupResponse{}
		}
		return nil
	}

	m.Start(now, &fx)
	absorb("start")
	for step := 0; step < steps; step++ {
		switch k := c.intn(10); {
		case k < 4 && len(reqs) > 0: // answer a request (any order: stale answers happen)
			i := c.intn(len(reqs))
			p := reqs[i]
			reqs = append(reqs[:i], reqs[i+1:]...)
			res := answer(p)
			var err error
			if res == nil {
				err = fmt.Errorf("connection reset")
			}
			m.OnResponse(now, p.id, res, err, &fx)
			absorb(fmt.Sprintf("answer %T err=%v", p.msg, err))
		case k < 6 && len(cbs) > 0: // the oldest callback returns
			cb := cbs[0]
			cbs = cbs[1:]
			if cb.Wait {
				waiting--
			}
			m.OnCallbackDone(now, cb.Token, &fx)
			absorb(fmt.Sprintf("callback %v done", cb.Kind))
		case k < 8:
			now = now.Add(time.Duration(c.intn(3000)) * time.Millisecond)
			kind := TimerKind(1 + c.intn(int(NumTimers)-1))
			m.OnTimer(now, kind, &fx)
			absorb("timer " + kind.String())
		case k == 8:
			switch c.intn(4) {
			case 0:
				free := m.Phase() == Stable && m.waitToken == 0
				if err := m.EnforceRebalance(now, "r", &fx); free && err != nil {
					fail("EnforceRebalance in a stable generation: %v", err)
				}
				absorb("enforce")
			case 1:
				m.Mark("t", int32(c.intn(6)), int64(step))
			case 2:
				_ = m.Commit(now, uint64(step), map[string]map[int32]int64{"t": {0: int64(step)}}, &fx)
				absorb("commit")
			case 3:
				_ = m.Commit(now, uint64(step), nil, &fx)
				absorb("commit marked")
			}
		case k == 9 && c.intn(20) == 0:
			m.Close(now, &fx)
			absorb("close")
		}
	}
}

func TestRandomEvents(t *testing.T) {
	seeds := 1000
	if testing.Short() {
		seeds = 100
	}
	for seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			explore(t, prng{rand.New(rand.NewPCG(uint64(seed), 7))}, 400)
		})
	}
}

func FuzzMachine(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 3, 0, 4, 0, 5})
	f.Fuzz(func(t *testing.T, b []byte) {
		explore(t, &bytesChooser{b: b}, len(b)/2)
	})
}
