package coordinator

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cohort-coord/cohort/assignor"
)

// bump advances the group epoch.
func (g *ConsumerGroup) bump(fx *ConsumerEffects) {
	g.epoch++
	fx.record(ConsumerGroupEpochRecord{Epoch: g.epoch})
}

// maybeAssign computes the target assignment of the group epoch when the
// target is older (Kafka's assignment interval 0: at once, on the call that
// bumped the epoch).
func (g *ConsumerGroup) maybeAssign(fx *ConsumerEffects) {
	if g.epoch <= g.assignmentEpoch {
		return
	}
	ids := g.memberIDs()
	specs := make([]assignor.ServerMember, len(ids))
	for i, id := range ids {
		m := g.members[id]
		specs[i] = assignor.ServerMember{ID: id, InstanceID: m.instanceID, Topics: g.subscribed(m), Current: m.target.list()}
	}
	out := g.assignorFor().Assign(specs, g.topics)
	for i, id := range ids {
		m := g.members[id]
		target := newTPSet(out[i])
		if !target.equal(m.target) {
			m.target = target
			fx.record(ConsumerTargetRecord{MemberID: id, Partitions: target.list()})
		}
	}
	g.assignmentEpoch = g.epoch
	fx.record(ConsumerTargetEpochRecord{Epoch: g.assignmentEpoch})
	g.sig = g.subscribedSignature()
}

// subscribed returns the topics member m subscribes to: its names and the
// topics the group's last resolution of its regex found (consumer_regex.go),
// sorted. It never looks at the catalog.
func (g *ConsumerGroup) subscribed(m *consumerMember) []string {
	if m.regex == "" {
		return m.topics
	}
	matched := g.regex.resolved[m.regex]
	if len(m.topics) == 0 {
		return matched
	}
	out := make([]string, 0, len(m.topics)+len(matched))
	out = append(append(out, m.topics...), matched...)
	slices.Sort(out)
	return slices.Compact(out)
}

// subscribedSignature describes the existing topics the group subscribes
// to and their partition counts (the role of Kafka's metadata hash): the
// epoch is bumped when it changes.
func (g *ConsumerGroup) subscribedSignature() string {
	set := map[string]bool{}
	var last *consumerMember
	for _, m := range g.members {
		if last != nil && m.regex == last.regex && slices.Equal(m.topics, last.topics) {
			continue // most groups share one subscription
		}
		last = m
		for _, t := range g.subscribed(m) {
			if _, ok := g.topics[t]; ok {
				set[t] = true
			}
		}
	}
	topics := make([]string, 0, len(set))
	for t := range set {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	var b strings.Builder
	for _, t := range topics {
		b.WriteString(strconv.Quote(t))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(int(g.topics[t])))
		b.WriteByte(',')
	}
	return b.String()
}

// SetTopics replaces the catalog (topic -> partition count) at now. When a
// topic the group subscribes to disappears or grows, or a topic it names
// appears, the group epoch is bumped and a new target computed; members
// pick it up at their next heartbeat. A group with regexes resolves them
// again (consumer_regex.go): a topic they match that appeared is assigned
// then.
func (g *ConsumerGroup) SetTopics(topics map[string]int32, now time.Time, fx *ConsumerEffects) {
	g.topics = topics
	if g.epoch == 0 || len(g.members) == 0 {
		return
	}
	if g.subscribedSignature() != g.sig {
		g.bump(fx)
		g.maybeAssign(fx)
	}
	if g.hasRegexes() {
		g.requestResolution(now, fx)
	}
}

// reconcile moves member m toward its target (Kafka's
// CurrentAssignmentBuilder). owned is what the member reported owning (nil:
// unchanged, which counts as still owning everything).
func (g *ConsumerGroup) reconcile(m *consumerMember, owned tpSet, now time.Time, fx *ConsumerEffects) {
	switch m.state {
	case MemberStable:
		if m.epoch == g.assignmentEpoch {
			return
		}
	case MemberUnrevokedPartitions:
		if owned == nil || owned.intersects(m.pending) {
			return // still revoking
		}
	}
	g.computeNext(m, owned, now, fx)
}

func (g *ConsumerGroup) computeNext(m *consumerMember, owned tpSet, now time.Time, fx *ConsumerEffects) {
	wasRevoking := m.state == MemberUnrevokedPartitions
	target := m.target
	keep := m.assigned.filter(func(k tpKey) bool { return target.has(k.topic, k.partition) })
	revoke := m.assigned.filter(func(k tpKey) bool { return !target.has(k.topic, k.partition) })
	if revoke.len() > 0 && (owned == nil || owned.intersects(revoke)) {
		// Give up first, at the current epoch; the response tells the member
		// what it keeps.
		g.setAssignment(m, keep, revoke)
		m.state = MemberUnrevokedPartitions
		m.revokeBefore = now.Add(m.rebalanceTimeout)
		fx.arm(ConsumerTimerRebalance, m.id, m.rebalanceTimeout)
		return
	}
	next := keep
	heldBack := false
	target.each(func(k tpKey) {
		if keep.has(k.topic, k.partition) {
			return
		}
		if o, ok := g.owners[k]; ok && o.member != m.id {
			heldBack = true // its previous owner has not released it yet
			return
		}
		next.add(k.topic, k.partition)
	})
	if m.epoch != g.assignmentEpoch {
		m.previousEpoch, m.epoch = m.epoch, g.assignmentEpoch
	}
	g.setAssignment(m, next, nil)
	m.state = MemberStable
	if heldBack {
		m.state = MemberUnreleasedPartitions
	}
	if wasRevoking {
		m.revokeBefore = time.Time{}
		fx.cancel(ConsumerTimerRebalance, m.id)
	}
}

