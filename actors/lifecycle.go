package actors

import (
	"log/slog"

	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/internal/ratelog"
)

// Group lifecycle lines at INFO, as Kafka's GroupCoordinator logs them
// ("Preparing to rebalance group ...", "Stabilized group ..."): a rebalance
// starting and why, a generation formed, a member removed at the end of its
// session, a group left empty, a group deleted. They come from state
// changes the shell sees after executing the machine's effects, never from
// coordinator/, which stays pure. One limiter per node bounds them
// (lifecycleRate lines a second after a burst of lifecycleBurst), so a
// cluster of many groups rebalancing at once does not flood the log; the
// next line logged says how many were suppressed.
const (
	lifecycleRate  = 20
	lifecycleBurst = 200
)

func newLifecycleLimiter() *ratelog.Limiter { return ratelog.New(lifecycleRate, lifecycleBurst) }

// lifecycle logs the move of the group from state prev to the current one.
func (a *groupActor) lifecycle(prev, cur coordinator.State) {
	g := a.g
	attrs := func(more ...slog.Attr) []slog.Attr {
		return append([]slog.Attr{slog.String("group", a.id), slog.Int("generation", int(g.Generation())), slog.Int("members", g.NumMembers())}, more...)
	}
	rebalancing := func(s coordinator.State) bool {
		return s == coordinator.PreparingRebalance || s == coordinator.CompletingRebalance
	}
	switch {
	case cur == coordinator.PreparingRebalance && !rebalancing(prev):
		reason := a.track.cause
		if reason == "" || reason == causeRetention {
			reason = CauseEnforced
		}
		a.logLifecycle("preparing to rebalance group", attrs(slog.String("reason", reason), slog.String("from_state", prev.String()))...)
	case cur == coordinator.Stable && prev != coordinator.Stable:
		a.logLifecycle("stabilized group", attrs(slog.String("protocol", g.ProtocolName()))...)
	case cur == coordinator.Empty && prev != coordinator.Empty:
		a.logLifecycle("group is empty", attrs()...)
	}
}

// membersExpired logs members removed by a timer: one whose session ran
// out (TimerMember), or those that did not rejoin before the rebalance
// timeout (TimerJoin) or did not sync in time (TimerSync).
func (a *groupActor) membersExpired(key coordinator.TimerKey, removed int) {
	attrs := []slog.Attr{slog.String("group", a.id), slog.Int("generation", int(a.g.Generation())), slog.Int("members", a.g.NumMembers())}
	switch key.Kind {
	case coordinator.TimerMember:
		a.logLifecycle("member removed on session expiry", append(attrs, slog.String("member", key.Member))...)
	case coordinator.TimerJoin:
		a.logLifecycle("members removed: not rejoined before the rebalance timeout", append(attrs, slog.Int("removed", removed))...)
	case coordinator.TimerSync:
		a.logLifecycle("members removed: no SyncGroup before the rebalance timeout", append(attrs, slog.Int("removed", removed))...)
	}
}

func (a *groupActor) logLifecycle(msg string, attrs ...slog.Attr) {
	a.env.lifecycle.Log(a.env.log, a.env.clock.Now(), slog.LevelInfo, msg, attrs...)
}
