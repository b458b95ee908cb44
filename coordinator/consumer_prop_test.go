package coordinator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// cgClient is a simulated consumer: it holds what its last answer gave it
// and reports that as owned.
type cgClient struct {
	id, instance string
	epoch        int32
	held         tpSet
	topics       []string
	regex        string
	rebalanceMs  int32
	assignor     string
	joined       bool // has a member epoch (sends heartbeats, not a join)
	crashed      bool // silent until its session expires; holds nothing
	parked       bool // static member that left with -2
	stubborn     bool // does not give partitions up when told to
}

type cgSim struct {
	t       *testing.T
	r       *rand.Rand
	h       *cgHarness
	clients []*cgClient
	next    int
	names   []string
	// settling: clients no longer change their subscriptions.
	settling bool
	stats    *cgStats
}

// cgStats counts what the random runs went through, so that a run that
// stops exercising a path fails instead of passing vacuously.
type cgStats struct {
	revoking, waiting, fenced, unknown, previousEpoch, staticReplaced int
	removedBy                                                         map[ConsumerTimerKind]int
}

func (s *cgSim) heartbeat(c *cgClient, lose bool) {
	var req *ConsumerHeartbeatRequest
	if !c.joined {
		req = cgJoin(c.id, c.topics...)
		req.RebalanceTimeoutMs = c.rebalanceMs
		if c.regex != "" {
			req.SubscribedTopicRegex = &c.regex
		}
	} else {
		req = cgBeat(c.id, c.epoch, nil)
		if s.r.IntN(3) > 0 || c.held.len() == 0 {
			req.Topics = c.held.list()
		}
		if !s.settling && s.r.IntN(20) == 0 { // subscription change
			c.topics = randomTopics(s.r, s.names)
			req.SubscribedTopicNames = slices.Clone(c.topics)
		}
		if s.r.IntN(4) == 0 { // a full request
			req.RebalanceTimeoutMs = c.rebalanceMs
			req.SubscribedTopicNames = slices.Clone(c.topics)
			req.Topics = c.held.list()
		}
	}
	if c.instance != "" && (!c.joined || s.r.IntN(2) == 0) {
		req.InstanceID = &c.instance
	}
	if c.assignor != "" {
		req.ServerAssignor = &c.assignor
	}
	before := s.h.g.members[c.id]
	var beforeEpoch int32
	if before != nil {
		beforeEpoch = before.epoch
	}
	var replacing bool
	if req.InstanceID != nil && !c.joined {
		if holder := s.h.g.members[s.h.g.static[c.instance]]; holder != nil && holder.id != c.id && holder.epoch == EpochStaticLeave {
			replacing = true
		}
	}
	resp := s.h.hb(req)
	switch {
	case resp.ErrorCode == ErrFencedMemberEpoch:
		s.stats.fenced++
	case resp.ErrorCode == ErrUnknownMemberID:
		s.stats.unknown++
	case resp.ErrorCode != ErrNone:
	case replacing:
		s.stats.staticReplaced++
	case c.joined && before != nil && req.MemberEpoch < beforeEpoch:
		s.stats.previousEpoch++
	}
	if m := s.h.g.members[c.id]; m != nil && resp.ErrorCode == ErrNone {
		switch m.state {
		case MemberUnrevokedPartitions:
			s.stats.revoking++
		case MemberUnreleasedPartitions:
			s.stats.waiting++
		}
	}
	if lose {
		return // the answer is lost: the client knows nothing new
	}
	switch resp.ErrorCode {
	case ErrNone:
		c.joined, c.epoch = true, resp.MemberEpoch
		if resp.HasAssignment {
			next := newTPSet(resp.Assignment)
			if c.stubborn {
				c.held.each(func(k tpKey) { next.add(k.topic, k.partition) })
			}
			c.held = next
		}
	case ErrFencedMemberEpoch, ErrUnknownMemberID:
		c.held, c.joined, c.epoch = tpSet{}, false, 0 // lost; rejoin with the same id
	case ErrUnreleasedInstanceID, ErrFencedInstanceID:
		// another member holds the instance id: give up (fatal for clients)
		c.crashed = true
	default:
		s.t.Fatalf("%s: unexpected error %d %s", c.id, resp.ErrorCode, resp.ErrorMessage)
	}
}

