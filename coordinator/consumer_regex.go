package coordinator

import (
	"regexp"
	"slices"
	"time"
)

// Regex subscriptions are resolved off the heartbeat path, batched per
// group, as Kafka's group coordinator does (consumer_doc.go). A heartbeat
// never matches a regex against the catalog: a member's regex topics are
// the group's last resolution of that regex (regexState.resolved), which
// costs what the regex matched, not what the catalog holds. A resolution is
// a step of its own, taken when the group's ConsumerTimerRegex fires: one
// pass over the catalog for every distinct regex of the group, after which
// the group epoch is bumped, and a new target computed, when a regex's
// topics changed. The timer is armed
//
//   - when a member brings a regex the group has not resolved yet (a
//     joining member, or a changed subscription), and when the catalog
//     changes while the group has regexes (SetTopics);
//   - RegexRefreshInterval after each resolution, while the group has
//     regexes (group.consumer.regex.refresh.interval.ms);
//   - at once after a takeover (ArmAll);
//
// and never for earlier than RegexRefreshMinInterval after the last
// resolution (Kafka's 10 s between two resolutions of one group). Arming it
// while it is armed for an earlier moment changes nothing, so a burst of
// joins or topic creations makes one resolution.
//
// Kafka schedules a resolution from a heartbeat (when the metadata has
// topics created since the group's last resolution, or the refresh interval
// has passed) and runs it on a background thread; here the owner learns of
// catalog changes on the group's next heartbeat too (SetTopics), and the
// timer fires on the group's own actor, but after the heartbeat is
// answered, and at the moment the minimum interval allows rather than at a
// later heartbeat.
//
// The resolved regexes are not replicated (Kafka writes them as
// ConsumerGroupRegularExpression records). RestoreConsumerGroup rebuilds
// each from the replicated target assignment: the topics the regex matches
// among those assigned to the regex's members. That is never more than the
// lost resolution (a matched topic that exists is in its members' targets,
// unless members who name it hold all of it), so the resolution ArmAll asks
// for at once after a takeover bumps the epoch exactly when it finds a
// topic the target does not give the regex's members yet.

// regexState is what a group knows of its regexes' resolutions.
type regexState struct {
	// resolved maps each resolved regex to the topics it matched at the
	// last resolution, sorted. A regex no member uses is dropped at the
	// next resolution; one not in the map is unresolved.
	resolved map[string][]string
	// last is the time of the last resolution (zero: none since the group
	// was created or loaded).
	last time.Time
	// due is when the armed ConsumerTimerRegex fires (zero: not armed).
	due time.Time
	// runs counts resolutions (for tests and benchmarks).
	runs int
}

// hasRegexes reports whether a member subscribes by regex.
func (g *ConsumerGroup) hasRegexes() bool {
	for _, m := range g.members {
		if m.regex != "" {
			return true
		}
	}
	return false
}

// requestResolution arms the regex timer for now, or for the end of the
// minimum interval after the last resolution, unless it is armed for
// that moment or earlier already.
func (g *ConsumerGroup) requestResolution(now time.Time, fx *ConsumerEffects) {
	at := now
	if !g.regex.last.IsZero() {
		if earliest := g.regex.last.Add(g.cfg.RegexRefreshMinInterval); earliest.After(at) {
			at = earliest
		}
	}
	g.armRegex(at, now, fx)
}

// armRegex arms the regex timer for at, unless it fires by then anyway.
func (g *ConsumerGroup) armRegex(at, now time.Time, fx *ConsumerEffects) {
	if !g.regex.due.IsZero() && !g.regex.due.After(at) {
		return
	}
	g.regex.due = at
	fx.arm(ConsumerTimerRegex, "", at.Sub(now))
}

// resolveRegexes is the resolution step (ConsumerTimerRegex): every regex
// of the group against the catalog, in one pass; the group epoch is bumped
// and a new target computed when a regex's topics or the subscribed
// topics' signature changed. The next periodic resolution is armed while
// the group has regexes.
func (g *ConsumerGroup) resolveRegexes(now time.Time, fx *ConsumerEffects) {
	g.regex.due = time.Time{}
	var exprs []string
	for _, m := range g.members {
		if m.regex != "" && !slices.Contains(exprs, m.regex) {
			exprs = append(exprs, m.regex)
		}
	}
	if len(exprs) == 0 {
		clear(g.regex.resolved)
		return
	}
	slices.Sort(exprs)
	res := resolveAll(exprs, g.topics, g.compile)
	changed := false
	next := make(map[string][]string, len(exprs))
	for i, expr := range exprs {
		old, ok := g.regex.resolved[expr]
		if !ok || !slices.Equal(old, res[i]) {
			changed = changed || len(old) > 0 || len(res[i]) > 0
		}
		next[expr] = res[i]
	}
	g.regex.resolved = next
	g.regex.last = now
	g.regex.runs++
	if g.epoch > 0 && len(g.members) > 0 && (changed || g.subscribedSignature() != g.sig) {
		g.bump(fx)
		g.maybeAssign(fx)
	}
	if d := g.cfg.RegexRefreshInterval; d > 0 {
		g.armRegex(now.Add(d), now, fx)
	}
}

// resolveAll returns, for each of exprs, the sorted names of the topics of
// the catalog its compiled form (compile; nil: matches nothing) matches,
// in one pass over the catalog.
func resolveAll(exprs []string, topics map[string]int32, compile func(string) *regexp.Regexp) [][]string {
	res := make([][]string, len(exprs))
	compiled := make([]*regexp.Regexp, len(exprs))
	for i, e := range exprs {
		compiled[i] = compile(e)
	}
	for t := range topics {
		for i, re := range compiled {
			if re != nil && re.MatchString(t) {
				res[i] = append(res[i], t)
			}
		}
	}
	for i := range res {
		slices.Sort(res[i])
	}
	return res
}

// restoreResolved rebuilds the resolved regexes of a group loaded from its
// records: each regex's matches among the topics in its members' targets.
func (g *ConsumerGroup) restoreResolved() {
	for _, m := range g.members {
		if m.regex == "" {
			continue
		}
		re := g.compile(m.regex)
		set := g.regex.resolved[m.regex]
		for _, t := range m.target.topicNames() {
			if re != nil && re.MatchString(t) && !slices.Contains(set, t) {
				set = append(set, t)
			}
		}
		slices.Sort(set)
		if set == nil {
			set = []string{}
		}
		g.regex.resolved[m.regex] = set
	}
}
