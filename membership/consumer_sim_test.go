package membership

import (
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// A simulation of consumer-protocol members (Consumer) and the
// coordinator's consumer group machine (coordinator.ConsumerGroup) together
// in virtual time: requests and answers take a few milliseconds, revoke
// callbacks up to three seconds, members join, close and crash, and the
// members lose the coordinator for up to ten seconds at a time while its
// timers run on (past its session timeout, so members are expired). Checked:
//   - no partition ever has two owners. A member owns a partition from the
//     start of its Assigned callback until its Revoked callback returns, or
//     until its machine reports it Lost, or it crashes;
//   - once the run calms down, the live members share all six partitions
//     evenly, each as the coordinator assigned them.

const (
	csimSession   = 6 * time.Second
	csimHeartbeat = time.Second
	csimRebalance = 12 * time.Second
	csimActions   = 90 * time.Second
	csimSettle    = 40 * time.Second
)

type csim struct {
	s       sim // the event queue and log of the classic simulation
	g       *coordinator.ConsumerGroup
	gtimers map[string]uint64 // kind/member -> armed seq
	down    bool
	owner   map[int32]*csimMember
	members []*csimMember
	nextID  int
}

type csimMember struct {
	sim     *csim
	name    string
	c       *Consumer
	fx      Effects
	timers  [NumTimers]uint64
	queue   []Callback
	running bool
	crashed bool
	closing bool
	stopped bool
}

var errCsimDown = errors.New("coordinator unreachable")

func (cs *csim) gfx(fx *coordinator.ConsumerEffects) {
	for _, op := range fx.Timers {
		key := fmt.Sprintf("%d/%s", op.Kind, op.Member)
		if op.Cancel {
			delete(cs.gtimers, key)
			continue
		}
		kind, member := op.Kind, op.Member
		cs.s.armTimer(op.After, func(seq uint64) { cs.gtimers[key] = seq }, func(seq uint64) bool { return cs.gtimers[key] == seq }, func() {
			delete(cs.gtimers, key)
			var fx coordinator.ConsumerEffects
			cs.g.OnTimer(kind, member, cs.s.at(), &fx)
			cs.gfx(&fx)
		})
	}
}

func (cs *csim) addMember() {
	cs.nextID++
	cfg := Config{Group: "g", Topics: []string{"t"}, SessionTimeout: csimSession, RebalanceTimeout: csimRebalance,
		HeartbeatInterval: csimHeartbeat, RetryBackoff: 100 * time.Millisecond, MaxRetryBackoff: time.Second}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	m := &csimMember{sim: cs, name: fmt.Sprintf("m%d", cs.nextID)}
	m.c = NewConsumer(cfg, m.name)
	cs.members = append(cs.members, m)
	cs.s.logf("%s starts", m.name)
	m.c.Start(cs.s.at(), &m.fx)
	m.run()
}

// run carries out the member's effects.
func (m *csimMember) run() {
	cs := m.sim
	fx := &m.fx
	for _, r := range fx.Requests {
		m.send(r)
	}
	for _, op := range fx.Timers {
		k := op.Kind
		if op.Cancel {
			m.timers[k] = 0
			continue
		}
		cs.s.armTimer(op.After, func(seq uint64) { m.timers[k] = seq }, func(seq uint64) bool { return m.timers[k] == seq && !m.crashed }, func() {
			m.timers[k] = 0
			m.c.OnTimer(cs.s.at(), k, &m.fx)
			m.run()
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
		cs.s.logf("%s stopped: %v", m.name, fx.Err)
		if fx.Err != nil {
			cs.s.fail("%s stopped: %v", m.name, fx.Err)
		}
	}
	fx.Reset()
	m.runNext()
}

func (m *csimMember) send(r Request) {
	cs := m.sim
	cs.s.after(cs.s.latency(), func() {
		if m.crashed {
			return
		}
		var res any
		var err error
		switch msg := r.Msg.(type) {
		case *FindCoordinator:
			res = &CoordinatorFound{Exclusive: true}
		case *pb.ConsumerGroupHeartbeatRequest:
			var fx coordinator.ConsumerEffects
			out := cs.g.Heartbeat(coordinator.ConsumerHeartbeatFromProto(msg), cs.s.at(), &fx).Proto()
			cs.gfx(&fx)
			cs.s.logf("%s heartbeat epoch %d owned %s -> code %d epoch %d assignment %v", m.name, msg.GetMemberEpoch(), reported(msg), out.GetErrorCode(), out.GetMemberEpoch(), out.GetAssignment())
			res = out
		default:
			err = fmt.Errorf("unexpected %T", msg)
		}
		if cs.down {
			res, err = nil, errCsimDown
		}
		cs.s.after(cs.s.latency(), func() {
			if m.crashed {
				return
			}
			m.c.OnResponse(cs.s.at(), r.ID, res, err, &m.fx)
			m.run()
		})
	})
}

func (m *csimMember) runNext() {
	cs := m.sim
	if m.running || len(m.queue) == 0 || m.crashed {
		return
	}
	cb := m.queue[0]
	m.queue = m.queue[1:]
	m.running = true
	parts := partitionsOf(cb.Partitions)
	var took time.Duration
	switch cb.Kind {
	case Assigned:
		m.gain(parts)
	case Revoked:
		took = time.Duration(cs.s.r.IntN(3000)) * time.Millisecond
	}
	cs.s.after(took, func() {
		if m.crashed {
			return
		}
		if cb.Kind == Revoked {
			m.release(parts, "revoked")
		}
		m.running = false
		if cb.Wait {
			m.c.OnCallbackDone(cs.s.at(), cb.Token, &m.fx)
		}
		m.run()
	})
}

func (m *csimMember) gain(parts []int32) {
	cs := m.sim
	cs.s.logf("%s gains %v", m.name, parts)
	for _, p := range parts {
		if o := cs.owner[p]; o != nil && o != m {
			cs.s.fail("t/%d given to %s while %s owns it", p, m.name, o.name)
		}
		cs.owner[p] = m
	}
}

func (m *csimMember) release(parts []int32, why string) {
	cs := m.sim
	cs.s.logf("%s releases %v (%s)", m.name, parts, why)
	for _, p := range parts {
		if cs.owner[p] == m {
			delete(cs.owner, p)
		}
	}
}

func (cs *csim) live() []*csimMember {
	var out []*csimMember
	for _, m := range cs.members {
		if !m.crashed && !m.closing && !m.stopped {
			out = append(out, m)
		}
	}
	return out
}

func runConsumerSim(seed uint64) (*csim, error) {
	cs := &csim{owner: map[int32]*csimMember{}, gtimers: map[string]uint64{}}
	cs.s = sim{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), epoch: t0}
	cc := coordinator.DefaultConsumerConfig()
	cc.SessionTimeout, cc.HeartbeatInterval = csimSession, csimHeartbeat
	cs.g = coordinator.NewConsumerGroup("g", &cc, map[string]int32{"t": 6})
	for range 3 {
		cs.addMember()
	}
	var action func()
	action = func() {
		if cs.s.now >= csimActions {
			cs.down = false
			return
		}
		live, x := cs.live(), cs.s.r.IntN(10)
		switch {
		case x < 3 && len(live) < 5:
			cs.addMember()
		case x < 5 && len(live) > 1:
			m := live[cs.s.r.IntN(len(live))]
			cs.s.logf("%s closes", m.name)
			m.closing = true
			m.c.Close(cs.s.at(), &m.fx)
			m.run()
		case x < 6 && len(live) > 1:
			m := live[cs.s.r.IntN(len(live))]
			cs.s.logf("%s crashes", m.name)
			m.crashed = true
			m.release(slices.Collect(func(yield func(int32) bool) {
				for p, o := range cs.owner {
					if o == m && !yield(p) {
						return
					}
				}
			}), "crash")
		case x < 7 && !cs.down:
			cs.down = true
			d := time.Duration(1+cs.s.r.IntN(10_000)) * time.Millisecond
			cs.s.logf("coordinator unreachable for %v", d)
			cs.s.after(d, func() { cs.down = false; cs.s.logf("coordinator reachable") })
		}
		cs.s.after(time.Duration(1+cs.s.r.IntN(8000))*time.Millisecond, action)
	}
	cs.s.after(time.Second, action)
	for cs.s.q.Len() > 0 && cs.s.err == nil {
		e := heap.Pop(&cs.s.q).(*simEvent)
		if e.at > csimActions+csimSettle {
			break
		}
		cs.s.now = e.at
		e.fn()
	}
	if cs.s.err != nil {
		return cs, cs.s.err
	}
	live := cs.live()
	counts := map[*csimMember]int{}
	for _, o := range cs.owner {
		counts[o]++
	}
	if len(cs.owner) != 6 {
		return cs, fmt.Errorf("after settling, %d of 6 partitions owned", len(cs.owner))
	}
	for _, m := range live {
		if n := counts[m]; n < 6/len(live) || n > (6+len(live)-1)/len(live) || len(partitionsOf(m.c.Owned())) != n {
			return cs, fmt.Errorf("after settling, %s owns %d (machine %v) of 6 among %d members", m.name, n, m.c.Owned(), len(live))
		}
	}
	return cs, nil
}

// TestConsumerSimulatedOwnership runs the consumer-protocol simulation over
// many seeds; a failing seed prints its run.
func TestConsumerSimulatedOwnership(t *testing.T) {
	first, n := simSeeds(t)
	n = max(n/5, 40)
	for seed := first; seed < first+n; seed++ {
		if cs, err := runConsumerSim(seed); err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, strings.Join(lastLines(cs.s.log, 80), "\n"))
		}
	}
}
