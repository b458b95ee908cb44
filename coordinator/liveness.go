package coordinator

import (
	"slices"
	"time"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Sessions through takeovers.
//
// A coordinator that takes a group over (a failover, a leadership transfer)
// cannot know when it last heard from each member: heartbeats are not
// replicated. Kafka gives every member a fresh session at the takeover, so
// a member that died keeps its partitions, unowned, for as long as
// takeovers keep coming faster than its session timeout. Here a dead member
// expires one session timeout after it was last heard from, plus at most
// one takeover's time (the election, and the floor below), however many
// takeovers happen in between.
//
// What is replicated. Every SessionCheckInterval (P) the group looks for
// members it has not heard from for a sixth of their session timeout, 5 s
// at least (silent members: clients heartbeat every 3 s, so a live one is
// rarely silent that long) and, when that set
// changed since it was last written, writes it with each silent member's
// session end (MemberSessions, which replaces the group's previous one). A
// healthy group writes nothing; a member that dies costs one write when it
// falls silent and the rebalance that removes it.
//
// What a takeover does with it (TakeoverSessions). The new coordinator
// knows when the previous one was last alive (PreviousAlive: its own last
// contact with the previous Raft leader). A member in the last
// MemberSessions has the session end it names. A member not in it was not
// silent at the previous coordinator's last checks, and cannot have been
// heard after PreviousAlive: its session ends one session timeout after
// PreviousAlive, never before its true end (so no member is removed sooner
// than Kafka would) and at most the silence threshold after it. Each
// member's session ends at that estimate, but not before a grace from the
// takeover, the time a live member needs to find its new coordinator: for
// a member not written silent, its session timeout plus
// TakeoverSessionFloor, at most its rebalance timeout (liveGrace); for one
// written silent, TakeoverSessionFloor (at most its session timeout).
//
// Takeovers in quick succession. Two seconds after a takeover the group
// writes the members it has not heard from since, with their estimated
// ends and the end of the grace it gave them: the next takeover starts
// from those ends, not from its own PreviousAlive, and gives such a member
// only what the previous coordinator's death left of its grace. A member
// gets TakeoverSessionFloor of coordinators' lifetime in all to reach one,
// and repeated takeovers do not push a dead member's end forward.
// When PreviousAlive is unknown (the whole cluster restarted), every member
// gets a full session, as before.

// TakeoverSessions is what a coordinator taking a group over knows of its
// members' sessions.
type TakeoverSessions struct {
	// Silent is the group's last replicated MemberSessions (nil: none).
	Silent *pb.MemberSessions
	// PreviousAlive is when the previous coordinator was last known alive;
	// zero when unknown, and then every member gets a full session.
	PreviousAlive time.Time
}

// restoredSession is a restored member's session as Start set it: the
// armed end (with the grace) and the estimate (without), in nanoseconds
// since the group's epoch, and the grace's end in Unix milliseconds (0:
// none).
type restoredSession struct {
	armed, estimate int64
	graceMs         int64
}

// silentMember is a member written as silent, with its session end and the
// end of its takeover grace (0: none) in Unix milliseconds.
type silentMember struct {
	id             string
	endMs, graceMs int64
}

// sessionsWrite is the write of a MemberSessions record.
type sessionsWrite struct{}

func (sessionsWrite) done(g *Group, _ time.Time, err error, _ *Effects) {
	if err != nil {
		g.silentDirty = true // not written: the next check writes it again
	}
}

// SetTakeover gives a restored group what it needs to carry its members'
// sessions over the takeover; call it before Start.
func (g *Group) SetTakeover(t TakeoverSessions) {
	if g.cfg.SessionCheckInterval <= 0 {
		return
	}
	g.takeoverSessions = &t
	g.silent = g.silent[:0]
	for _, s := range t.Silent.GetMembers() {
		g.silent = append(g.silent, silentMember{s.GetMemberId(), s.GetSessionEndMs(), s.GetGraceEndMs()})
	}
	slices.SortFunc(g.silent, compareSilent)
}

func compareSilent(a, b silentMember) int {
	if a.id < b.id {
		return -1
	}
	if a.id > b.id {
		return 1
	}
	return 0
}

// firstCheckAfterTakeover is how soon after a takeover the group writes the
// members it has not heard from since, with their estimated session ends:
// a later takeover then starts from those ends rather than from its own
// estimate, which would move a dead member's end forward each time.
const firstCheckAfterTakeover = 2 * time.Second

// takeoverSession returns how long m's session runs from now, a takeover,
// and remembers the estimate it came from.
func (g *Group) takeoverSession(now time.Time, m *member) time.Duration {
	session := m.sessionTimeout()
	t := g.takeoverSessions
	if t == nil || t.PreviousAlive.IsZero() {
		return session
	}
	var end time.Time
	grace := min(g.cfg.TakeoverSessionFloor, session)
	if i, ok := slices.BinarySearchFunc(g.silent, m.id, func(s silentMember, id string) int {
		return compareSilent(s, silentMember{id: id})
	}); ok {
		s := g.silent[i]
		end = time.UnixMilli(s.endMs)
		if s.graceMs != 0 {
			// A takeover gave it a grace already: what the previous
			// coordinator's death left of it, nothing if it ran out.
			grace = min(grace, max(time.Duration(s.graceMs-t.PreviousAlive.UnixMilli())*time.Millisecond, 0))
		}
	} else {
		end = t.PreviousAlive.Add(session)
		grace = max(grace, liveGrace(session, m.rebalanceTimeout(), g.cfg.TakeoverSessionFloor))
	}
	est := min(end.Sub(now), session)
	d := max(est, grace, 0)
	var graceMs int64
	if d > est {
		graceMs = now.Add(d).UnixMilli()
	}
	if g.restored == nil {
		g.restored = map[string]restoredSession{}
	}
	at := g.sinceEpoch(now)
	g.restored[m.id] = restoredSession{armed: at + int64(d), estimate: at + int64(est), graceMs: graceMs}
	return d
}

// liveGrace is the grace from a takeover of a member the previous
// coordinator was still hearing from (not written silent): a full session
// plus the floor, bounded by the member's rebalance timeout. Clients that
// cache their coordinator (kafkajs, sarama) reach the new one only once the
// dead node is gone from Metadata or answers again after a restart, which
// takes longer than the floor; Kafka gives every member a full session
// from the takeover, and its takeover comes only after the broker's own
// session ran out. A member that was already silent keeps the floor.
func liveGrace(session, rebalance, floor time.Duration) time.Duration {
	return min(session+floor, max(rebalance, floor))
}

// silentAfter is how long a member with the given session timeout may go
// unheard before the periodic check writes it as silent.
func silentAfter(session time.Duration) time.Duration {
	return max(session/6, 5*time.Second)
}

// quietAt is when m, whose session ends at end, will have been unheard for
// its silence threshold (nanoseconds since the group's epoch).
func quietAt(m *member, end int64) int64 {
	return end - int64(m.sessionTimeout()-silentAfter(m.sessionTimeout()))
}

// armSessionCheck makes sure a check runs by at (nanoseconds since the
// group's epoch), and no sooner than SessionCheckInterval from now: a check
// runs when a member may have fallen silent, not on a fixed beat, so a
// group whose members heartbeat is checked about once per silence
// threshold.
func (g *Group) armSessionCheck(now time.Time, at int64, fx *Effects) {
	if g.cfg.SessionCheckInterval <= 0 {
		return
	}
	nowAt := g.sinceEpoch(now)
	at = max(at, nowAt+int64(g.cfg.SessionCheckInterval))
	if g.sessionsArmed && g.sessionsAt <= at {
		return
	}
	g.sessionsArmed, g.sessionsAt = true, at
	fx.arm(TimerSessions, "", time.Duration(at-nowAt))
}

// heardListed is a heartbeat's (or commit's) hook while some member is
// written as silent: when m is one of them, the next check, soon, writes it
// off the list.
func (g *Group) heardListed(now time.Time, m *member, fx *Effects) {
	if _, ok := slices.BinarySearchFunc(g.silent, m.id, func(s silentMember, id string) int {
		return compareSilent(s, silentMember{id: id})
	}); ok {
		g.armSessionCheck(now, 0, fx)
	}
}

// checkSessions writes the silent members when their set changed, and
// arms the next check for when the first of the others may fall silent.
func (g *Group) checkSessions(now time.Time, fx *Effects) {
	g.sessionsArmed = false
	if g.state == Dead {
		return
	}
	at := g.sinceEpoch(now)
	var silent []silentMember
	next, tracked := int64(0), false
	for _, m := range g.order {
		if m.sessionUntil == 0 || m.joinReply != nil || m.syncReply != nil {
			continue
		}
		end, graceMs, unheard := m.sessionUntil, int64(0), false
		if r, ok := g.restored[m.id]; ok {
			if r.armed == end {
				// Not heard from since the takeover: written with the
				// estimate, so that the next takeover starts from it.
				end, graceMs, unheard = r.estimate, r.graceMs, true
			} else {
				delete(g.restored, m.id)
			}
		}
		if q := quietAt(m, end); q > at && !unheard {
			if !tracked || q < next {
				next, tracked = q, true
			}
			continue // heard from lately
		}
		silent = append(silent, silentMember{m.id, g.epoch.Add(time.Duration(end)).UnixMilli(), graceMs})
	}
	slices.SortFunc(silent, compareSilent)
	if g.silentDirty || !slices.Equal(silent, g.silent) {
		g.silentDirty = false
		g.silent = silent
		rec := &pb.MemberSessions{GroupId: g.id, Members: make([]*pb.SilentMember, len(silent))}
		for i, s := range silent {
			rec.Members[i] = &pb.SilentMember{MemberId: s.id, SessionEndMs: s.endMs, GraceEndMs: s.graceMs}
		}
		g.persist(fx, sessionsWrite{}, &pb.Record{Kind: &pb.Record_MemberSessions{MemberSessions: rec}})
	}
	switch {
	case tracked:
		g.armSessionCheck(now, next, fx)
	case len(g.silent) > 0 && len(silent) < len(g.order):
		// Silent members only, or members parked in a rebalance: look
		// again, so that the list follows them.
		g.armSessionCheck(now, 0, fx)
	}
}
