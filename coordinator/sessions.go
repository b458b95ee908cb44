package coordinator

import "time"

// Member sessions. A member's session timer (TimerMember) fires when the
// member has been silent for its session timeout. Most requests that prove a
// member alive re-arm it (armSession). Heartbeats and commits, which come
// every few seconds from every member, only move the member's sessionUntil
// forward while a timer is armed at or before it (extendSession); when that
// timer fires early, it is armed again for the rest of the session
// (sessionGoesOn). The member expires at the same moment either way, and
// a heartbeat costs its owner no timer update.
//
// Invariant: m.sessionUntil != 0 means a TimerMember timer for m.id is armed
// to fire at or before it, and the member's session ends then unless it is
// heard from; 0 means the member has no session timer (it is parked in a
// join or sync, whose timers govern it).

// eagerSessions makes extendSession arm the timer every time; tests set it
// to check that both ways answer and write the same.
var eagerSessions bool

// sinceEpoch is now in nanoseconds since the group's epoch.
func (g *Group) sinceEpoch(now time.Time) int64 { return int64(now.Sub(g.epoch)) }

// armSession arms m's timer to fire after d, replacing any other: the
// session ends then.
func (g *Group) armSession(now time.Time, m *member, d time.Duration, fx *Effects) {
	fx.arm(TimerMember, m.id, d)
	m.sessionUntil = g.sinceEpoch(now) + int64(d)
	g.armSessionCheck(now, quietAt(m, m.sessionUntil), fx)
	if len(g.silent) > 0 {
		g.heardListed(now, m, fx)
	}
}

// cancelSession cancels m's timer.
func (g *Group) cancelSession(m *member, fx *Effects) {
	fx.cancel(TimerMember, m.id)
	m.sessionUntil = 0
}

// extendSession ends m's session one session timeout from now: as
// armSession, but without touching the timer when one is armed earlier.
func (g *Group) extendSession(now time.Time, m *member, fx *Effects) {
	if eagerSessions {
		g.armSession(now, m, m.sessionTimeout(), fx)
		return
	}
	until := g.sinceEpoch(now) + int64(m.sessionTimeout())
	if m.sessionUntil != 0 && until >= m.sessionUntil {
		m.sessionUntil = until
		if len(g.silent) > 0 {
			g.heardListed(now, m, fx)
		}
		return
	}
	fx.arm(TimerMember, m.id, m.sessionTimeout())
	m.sessionUntil = until
	g.armSessionCheck(now, quietAt(m, until), fx)
	if len(g.silent) > 0 {
		g.heardListed(now, m, fx)
	}
}

// sessionGoesOn handles the fire of m's timer while its session was extended
// past it: the timer is armed for the rest and it reports true. Otherwise the
// timer is no longer armed and the fire is handled as an expiry.
func (g *Group) sessionGoesOn(now time.Time, m *member, fx *Effects) bool {
	until := m.sessionUntil
	m.sessionUntil = 0
	if until == 0 {
		return false
	}
	left := until - g.sinceEpoch(now)
	if left <= 0 {
		return false
	}
	fx.arm(TimerMember, m.id, time.Duration(left))
	m.sessionUntil = until
	return true
}
