package membership

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/cohort-coord/cohort/assignor"
)

// The simulation's members: each runs a member machine, delivers its
// requests to the simulated coordinator, and runs its callbacks for as
// long as the case says, recording what it owns.

func (s *sim) addMember(balancers []assignor.Balancer) {
	name := fmt.Sprintf("m%d", len(s.members))
	cfg := Config{
		Group: "g", Topics: []string{"t"}, Balancers: balancers, ClientID: name,
		SessionTimeout: simSession, RebalanceTimeout: simRebalance, HeartbeatInterval: simHeartbeat,
		RetryBackoff: 50 * time.Millisecond, MaxRetryBackoff: time.Second,
	}
	if err := cfg.Validate(); err != nil {
		s.t.Fatal(err)
	}
	m := &simMember{s: s, name: name, m: New(cfg), owns: map[int32]bool{}}
	s.members = append(s.members, m)
	s.logf("%s starts", name)
	m.m.Start(s.at(), &m.fx)
	m.run(-1)
}

func (m *simMember) live() bool { return !m.crashed && !m.stopped }

func (m *simMember) onResponse(id uint64, res any, err error) {
	if !m.live() {
		return
	}
	if os.Getenv("COHORT_SIM_DEBUG") != "" {
		m.s.logf("%s <- %T %v err=%v (phase %v gen %d)", m.name, res, res, err, m.m.Phase(), m.m.Generation())
	}
	gen := m.m.Generation()
	m.m.OnResponse(m.s.at(), id, res, err, &m.fx)
	m.run(gen)
}

// run carries out the machine's effects; gen is the generation before the
// call that produced them.
func (m *simMember) run(gen int32) {
	s := m.s
	fx := &m.fx
	for _, r := range fx.Requests {
		id, msg := r.ID, r.Msg
		s.after(s.latency(), func() {
			if m.live() {
				s.deliver(m, id, msg)
			}
		})
	}
	for _, op := range fx.Timers {
		kind := op.Kind
		if op.Cancel {
			m.timers[kind] = 0
			continue
		}
		s.armTimer(op.After, func(seq uint64) { m.timers[kind] = seq },
			func(seq uint64) bool { return m.live() && m.timers[kind] == seq },
			func() {
				m.timers[kind] = 0
				gen := m.m.Generation()
				m.m.OnTimer(s.at(), kind, &m.fx)
				m.run(gen)
			})
	}
	for _, cb := range fx.Callbacks {
		if cb.Kind == Lost {
			m.release(partitionsOf(cb.Partitions), "lost")
		}
	}
	m.queue = append(m.queue, fx.Callbacks...)
	if fx.Stopped {
		m.stopped = true
	}
	fx.Reset()
	if gen >= 0 && m.m.Generation() < 0 {
		// The generation is given up: the partitions may be others'.
		m.release(m.ownedList(), "generation given up")
	}
	m.runNext()
}

func partitionsOf(tps []assignor.TopicPartitions) []int32 {
	var out []int32
	for _, tp := range tps {
		out = append(out, tp.Partitions...)
	}
	return out
}

func (m *simMember) ownedList() []int32 {
	var out []int32
	for p := range m.owns {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// runNext starts the next callback, one at a time as the member actor does.
func (m *simMember) runNext() {
	s := m.s
	if m.running || len(m.queue) == 0 || m.crashed {
		return
	}
	cb := m.queue[0]
	m.queue = m.queue[1:]
	m.running = true
	parts := partitionsOf(cb.Partitions)
	var d time.Duration
	switch cb.Kind {
	case Assigned:
		if cb.Generation == m.m.Generation() {
			m.gain(parts)
		}
		d = time.Duration(s.r.IntN(50)) * time.Millisecond
	case Revoked:
		m.revoking = map[int32]bool{}
		for _, p := range parts {
			m.revoking[p] = true
		}
		switch n := s.r.IntN(10); {
		case n < 6:
			d = time.Duration(s.r.IntN(100)) * time.Millisecond
		case n < 9: // past the session timeout, within the rebalance timeout
			d = simSession + time.Duration(s.r.Int64N(int64(simRebalance-simSession-time.Second)))
		default: // past the rebalance timeout
			d = simRebalance + time.Duration(s.r.Int64N(int64(simRebalance/2)))
		}
		s.logf("%s revoke %v starts (%v)", m.name, parts, d)
	default:
		d = time.Duration(s.r.IntN(50)) * time.Millisecond
	}
	s.after(d, func() {
		if m.crashed {
			return
		}
		m.running = false
		if cb.Kind == Revoked {
			m.release(parts, "revoked")
			m.revoking = nil
		}
		gen := m.m.Generation()
		m.m.OnCallbackDone(s.at(), cb.Token, &m.fx)
		m.run(gen)
	})
}

func (m *simMember) gain(parts []int32) {
	s := m.s
	if len(parts) > 0 {
		s.logf("%s assigned %v", m.name, parts)
	}
	for _, p := range parts {
		if o := s.owner[p]; o != nil && o != m {
			s.fail("partition %d assigned to %s while %s owns it", p, m.name, o.name)
		}
		s.owner[p] = m
		m.owns[p] = true
	}
}

func (m *simMember) release(parts []int32, why string) {
	s := m.s
	var gone []int32
	for _, p := range parts {
		if m.owns[p] {
			gone = append(gone, p)
			delete(m.owns, p)
			if s.owner[p] == m {
				delete(s.owner, p)
			}
		}
	}
	if len(gone) > 0 {
		s.logf("%s releases %v (%s)", m.name, gone, why)
	}
}

func (s *sim) crash(m *simMember) {
	s.logf("%s crashes owning %v", m.name, m.ownedList())
	s.crashes = append(s.crashes, simCrash{name: m.name, at: s.now, parts: m.ownedList()})
	s.crashLog = append(s.crashLog, s.now)
	m.release(m.ownedList(), "crashed")
	m.crashed = true
}

func (s *sim) close(m *simMember) {
	s.logf("%s closes", m.name)
	gen := m.m.Generation()
	m.m.Close(s.at(), &m.fx)
	m.run(gen)
}

// ---- the run ----

func (s *sim) liveMembers() []*simMember {
	var out []*simMember
	for _, m := range s.members {
		if m.live() && m.m.Phase() != Closing {
			out = append(out, m)
		}
	}
	return out
}
