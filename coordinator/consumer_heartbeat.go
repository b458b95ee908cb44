package coordinator

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/cohort-coord/cohort/assignor"
)

// Heartbeat handles one ConsumerGroupHeartbeat at now. The owner writes
// fx.Records before it sends the response; on an error response fx is left
// empty (nothing changed).
func (g *ConsumerGroup) Heartbeat(req *ConsumerHeartbeatRequest, now time.Time, fx *ConsumerEffects) ConsumerHeartbeatResponse {
	if code, msg := g.validate(req); code != ErrNone {
		return consumerError(code, msg)
	}
	switch req.MemberEpoch {
	case EpochLeave, EpochStaticLeave:
		return g.leave(req, fx)
	}
	return g.heartbeat(req, now, fx)
}

func consumerError(code int32, msg string) ConsumerHeartbeatResponse {
	return ConsumerHeartbeatResponse{ErrorCode: code, ErrorMessage: msg}
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// validate is stage A of the reference (checks before the group is looked
// at), in Kafka's order.
func (g *ConsumerGroup) validate(req *ConsumerHeartbeatRequest) (int32, string) {
	e := req.MemberEpoch
	if blank(req.MemberID) && (req.Version >= 1 || e > 0 || e == EpochLeave) {
		return ErrInvalidRequest, "MemberId can't be empty."
	}
	switch {
	case blank(req.GroupID):
		return ErrInvalidRequest, "GroupId can't be empty."
	case req.InstanceID != nil && blank(*req.InstanceID):
		return ErrInvalidRequest, "InstanceId can't be empty."
	case req.RackID != nil && blank(*req.RackID):
		return ErrInvalidRequest, "RackId can't be empty."
	}
	if e == EpochJoin {
		switch {
		case req.RebalanceTimeoutMs == -1:
			return ErrInvalidRequest, "RebalanceTimeoutMs must be provided in first request."
		case req.Topics == nil || len(req.Topics) > 0:
			return ErrInvalidRequest, "TopicPartitions must be empty when (re-)joining."
		case req.SubscribedTopicNames == nil && req.SubscribedTopicRegex == nil:
			return ErrInvalidRequest, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
		}
	}
	// A -2 without an instance id is INVALID_REQUEST in Kafka; it is taken
	// here when the member it names is static (leave), as franz-go sends
	// it that way and its static members could not otherwise restart
	// within their session.
	if e < EpochStaticLeave {
		return ErrInvalidRequest, "MemberEpoch is invalid."
	}
	if req.RebalanceTimeoutMs < -1 {
		return ErrInvalidRequest, "RebalanceTimeoutMs is invalid."
	}
	if req.ServerAssignor != nil && !slices.ContainsFunc(g.cfg.Assignors, func(a assignor.ServerAssignor) bool { return a.Name() == *req.ServerAssignor }) {
		names := make([]string, len(g.cfg.Assignors))
		for i, a := range g.cfg.Assignors {
			names[i] = a.Name()
		}
		return ErrUnsupportedAssignor, fmt.Sprintf("ServerAssignor %s is not supported. Supported assignors: %s.", *req.ServerAssignor, strings.Join(names, ", "))
	}
	return ErrNone, ""
}

// leave handles epochs -1 (the member leaves) and -2 (a static member leaves
// for now and keeps its seat until its session timeout).
func (g *ConsumerGroup) leave(req *ConsumerHeartbeatRequest, fx *ConsumerEffects) ConsumerHeartbeatResponse {
	if g.epoch == 0 {
		return consumerError(ErrGroupIDNotFound, "Group "+req.GroupID+" not found.")
	}
	var m *consumerMember
	if req.MemberEpoch == EpochStaticLeave && req.InstanceID == nil {
		if m = g.members[req.MemberID]; m == nil || m.instanceID == "" {
			return consumerError(ErrInvalidRequest, "InstanceId can't be null.")
		}
	} else if req.InstanceID != nil {
		id, ok := g.static[*req.InstanceID]
		if !ok {
			return consumerError(ErrUnknownMemberID, "Instance id "+*req.InstanceID+" is unknown.")
		}
		if id != req.MemberID {
			return consumerError(ErrFencedInstanceID, "Instance id "+*req.InstanceID+" is held by another member.")
		}
		m = g.members[id]
	} else if m = g.members[req.MemberID]; m == nil {
		return consumerError(ErrUnknownMemberID, "Member "+req.MemberID+" is unknown.")
	}
	resp := ConsumerHeartbeatResponse{MemberID: m.id, MemberEpoch: req.MemberEpoch}
	if req.MemberEpoch == EpochLeave {
		g.remove(m, fx)
		return resp
	}
	// Static temporary leave: keep the seat and the assigned partitions (no
	// one else gets them), give up pending revocations, no epoch bump. The
	// session timer keeps running.
	m.previousEpoch, m.epoch, m.state = m.epoch, EpochStaticLeave, MemberStable
	g.setAssignment(m, m.assigned, nil)
	m.revokeBefore = time.Time{}
	fx.cancel(ConsumerTimerRebalance, m.id)
	g.writeCurrent(m, fx)
	return resp
}

// full reports whether a member that is neither known (m) nor replacing a
// static member (replaced) would take the group past its maximum size.
func (g *ConsumerGroup) full(m, replaced *consumerMember) bool {
	return m == nil && replaced == nil && g.cfg.MaxSize > 0 && len(g.members) >= g.cfg.MaxSize
}

// updateFrom is where a member's update starts: the static member it
// replaces, under the new id and from epoch 0; nothing for a new member;
// the member itself otherwise.
func updateFrom(m, replaced *consumerMember, id string) consumerMember {
	switch {
	case replaced != nil:
		upd := *replaced
		upd.id, upd.epoch, upd.previousEpoch, upd.state = id, 0, 0, MemberStable
		return upd
	case m == nil:
		return consumerMember{id: id}
	}
	return *m
}

// heartbeat handles joins (epoch 0) and heartbeats (epoch > 0).
func (g *ConsumerGroup) heartbeat(req *ConsumerHeartbeatRequest, now time.Time, fx *ConsumerEffects) ConsumerHeartbeatResponse {
	memberID := req.MemberID
	if blank(memberID) { // v0 join without an id
		memberID = req.GeneratedMemberID
		if blank(memberID) {
			return consumerError(ErrUnknownServerError, "no member id was generated for a v0 join")
		}
	}
	join := req.MemberEpoch == EpochJoin
	if g.epoch == 0 && !join {
		return consumerError(ErrGroupIDNotFound, "Group "+req.GroupID+" not found.")
	}
	m, replaced, code, msg := g.lookup(req, memberID)
	if code != ErrNone {
		return consumerError(code, msg)
	}
	isNew := m == nil
	if g.full(m, replaced) {
		return consumerError(ErrGroupMaxSizeReached, fmt.Sprintf("The consumer group has reached its maximum capacity of %d members.", g.cfg.MaxSize))
	}
	if !isNew && !join {
		if code, msg := checkEpoch(m, req); code != ErrNone {
			return consumerError(code, msg)
		}
	}
	// The updated subscription, validated before anything changes.
	upd := updateFrom(m, replaced, memberID)
	if req.InstanceID != nil {
		upd.instanceID = *req.InstanceID
	}
	if req.RackID != nil {
		upd.rackID = *req.RackID
	}
	if req.RebalanceTimeoutMs >= 0 {
		upd.rebalanceTimeout = time.Duration(req.RebalanceTimeoutMs) * time.Millisecond
	}
	if req.SubscribedTopicNames != nil {
		names := slices.Clone(req.SubscribedTopicNames)
		slices.Sort(names)
		upd.topics = slices.Compact(names)
		if len(upd.topics) == 0 {
			upd.topics = nil // one form for "no names", as a replay has it
		}
	}
	if req.SubscribedTopicRegex != nil {
		upd.regex = *req.SubscribedTopicRegex
	}
	if req.ServerAssignor != nil {
		upd.assignor = *req.ServerAssignor
	}
	upd.clientID, upd.clientHost = req.ClientID, req.ClientHost
	// A classic member that sends ConsumerGroupHeartbeat uses the consumer
	// protocol from now on.
	wasClassic := upd.classic != nil
	upd.classic, upd.joinBefore, upd.syncBefore = nil, time.Time{}, time.Time{}
	if upd.regex != "" && g.regexes[upd.regex] == nil {
		if _, err := compileFull(upd.regex); err != nil {
			shown := upd.regex
			if len(shown) > 200 {
				shown = shown[:200] + "..."
			}
			return consumerError(ErrInvalidRegularExpression, "SubscribedTopicRegex "+shown+" is invalid: "+err.Error())
		}
	}

	// Committed from here on.
	m, before := g.putMember(m, replaced, upd, fx)
	if m.regex != "" {
		g.compile(m.regex)
		if _, ok := g.regex.resolved[m.regex]; !ok {
			// A regex the group has not resolved: the member gets its
			// topics from the resolution this arms (consumer_regex.go).
			g.requestResolution(now, fx)
		}
	}
	if before.regex != m.regex {
		g.dropUnusedRegex(before.regex)
	}
	subChanged := isNew || !slices.Equal(before.topics, m.topics) || before.regex != m.regex || before.assignor != m.assignor
	if replaced != nil {
		subChanged = !slices.Equal(replaced.topics, m.topics) || replaced.regex != m.regex || replaced.assignor != m.assignor
	}
	newMember := isNew && replaced == nil
	if wasClassic {
		fx.cancel(ConsumerTimerJoin, m.id)
		fx.cancel(ConsumerTimerSync, m.id)
	}
	if newMember || wasClassic || m.rackID != before.rackID || m.rebalanceTimeout != before.rebalanceTimeout ||
		m.clientID != before.clientID || m.clientHost != before.clientHost || subChanged || m.instanceID != before.instanceID {
		g.writeMember(m, fx)
	}
	// A new member or a changed subscription (names, regex, preferred
	// assignor) bumps the group epoch; so does the group's first join.
	if g.epoch == 0 || newMember || subChanged {
		g.bump(fx)
	}
	g.maybeAssign(fx)

	owned := tpSet(nil)
	if req.Topics != nil {
		owned = newTPSet(req.Topics)
	}
	oldAssigned := m.assigned
	oldEpoch, oldState := m.epoch, m.state
	g.reconcile(m, owned, now, fx)
	changed := !oldAssigned.equal(m.assigned)
	if changed || oldEpoch != m.epoch || oldState != m.state || isNew {
		g.writeCurrent(m, fx)
	}
	g.touchSession(m, now, fx)

	resp := ConsumerHeartbeatResponse{
		MemberID:            m.id,
		MemberEpoch:         m.epoch,
		HeartbeatIntervalMs: int32(g.cfg.HeartbeatInterval / time.Millisecond),
	}
	full := req.RebalanceTimeoutMs != -1 && (req.SubscribedTopicNames != nil || req.SubscribedTopicRegex != nil) && req.Topics != nil
	if join || full || changed {
		resp.Assignment, resp.HasAssignment = m.assigned.list(), true
	}
	return resp
}

// lookup finds the member a heartbeat is about: nil for a new member, or
// the static member it replaces.
func (g *ConsumerGroup) lookup(req *ConsumerHeartbeatRequest, memberID string) (m, replaced *consumerMember, code int32, msg string) {
	join := req.MemberEpoch == EpochJoin
	if req.InstanceID == nil {
		m = g.members[memberID]
		if m == nil && !join {
			return nil, nil, ErrUnknownMemberID, "Member " + memberID + " is not a member of the group."
		}
		return m, nil, ErrNone, ""
	}
	inst := *req.InstanceID
	holderID, held := g.static[inst]
	if !join {
		switch {
		case !held:
			return nil, nil, ErrUnknownMemberID, "Instance id " + inst + " is unknown."
		case holderID != memberID:
			return nil, nil, ErrFencedInstanceID, "Instance id " + inst + " is held by another member."
		}
		return g.members[holderID], nil, ErrNone, ""
	}
	if own := g.members[memberID]; own != nil && own.instanceID != inst {
		// A join that would change an existing member's instance id.
		return nil, nil, ErrInvalidRequest, "Member " + memberID + " cannot change its instance id."
	}
	switch {
	case !held:
		return nil, nil, ErrNone, ""
	case holderID == memberID:
		// The holder rejoins with its own id (lost join response, or after
		// FENCED_MEMBER_EPOCH): handled in place, as apache/kafka#23542.
		return g.members[holderID], nil, ErrNone, ""
	}
	holder := g.members[holderID]
	if holder.epoch != EpochStaticLeave {
		return nil, nil, ErrUnreleasedInstanceID, "Static member " + holderID + " with instance id " + inst + " is not released yet."
	}
	return nil, holder, ErrNone, ""
}

// checkEpoch validates the member epoch of a heartbeat (epoch > 0) against
// the member: equal, or the previous epoch while the member reports only
// partitions it still holds (its last response was lost).
func checkEpoch(m *consumerMember, req *ConsumerHeartbeatRequest) (int32, string) {
	e := req.MemberEpoch
	switch {
	case e == m.epoch:
		return ErrNone, ""
	case e > m.epoch:
		return ErrFencedMemberEpoch, fmt.Sprintf("The consumer group member has a greater member epoch (%d) than the one known by the group coordinator (%d).", e, m.epoch)
	case e == m.previousEpoch && req.Topics != nil && subset(newTPSet(req.Topics), m.assigned):
		return ErrNone, ""
	}
	return ErrFencedMemberEpoch, fmt.Sprintf("The consumer group member has a smaller member epoch (%d) than the one known by the group coordinator (%d).", e, m.epoch)
}

func subset(a, b tpSet) bool {
	for t, ps := range a {
		for _, p := range ps {
			if !b.has(t, p) {
				return false
			}
		}
	}
	return true
}

// renameMember moves a static member that left with -2 to the new member id
// that took its instance id: same subscription, assignment and target.
func (g *ConsumerGroup) renameMember(old, upd *consumerMember, fx *ConsumerEffects) {
	delete(g.members, old.id)
	g.writeTombstones(old.id, fx)
	cancelMemberTimers(old, fx)
	m := &consumerMember{}
	*m = *upd
	m.assigned, m.pending, m.target = old.assigned, tpSet{}, old.target
	g.members[m.id] = m
	m.assigned.each(func(k tpKey) { g.owners[k] = partitionOwner{member: m.id, epoch: m.epoch} })
	old.pending.each(func(k tpKey) { delete(g.owners, k) })
	fx.record(ConsumerTargetRecord{MemberID: m.id, Partitions: m.target.list()})
	g.writeMember(m, fx)
}

// MaxRegexLen bounds a subscription regex. Matching a topic name costs
// time in proportion to the regex's size, for every topic of the catalog
// whenever it changes; a regex of 100,000 characters took the group tens of
// milliseconds per topic. Kafka sets no bound; clients send short ones
// (franz-go joins its patterns into one alternation).
const MaxRegexLen = 4096

// errRegexTooLong refuses a regex longer than MaxRegexLen.
var errRegexTooLong = fmt.Errorf("longer than %d characters", MaxRegexLen)

// putMember makes upd the member: in the seat of replaced (a static
// member taking its instance's place), as a new member (m nil), or over m.
// It returns the member and what m was before (zero otherwise).
func (g *ConsumerGroup) putMember(m, replaced *consumerMember, upd consumerMember, fx *ConsumerEffects) (*consumerMember, consumerMember) {
	var before consumerMember
	switch {
	case replaced != nil:
		g.renameMember(replaced, &upd, fx)
		m = g.members[upd.id]
	case m == nil:
		m = &consumerMember{}
		*m = upd
		m.assigned, m.pending, m.target = tpSet{}, tpSet{}, tpSet{}
		g.members[m.id] = m
	default:
		before = *m
		*m = upd
	}
	if m.instanceID != "" {
		g.static[m.instanceID] = m.id
	}
	return m, before
}

// compileFull compiles a subscription regex with full-match semantics
// (Kafka's RE2/J matches(): the whole topic name must match).
func compileFull(expr string) (*regexp.Regexp, error) {
	if len(expr) > MaxRegexLen {
		return nil, errRegexTooLong
	}
	if _, err := regexp.Compile(expr); err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + expr + `)$`)
}

func (g *ConsumerGroup) compile(expr string) *regexp.Regexp {
	if re := g.regexes[expr]; re != nil {
		return re
	}
	re, err := compileFull(expr)
	if err != nil {
		return nil
	}
	g.regexes[expr] = re
	return re
}

func (g *ConsumerGroup) touchSession(m *consumerMember, now time.Time, fx *ConsumerEffects) {
	if m.epoch == EpochStaticLeave {
		return
	}
	d := g.sessionTimeout(m)
	m.sessionEnd = now.Add(d)
	fx.arm(ConsumerTimerSession, m.id, d)
}
