package membership

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// A simulation of member machines and the coordinator's group machine
// together, in virtual time: requests and answers take a few milliseconds,
// callbacks take what the run draws (revokes up to past the rebalance
// timeout), members join, leave and crash, and the coordinator fails over
// (its unacknowledged writes are lost, the next one restores the group from
// the store after a pause). Two properties are checked:
//   - no partition ever has two owners. A member owns a partition from the
//     start of its Assigned callback until its Revoked callback returns, or
//     until its machine gives up the generation (session expiry, a revoke
//     past the rebalance timeout: what Lost then reports), or it crashes;
//   - every partition of a crashed member is owned again within its session
//     timeout, the failovers' time and a rebalance.

const (
	simSession     = 6 * time.Second
	simHeartbeat   = time.Second
	simRebalance   = 12 * time.Second
	simPartitions  = 6
	simDownMax     = 2 * time.Second
	simActionsEnd  = 90 * time.Second
	simCheckWindow = 60 * time.Second
)

var errSimDown = errors.New("coordinator unreachable")

type simEvent struct {
	at  time.Duration
	seq uint64
	fn  func()
}

type simQueue []*simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type sim struct {
	t     *testing.T
	r     *rand.Rand
	now   time.Duration
	epoch time.Time
	q     simQueue
	seq   uint64
	log   []string

	cfg      coordinator.Config
	store    *raftfsm.MemoryStore
	g        *coordinator.Group
	gfx      coordinator.Effects
	term     int
	gtimers  map[coordinator.TimerKey]uint64
	nextID   int
	failures []time.Duration

	members  []*simMember
	owner    map[int32]*simMember
	crashes  []simCrash
	crashLog []time.Duration // every crash's time
	err      error
}

type simCrash struct {
	name  string
	at    time.Duration
	parts []int32
}

type simMember struct {
	s        *sim
	name     string
	m        *Machine
	fx       Effects
	timers   [NumTimers]uint64
	queue    []Callback
	running  bool
	crashed  bool
	stopped  bool
	owns     map[int32]bool
	revoking map[int32]bool // a running revoke's partitions
}

type simReply struct {
	m    *simMember
	id   uint64
	term int
}

func (s *sim) at() time.Time { return s.epoch.Add(s.now) }

func (s *sim) after(d time.Duration, fn func()) {
	s.seq++
	heap.Push(&s.q, &simEvent{at: s.now + d, seq: s.seq, fn: fn})
}

// armTimer runs fire after d unless the timer was armed again or cancelled
// since: set records the timer's sequence number, valid checks it then.
func (s *sim) armTimer(d time.Duration, set func(seq uint64), valid func(seq uint64) bool, fire func()) {
	s.seq++
	seq := s.seq
	set(seq)
	s.after(d, func() {
		if valid(seq) {
			fire()
		}
	})
}

func (s *sim) latency() time.Duration { return time.Duration(1+s.r.IntN(5)) * time.Millisecond }

func (s *sim) logf(format string, args ...any) {
	s.log = append(s.log, fmt.Sprintf("%9.3fs ", s.now.Seconds())+fmt.Sprintf(format, args...))
}

func (s *sim) fail(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%.3fs: %s", s.now.Seconds(), fmt.Sprintf(format, args...))
	}
}

// ---- the coordinator ----

func (s *sim) up() bool { return s.g != nil }

func (s *sim) startCoordinator(previousAlive time.Time) {
	s.term++
	s.gtimers = map[coordinator.TimerKey]uint64{}
	rec, offsets, _ := s.store.Load("g")
	if rec == nil && len(offsets) == 0 {
		s.g = coordinator.New("g", &s.cfg, s.at())
	} else {
		s.g = coordinator.Restore(&s.cfg, rec, offsets, s.at())
		s.g.SetTakeover(coordinator.TakeoverSessions{Silent: s.store.Sessions("g"), PreviousAlive: previousAlive})
	}
	s.g.Start(s.at(), &s.gfx)
	s.logf("coordinator term %d up: %v generation %d members %v", s.term, s.g.State(), s.g.Generation(), s.g.MemberIDs())
	s.runGroupEffects()
}

func (s *sim) failover() {
	if !s.up() {
		return
	}
	alive := s.at()
	s.g.Unload(s.at(), &s.gfx)
	s.runGroupEffects()
	s.g = nil
	s.term++
	s.failures = append(s.failures, s.now)
	down := time.Duration(200+s.r.IntN(int(simDownMax/time.Millisecond)-200)) * time.Millisecond
	s.logf("coordinator fails over, down %v", down)
	s.after(down, func() { s.startCoordinator(alive) })
}