func randomTopics(r *rand.Rand, names []string) []string {
	var out []string
	for _, n := range names {
		if r.IntN(3) > 0 {
			out = append(out, n)
		}
	}
	return out
}

func (s *cgSim) newClient(homogeneous bool) *cgClient {
	s.next++
	c := &cgClient{id: fmt.Sprintf("c%03d", s.next), held: tpSet{}, rebalanceMs: int32(5000 + s.r.IntN(15000))}
	if homogeneous {
		c.topics = slices.Clone(s.names[:2])
	} else {
		c.topics = randomTopics(s.r, s.names)
		if s.r.IntN(5) == 0 {
			c.regex = "t[0-9]"
		}
	}
	if s.r.IntN(4) == 0 {
		c.instance = fmt.Sprintf("i%d", s.r.IntN(4))
	}
	if s.r.IntN(3) == 0 {
		c.assignor = []string{"uniform", "range"}[s.r.IntN(2)]
	}
	s.clients = append(s.clients, c)
	return c
}

// afterTimers makes clients whose member a timer removed drop what they
// hold (their own poll and rebalance timers fire no later than the
// coordinator's).
func (s *cgSim) afterTimers() {
	for _, c := range s.clients {
		if c.joined && s.h.g.members[c.id] == nil {
			// Half of them learn it from their next heartbeat
			// (UNKNOWN_MEMBER_ID) instead of rejoining straight away.
			c.held, c.stubborn = tpSet{}, false
			if s.r.IntN(2) == 0 {
				c.joined, c.epoch = false, 0
			}
		}
	}
}

// checkClients asserts that what every client holds is within what the
// coordinator records for its member, so no two clients ever hold a
// partition at once.
func (s *cgSim) checkClients(step int) {
	holder := map[tpKey]string{}
	for _, c := range s.clients {
		m := s.h.g.members[c.id]
		c.held.each(func(k tpKey) {
			if other, dup := holder[k]; dup {
				s.t.Fatalf("step %d: %s-%d held by clients %s and %s", step, k.topic, k.partition, other, c.id)
			}
			holder[k] = c.id
			if m == nil || !m.assigned.has(k.topic, k.partition) && !m.pending.has(k.topic, k.partition) {
				s.t.Fatalf("step %d: client %s holds %s-%d outside its member's sets", step, c.id, k.topic, k.partition)
			}
		})
	}
}

func (s *cgSim) live() []*cgClient {
	var out []*cgClient
	for _, c := range s.clients {
		if !c.crashed && !c.parked {
			out = append(out, c)
		}
	}
	return out
}

// TestConsumerPropExclusiveOwnership runs random joins, leaves, static
// restarts, crashes, lost answers, stubborn revokers, subscription and
// topic changes and timeouts. After every step no partition is held by two
// clients (or two members); at the end, once every live client heartbeats
// normally, the group converges: Stable, every member holds its target,
// every subscribed partition is owned.
func TestConsumerPropExclusiveOwnership(t *testing.T) {
	seeds := 60
	if testing.Short() {
		seeds = 10
	}
	stats := &cgStats{removedBy: map[ConsumerTimerKind]int{}}
	for seed := range uint64(seeds) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runConsumerSim(t, seed, seed%3 == 0, stats) })
	}
	t.Logf("%+v", *stats)
	if stats.revoking == 0 || stats.waiting == 0 || stats.fenced == 0 || stats.unknown == 0 || stats.previousEpoch == 0 ||
		stats.staticReplaced == 0 || stats.removedBy[ConsumerTimerSession] == 0 || stats.removedBy[ConsumerTimerRebalance] == 0 {
		t.Fatalf("a path was never exercised: %+v", *stats)
	}
}