// setAssignment replaces m's assigned and pending-revocation partitions and
// keeps the partition owners in step, each stamped with m's epoch (set
// m.epoch first). Giving a member a partition another
// member holds is a bug of this package: it panics rather than let two
// members own a partition.
func (g *ConsumerGroup) setAssignment(m *consumerMember, assigned, pending tpSet) {
	if assigned == nil {
		assigned = tpSet{}
	}
	if pending == nil {
		pending = tpSet{}
	}
	release := func(k tpKey) {
		if !assigned.has(k.topic, k.partition) && !pending.has(k.topic, k.partition) && g.owners[k].member == m.id {
			delete(g.owners, k)
		}
	}
	m.assigned.each(release)
	m.pending.each(release)
	claim := func(k tpKey) {
		if o, ok := g.owners[k]; ok && o.member != m.id {
			panic(fmt.Sprintf("coordinator: consumer group %s: %s-%d held by %s is given to %s", g.id, k.topic, k.partition, o.member, m.id))
		}
		g.owners[k] = partitionOwner{member: m.id, epoch: m.epoch}
	}
	assigned.each(claim)
	pending.each(claim)
	m.assigned, m.pending = assigned, pending
}

// remove fences member m: its partitions are free, its records deleted, the
// group epoch bumped and a new target computed.
func (g *ConsumerGroup) remove(m *consumerMember, fx *ConsumerEffects) {
	g.setAssignment(m, nil, nil)
	delete(g.members, m.id)
	if m.instanceID != "" && g.static[m.instanceID] == m.id {
		delete(g.static, m.instanceID)
	}
	g.writeTombstones(m.id, fx)
	cancelMemberTimers(m, fx)
	g.bump(fx)
	if len(g.members) == 0 {
		// An empty group's target is at its epoch (KAFKA-20442).
		g.assignmentEpoch = g.epoch
		fx.record(ConsumerTargetEpochRecord{Epoch: g.assignmentEpoch})
		g.sig = ""
	} else {
		g.maybeAssign(fx)
	}
	g.dropUnusedRegex(m.regex)
}

// dropUnusedRegex forgets a regex no member uses any more: its compiled
// form and its resolution (a member that brings it back waits for a new
// one, as in Kafka, which deletes the resolution with its last member).
func (g *ConsumerGroup) dropUnusedRegex(expr string) {
	if expr == "" {
		return
	}
	for _, o := range g.members {
		if o.regex == expr {
			return
		}
	}
	delete(g.regexes, expr)
	delete(g.regex.resolved, expr)
}

// OnTimer handles a fired timer at now. It reports whether the member was
// removed. A fire that no longer applies (the member heartbeated since, left,
// or finished revoking) is ignored or re-armed for the remaining time.
func (g *ConsumerGroup) OnTimer(kind ConsumerTimerKind, memberID string, now time.Time, fx *ConsumerEffects) bool {
	if kind == ConsumerTimerRegex {
		g.resolveRegexes(now, fx)
		return false
	}
	m := g.members[memberID]
	if m == nil {
		return false
	}
	switch kind {
	case ConsumerTimerSession:
		if now.Before(m.sessionEnd) {
			fx.arm(ConsumerTimerSession, m.id, m.sessionEnd.Sub(now))
			return false
		}
	case ConsumerTimerRebalance:
		if m.state != MemberUnrevokedPartitions || m.revokeBefore.IsZero() {
			return false
		}
		if now.Before(m.revokeBefore) {
			fx.arm(ConsumerTimerRebalance, m.id, m.revokeBefore.Sub(now))
			return false
		}
	case ConsumerTimerJoin, ConsumerTimerSync:
		before := &m.joinBefore
		if kind == ConsumerTimerSync {
			before = &m.syncBefore
		}
		if before.IsZero() {
			return false
		}
		if now.Before(*before) {
			fx.arm(kind, m.id, before.Sub(now))
			return false
		}
	default:
		return false
	}
	g.remove(m, fx)
	return true
}

// cancelMemberTimers cancels every timer of m.
func cancelMemberTimers(m *consumerMember, fx *ConsumerEffects) {
	fx.cancel(ConsumerTimerSession, m.id)
	fx.cancel(ConsumerTimerRebalance, m.id)
	if m.classic != nil {
		fx.cancel(ConsumerTimerJoin, m.id)
		fx.cancel(ConsumerTimerSync, m.id)
	}
}