func (s *sim) runGroupEffects() {
	fx := &s.gfx
	term := s.term
	for _, r := range fx.Replies {
		to := r.To.(*simReply)
		msg := r.Msg
		s.after(s.latency(), func() { to.m.onResponse(to.id, msg, nil) })
	}
	for _, op := range fx.Timers {
		key := op.Key
		if op.Cancel {
			delete(s.gtimers, key)
			continue
		}
		s.armTimer(op.After, func(seq uint64) { s.gtimers[key] = seq },
			func(seq uint64) bool { return s.term == term && s.gtimers[key] == seq },
			func() {
				delete(s.gtimers, key)
				s.g.OnTimer(s.at(), key, &s.gfx)
				s.runGroupEffects()
			})
	}
	for _, p := range fx.Persists {
		p := p
		// Durable once acknowledged: a failover before that loses it.
		s.after(s.latency(), func() {
			if s.term != term {
				return
			}
			var werr error
			s.store.Append("g", p.Records, p.Fence, func(err error) { werr = err })
			s.g.OnPersisted(s.at(), p.Token, werr, &s.gfx)
			s.runGroupEffects()
		})
	}
	fx.Reset()
}

// deliver hands a member's request to the coordinator.
func (s *sim) deliver(m *simMember, id uint64, msg any) {
	if !s.up() {
		s.after(s.latency(), func() { m.onResponse(id, nil, errSimDown) })
		return
	}
	to := &simReply{m: m, id: id, term: s.term}
	reply := func(res any) { s.after(s.latency(), func() { m.onResponse(id, res, nil) }) }
	now := s.at()
	switch r := msg.(type) {
	case *FindCoordinator:
		reply(&CoordinatorFound{Exclusive: true})
	case *MetadataRequest:
		reply(&MetadataResponse{Partitions: map[string]int32{"t": simPartitions}})
	case *pb.JoinGroupRequest:
		r = proto.CloneOf(r)
		r.ApiVersion = 9
		newID := ""
		if r.GetMemberId() == "" {
			s.nextID++
			newID = fmt.Sprintf("%s-%d", m.name, s.nextID)
		}
		s.g.Join(now, r, newID, to, &s.gfx)
	case *pb.SyncGroupRequest:
		s.g.Sync(now, r, to, &s.gfx)
	case *pb.HeartbeatRequest:
		code := s.g.Heartbeat(now, r, &s.gfx)
		reply(&pb.HeartbeatResponse{ErrorCode: code})
	case *pb.OffsetCommitRequest:
		s.g.Commit(now, r, to, &s.gfx)
	case *pb.LeaveGroupRequest:
		s.g.Leave(now, r, to, &s.gfx)
	default:
		s.fail("unexpected request %T", msg)
	}
	s.runGroupEffects()
}

// ---- the members ----

func runSim(t *testing.T, seed uint64, cooperative bool) (*sim, error) {
	s := &sim{
		t: t, r: rand.New(rand.NewPCG(seed, seed*0x9e3779b97f4a7c15+1)),
		epoch: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
		cfg:   coordinator.DefaultConfig(), store: raftfsm.NewMemoryStore(), owner: map[int32]*simMember{},
	}
	s.cfg.InitialRebalanceDelay = 100 * time.Millisecond
	s.cfg.MinSessionTimeout = time.Second
	balancers := []assignor.Balancer{assignor.Range()}
	if cooperative {
		balancers = []assignor.Balancer{assignor.CooperativeSticky()}
	}
	s.startCoordinator(time.Time{})
	for range 2 + s.r.IntN(3) {
		s.addMember(balancers)
	}
	// Actions every 1-8 s until simActionsEnd.
	var act func()
	act = func() {
		if s.now >= simActionsEnd {
			return
		}
		live := s.liveMembers()
		switch n := s.r.IntN(100); {
		case n < 25 && len(live) < 5:
			s.addMember(balancers)
		case n < 35 && len(live) > 1:
			s.close(live[s.r.IntN(len(live))])
		case n < 60 && len(live) > 1:
			s.crash(live[s.r.IntN(len(live))])
		case n < 85:
			s.failover()
		}
		s.after(time.Duration(1000+s.r.IntN(7000))*time.Millisecond, act)
	}
	s.after(3*time.Second, act)
	end := simActionsEnd + simCheckWindow
	for s.q.Len() > 0 && s.err == nil {
		e := heap.Pop(&s.q).(*simEvent)
		if e.at > end {
			break
		}
		s.now = e.at
		e.fn()
		if s.err == nil {
			s.checkCrashes()
		}
	}
	if s.err == nil {
		s.now = end
		s.checkCrashes()
	}
	return s, s.err
}