func runConsumerSim(t *testing.T, seed uint64, homogeneous bool, stats *cgStats) {
	r := rand.New(rand.NewPCG(seed, 848))
	names := []string{"t0", "t1", "t2", "t3"}
	topics := map[string]int32{"t0": 6, "t1": 4, "t2": 3}
	s := &cgSim{t: t, r: r, h: newCGHarness(t, topics), names: names, stats: stats}
	s.h.replayEvery = 7
	s.h.removedBy = stats.removedBy
	for step := range 400 {
		live := s.live()
		switch op := r.IntN(100); {
		case op < 10 || len(live) == 0:
			s.heartbeat(s.newClient(homogeneous), false)
		case op < 70:
			c := live[r.IntN(len(live))]
			s.heartbeat(c, r.IntN(15) == 0)
		case op < 74:
			c := live[r.IntN(len(live))]
			if c.joined {
				req := cgBeat(c.id, -1, nil)
				// UNKNOWN_MEMBER_ID: removed already; clients count it as left.
				if resp := s.h.hb(req); resp.ErrorCode != ErrNone && (resp.ErrorCode != ErrUnknownMemberID || s.h.g.members[c.id] != nil) {
					t.Fatalf("leave: %d", resp.ErrorCode)
				}
				c.held, c.joined, c.crashed = tpSet{}, false, true
			}
		case op < 78:
			c := live[r.IntN(len(live))]
			if c.joined && c.instance != "" && s.h.g.members[c.id] != nil {
				req := cgBeat(c.id, EpochStaticLeave, nil)
				req.InstanceID = &c.instance
				if resp := s.h.hb(req); resp.ErrorCode != ErrNone {
					t.Fatalf("static leave: %d %s", resp.ErrorCode, resp.ErrorMessage)
				}
				c.held, c.parked = tpSet{}, true
				// Its successor comes back later with a new id.
				n := s.newClient(homogeneous)
				n.instance, n.topics, n.regex = c.instance, c.topics, c.regex
			}
		case op < 81:
			c := live[r.IntN(len(live))]
			c.crashed, c.held = true, tpSet{}
		case op < 83:
			live[r.IntN(len(live))].stubborn = true
		case op < 85:
			next := map[string]int32{}
			for _, n := range names {
				if r.IntN(5) > 0 {
					next[n] = s.h.topics[n]
					if next[n] == 0 {
						next[n] = int32(1 + r.IntN(4))
					}
					if r.IntN(4) == 0 {
						next[n]++
					}
				}
			}
			s.h.setTopics(next)
		default:
			s.h.advance(time.Duration(1+r.IntN(8)) * time.Second)
			s.afterTimers()
		}
		s.checkClients(step)
	}
	s.settle()
}

// settle lets every live client heartbeat normally until the group has
// converged, then checks it.
func (s *cgSim) settle() {
	h := s.h
	s.settling = true
	for _, c := range s.clients {
		c.stubborn = false
	}
	for round := range 40 {
		h.advance(2 * time.Second)
		s.afterTimers()
		for _, c := range s.live() {
			s.heartbeat(c, false)
		}
		s.checkClients(1000 + round)
	}
	h.replayEvery = 1
	h.check()
	g := h.g
	if len(g.members) == 0 {
		return
	}
	if g.State() != "Stable" {
		for _, m := range g.Members() {
			s.t.Logf("%s epoch %d %v assigned %s pending %s target %s", m.MemberID, m.MemberEpoch, m.State, fmtParts(m.Assigned), fmtParts(m.PendingRevocation), fmtParts(m.Target))
		}
		for _, c := range s.clients {
			s.t.Logf("client %+v", *c)
		}
		s.t.Logf("timers %v now %v", h.timers, h.now)
		s.t.Fatalf("group %s at epoch %d/%d after settling", g.State(), g.Epoch(), g.AssignmentEpoch())
	}
	want := map[tpKey]bool{}
	for _, m := range g.members {
		if !m.assigned.equal(m.target) {
			s.t.Fatalf("%s holds %s, target %s", m.id, fmtParts(m.assigned.list()), fmtParts(m.target.list()))
		}
		for _, topic := range g.subscribed(m) {
			for p := range g.topics[topic] {
				want[tpKey{topic, p}] = true
			}
		}
	}
	for k := range want {
		if _, ok := g.owners[k]; !ok {
			s.t.Fatalf("%s-%d is subscribed but owned by nobody", k.topic, k.partition)
		}
	}
	if len(g.owners) != len(want) {
		s.t.Fatalf("%d partitions owned, %d subscribed", len(g.owners), len(want))
	}
	// Every live client holds exactly its member's assignment.
	for _, c := range s.live() {
		if m := g.members[c.id]; m != nil && !c.held.equal(m.assigned) {
			s.t.Fatalf("client %s holds %s, its member %s", c.id, fmtParts(c.held.list()), fmtParts(m.assigned.list()))
		}
	}
}