// crashBound is how long after a crash its partitions may stay unowned: the
// session timeout, a heartbeat, the takeover grace and, for the rebalance
// and for each failover after the crash, the coordinator's pause and the
// rebalance timeout (the longest a join phase waits), and a second of
// slack; each later crash may start another rebalance before the first
// completes (a member that joined and crashed is waited for), and adds its
// own session timeout and rebalance.
func (s *sim) crashBound(c simCrash) time.Duration {
	failovers, crashes := 0, 0
	for _, f := range s.failures {
		if f >= c.at-simHeartbeat {
			failovers++
		}
	}
	for _, o := range s.crashLog {
		if o > c.at {
			crashes++
		}
	}
	return simSession + simHeartbeat + s.cfg.TakeoverSessionFloor + time.Second +
		time.Duration(1+failovers)*(simDownMax+simRebalance) + time.Duration(crashes)*(simSession+simRebalance)
}

// checkCrashes fails when a crashed member's partition stayed unowned past
// its bound while some member was live to take it.
func (s *sim) checkCrashes() {
	if len(s.liveMembers()) == 0 {
		return
	}
	keep := s.crashes[:0]
	for _, c := range s.crashes {
		var unowned []int32
		for _, p := range c.parts {
			if s.owner[p] == nil {
				unowned = append(unowned, p)
			}
		}
		if len(unowned) == 0 {
			continue
		}
		if bound := s.crashBound(c); s.now-c.at > bound {
			s.fail("partitions %v of %s (crashed at %.3fs) unowned for more than %v", unowned, c.name, c.at.Seconds(), bound)
		}
		keep = append(keep, c)
	}
	s.crashes = keep
}

// simSeeds is how many seeds a run tries: COHORT_SIM_SEEDS when set (make
// fuzz runs many more), else 1,500 (200 with -short). COHORT_SIM_FIRST
// shifts the first seed.
func simSeeds(t *testing.T) (first, n uint64) {
	n = 1500
	if testing.Short() {
		n = 200
	}
	if v := os.Getenv("COHORT_SIM_SEEDS"); v != "" {
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("COHORT_SIM_SEEDS: %v", err)
		}
		n = x
	}
	if v := os.Getenv("COHORT_SIM_FIRST"); v != "" {
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("COHORT_SIM_FIRST: %v", err)
		}
		first = x
	}
	return first, n
}

// TestSimulatedOwnership runs the simulation over many seeds, eager and
// cooperative; a failing seed prints its run.
func TestSimulatedOwnership(t *testing.T) {
	for _, coop := range []bool{false, true} {
		name := "eager"
		if coop {
			name = "cooperative"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			first, n := simSeeds(t)
			seeds := simRegressions[coop]
			for seed := first; seed < first+n; seed++ {
				seeds = append(seeds, seed)
			}
			for _, seed := range seeds {
				if s, err := runSim(t, seed, coop); err != nil {
					t.Fatalf("seed %d: %v\n%s", seed, err, strings.Join(lastLines(s.log, 80), "\n"))
				}
			}
		})
	}
}

// simRegressions are seeds that found defects, run first every time: a
// revoke limit counted from the callback rather than from the coordinator's
// rebalance (eager 0, cooperative 8), a closing member that stopped
// heartbeating on an error (cooperative 12) or on the generation its
// abandoned join formed (31), a revoke limit restarted by the close's own
// revoke (143), a closing member heartbeating in a generation a failover
// lost (3434) or that stopped on an answer about the generation it had
// left (2361), a closing member whose generation from a join was lost with
// its sync in a failover (24174), and the crash bound before it counted
// later crashes (eager 135).
var simRegressions = map[bool][]uint64{
	false: {0, 135},
	true:  {8, 12, 31, 143, 2361, 3434, 24174},
}

func lastLines(l []string, n int) []string {
	if len(l) > n {
		return l[len(l)-n:]
	}
	return l
}
