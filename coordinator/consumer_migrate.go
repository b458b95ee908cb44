package coordinator

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Online migration between the classic protocol and the consumer protocol
// (the reference's section 4). The Group of a group id is the entry point:
// its owner hands it every ConsumerGroupHeartbeat (ConsumerHeartbeat),
// every classic request while a consumer group is attached (ServeClassic)
// and every consumer timer (ConsumerTimer), and executes both effect sets
// each returns, the ConsumerEffects first (one write, before the answer).
//
// Upgrade: the first ConsumerGroupHeartbeat (epoch 0) to a classic group
// with members converts it when the policy allows, its protocol type is
// "consumer", its size is within group.consumer.max.size and every
// member's metadata and assignment decode with no userData; otherwise
// GROUP_ID_NOT_FOUND with Kafka's message, and nothing changes. The
// consumer group starts at group epoch = generation, each member STABLE at
// it, holding its last classic assignment as current and target (a member
// without one, in the middle of a rebalance, holds the partitions its
// JoinGroup said it owns). Parked JoinGroup and SyncGroup requests are
// answered REBALANCE_IN_PROGRESS. The write that carries the consumer
// records also carries the classic group without members (and without
// silent members), so a coordinator that loads the group finds a consumer
// group and an empty classic record, never the classic members again.
// Then the heartbeat proceeds as in any consumer group; if it fails, the
// group stays classic and nothing is written.
//
// Downgrade: when a consumer-protocol member is removed (leave, session or
// rebalance timeout) and every remaining member is a classic member, the
// group converts back when the policy allows and its size is within
// group.max.size: generation = group epoch, protocol chosen by vote, each
// member's assignment its target serialized in its protocol's version,
// then a rebalance (PreparingRebalance), so no classic member is handed a
// partition outside a classic rebalance. One write removes every consumer
// record (member tombstones, then the group's two epoch records) and
// writes the classic group with RebalancePending set.
//
// Empty groups convert whatever the policy: an empty classic group is
// taken by a valid consumer join, an empty consumer group
// by a JoinGroup (its consumer records are removed; offsets stay).

// ConsumerHeartbeat runs a ConsumerGroupHeartbeat for this group id: it
// attaches a new consumer group to a group without members, upgrades a
// classic group with members, or passes the heartbeat to the attached
// consumer group and downgrades it when its last consumer-protocol member
// left. cfg and topics are used when a consumer group is created. The
// owner writes cfx.Records in one write, then executes fx and sends the
// answer once the write is done.
func (g *Group) ConsumerHeartbeat(cfg *ConsumerConfig, topics map[string]int32, req *ConsumerHeartbeatRequest, now time.Time, cfx *ConsumerEffects, fx *Effects) ConsumerHeartbeatResponse {
	if cg := g.consumer; cg != nil {
		if req.MemberEpoch != EpochLeave {
			// Only a leave removes a member: no downgrade to look for (and
			// no member count to take on every heartbeat).
			return cg.Heartbeat(req, now, cfx)
		}
		before := cg.numConsumerProtocol()
		resp := cg.Heartbeat(req, now, cfx)
		g.maybeDowngrade(before, now, cfx, fx)
		return resp
	}
	if g.state == Dead {
		return consumerError(ErrGroupIDNotFound, fmt.Sprintf("Group %s is not a consumer group.", g.id))
	}
	cg := NewConsumerGroup(g.id, cfg, topics)
	if code, msg := cg.validate(req); code != ErrNone {
		return consumerError(code, msg)
	}
	if g.members.len() == 0 && len(g.pending) == 0 {
		resp := cg.Heartbeat(req, now, cfx)
		if cg.Epoch() != 0 {
			g.consumer = cg
		}
		return resp
	}
	if req.MemberEpoch != EpochJoin {
		return consumerError(ErrGroupIDNotFound, fmt.Sprintf("Group %s is not a consumer group.", g.id))
	}
	up, code, msg := g.Upgrade(cfg, topics, now)
	if code != ErrNone {
		return consumerError(code, msg)
	}
	var hfx ConsumerEffects
	resp := up.Group.Heartbeat(req, now, &hfx)
	if resp.ErrorCode != ErrNone {
		return resp // the group stays classic
	}
	g.RetireClassic(now, fx)
	g.consumer = up.Group
	cfx.Records = append(cfx.Records, up.Records...)
	cfx.Records = append(cfx.Records, hfx.Records...)
	cfx.Timers = append(cfx.Timers, up.Timers...)
	cfx.Timers = append(cfx.Timers, hfx.Timers...)
	return resp
}

// ConsumerTimer fires a consumer member's timer (ConsumerGroup.OnTimer)
// and downgrades the group when it removed the last consumer-protocol
// member. It reports whether a member was removed.
func (g *Group) ConsumerTimer(kind ConsumerTimerKind, member string, now time.Time, cfx *ConsumerEffects, fx *Effects) bool {
	cg := g.consumer
	if cg == nil {
		return false
	}
	before := cg.numConsumerProtocol()
	removed := cg.OnTimer(kind, member, now, cfx)
	g.maybeDowngrade(before, now, cfx, fx)
	return removed
}

// ServeClassic answers a classic request to a group id with a consumer
// group attached: served is false when the request is not the consumer
// group's (offsets, deletion) or when the group is classic (none attached,
// or an empty one a JoinGroup just turned classic: its records' removal is
// in cfx), and the owner goes on with the classic Group. Otherwise resp is
// the answer, sent once cfx.Records are written; fx holds the classic
// group's effects when a JoinGroup downgraded the group (a classic static
// member replaced the last consumer-protocol member). newID is as for
// Join. With the migration policy disabled the answers are refuseClassic's.
func (g *Group) ServeClassic(req proto.Message, newID string, now time.Time, cfx *ConsumerEffects, fx *Effects) (resp proto.Message, served bool) {
	cg := g.consumer
	if cg == nil {
		return nil, false
	}
	if j, ok := req.(*pb.JoinGroupRequest); ok && len(cg.members) == 0 && j.GetGroupId() != "" {
		g.detachEmptyConsumer(cfx)
		return nil, false
	}
	if cg.cfg.MigrationPolicy.Disabled() {
		if r := g.refuseClassic(req); r != nil {
			return r, true
		}
		return nil, false
	}
	switch r := req.(type) {
	case *pb.JoinGroupRequest:
		if r.GetGroupId() == "" {
			return joinError(r.GetMemberId(), ErrInvalidGroupID), true
		}
		if _, _, code := joinTimeouts(g.cfg, r); code != ErrNone {
			return joinError(r.GetMemberId(), code), true
		}
		before := cg.numConsumerProtocol()
		resp := cg.ClassicJoin(r, newID, now, cfx)
		if resp.GetErrorCode() == ErrNone && before > 0 && cg.numConsumerProtocol() == 0 {
			// Only a static member's replacement removes a member here.
			g.maybeDowngradeReplaced(now, cfx, fx)
		}
		return resp, true
	case *pb.SyncGroupRequest:
		if r.GetGroupId() == "" {
			return syncError(ErrInvalidGroupID), true
		}
		return cg.ClassicSync(r, now, cfx), true
	case *pb.HeartbeatRequest:
		if r.GetGroupId() == "" {
			return HeartbeatAnswer(ErrInvalidGroupID), true
		}
		return HeartbeatAnswer(cg.ClassicHeartbeat(r, now, cfx)), true
	case *pb.LeaveGroupRequest:
		if r.GetGroupId() == "" {
			return &pb.LeaveGroupResponse{ErrorCode: ErrInvalidGroupID}, true
		}
		return cg.ClassicLeave(r, cfx), true
	case *pb.DescribeGroupRequest:
		return g.refuseClassic(req), true
	}
	return nil, false
}

// detachEmptyConsumer turns a group whose consumer group has no member
// back into a classic one: the consumer records are removed and the
// classic generation continues above the consumer epochs.
func (g *Group) detachEmptyConsumer(cfx *ConsumerEffects) {
	cg := g.consumer
	cg.writeGroupTombstones(cfx)
	g.generation = max(g.generation, cg.epoch)
	g.floor = max(g.floor, g.generation)
	g.consumer = nil
}

// writeGroupTombstones removes every record of the consumer group: its
// members' and its two epoch records.
func (g *ConsumerGroup) writeGroupTombstones(fx *ConsumerEffects) {
	for _, id := range g.memberIDs() {
		g.writeTombstones(id, fx)
		cancelMemberTimers(g.members[id], fx)
	}
	fx.record(ConsumerTargetEpochRecord{Deleted: true})
	fx.record(ConsumerGroupEpochRecord{Deleted: true})
}

// Upgraded is a classic group converted into a consumer group: the group,
// the records to write (the empty classic record first) and its members'
// session timers.
type Upgraded struct {
	Group   *ConsumerGroup
	Records []ConsumerRecord
	Timers  []ConsumerTimer
}

// Upgrade converts the classic group, which must have members, into a
// consumer group (Kafka's validateOnlineUpgrade, convertToConsumerGroup
// and ConsumerGroup.fromClassicGroup), without changing g; code is
// GROUP_ID_NOT_FOUND, with Kafka's message, when it cannot. The caller
// retires the classic side (RetireClassic) once it commits to the result.
func (g *Group) Upgrade(cfg *ConsumerConfig, topics map[string]int32, now time.Time) (up Upgraded, code int32, msg string) {
	refuse := func(why string) (Upgraded, int32, string) {
		return Upgraded{}, ErrGroupIDNotFound, fmt.Sprintf("Cannot upgrade classic group %s to consumer group because %s", g.id, why)
	}
	switch {
	case !cfg.MigrationPolicy.UpgradeEnabled():
		return refuse("online upgrade is disabled.")
	case g.protocolType != consumerProtocolType:
		return refuse("the group does not use the consumer embedded protocol.")
	case cfg.MaxSize > 0 && g.members.len() > cfg.MaxSize:
		return refuse("the group size exceeds the consumer group maximum size.")
	}
	cg := NewConsumerGroup(g.id, cfg, topics)
	cg.epoch, cg.assignmentEpoch = g.generation, g.generation
	fx := ConsumerEffects{}
	fx.record(ClassicRecord{g.retiredRecord(now)})
	fx.record(ClassicRecord{&pb.Record{Kind: &pb.Record_MemberSessions{MemberSessions: &pb.MemberSessions{GroupId: g.id}}}})
	fx.record(ConsumerGroupEpochRecord{Epoch: cg.epoch})
	for _, om := range g.order {
		metadata := g.memberMetadata(om)
		if g.protocolName == nil && len(om.protocols) > 0 {
			metadata = om.protocols[0].GetMetadata() // before the first protocol vote
		}
		sub, err := assignor.DecodeSubscription(metadata)
		if err != nil {
			return refuse("the embedded consumer protocol is malformed.")
		}
		held := newTPSet(sub.OwnedPartitions)
		if len(om.assignment) > 0 {
			a, err := assignor.DecodeAssignment(om.assignment)
			if err != nil {
				return refuse("the embedded consumer protocol is malformed.")
			}
			if len(a.UserData) > 0 {
				return refuse("an unsupported custom assignor is in use. Please refer to the documentation or switch to a default assignor before re-attempting the upgrade.")
			}
			held = newTPSet(a.Topics)
		}
		// Partitions of unknown topics are dropped, as Kafka drops them; a
		// partition claimed twice stays with the member that joined first.
		held = held.filter(func(k tpKey) bool {
			_, taken := cg.owners[k]
			return !taken && k.partition >= 0 && k.partition < topics[k.topic]
		})
		names := slices.Clone(sub.Topics)
		slices.Sort(names)
		m := &consumerMember{
			id: om.id, rackID: sub.Rack, clientID: om.clientID, clientHost: om.clientHost,
			rebalanceTimeout: om.rebalanceTimeout(), topics: slices.Compact(names),
			epoch: g.generation, previousEpoch: g.generation, state: MemberStable,
			assigned: tpSet{}, pending: tpSet{}, target: held.filter(func(tpKey) bool { return true }),
			classic: &ClassicMemberMetadata{ProtocolType: g.protocolType, SessionTimeout: om.sessionTimeout(), Protocols: classicProtocols(om.protocols)},
		}
		if len(m.topics) == 0 {
			m.topics = nil
		}
		if om.instanceID != nil {
			m.instanceID = *om.instanceID
			cg.static[m.instanceID] = m.id
		}
		cg.members[m.id] = m
		cg.setAssignment(m, held, nil)
		cg.writeMember(m, &fx)
		fx.record(ConsumerTargetRecord{MemberID: m.id, Partitions: m.target.list()})
		cg.writeCurrent(m, &fx)
		d := m.classic.SessionTimeout
		m.sessionEnd = now.Add(d)
		fx.arm(ConsumerTimerSession, m.id, d)
	}
	fx.record(ConsumerTargetEpochRecord{Epoch: cg.assignmentEpoch})
	cg.sig = cg.subscribedSignature()
	return Upgraded{Group: cg, Records: fx.Records, Timers: fx.Timers}, ErrNone, ""
}

// retiredRecord is the classic group's record once its members are gone:
// what an upgrade writes in place of the classic members.
func (g *Group) retiredRecord(now time.Time) *pb.Record {
	rec := &pb.GroupRecord{GroupId: g.id, ProtocolType: g.protocolType, Generation: g.generation, StateTimestampMs: now.UnixMilli(), Members: []*pb.MemberRecord{}}
	if g.floor > g.generation {
		rec.GenerationFloor = g.floor
	}
	return &pb.Record{Kind: &pb.Record_Group{Group: rec}}
}

// RetireClassic removes the classic members of a group being upgraded: its
// parked JoinGroup and SyncGroup requests are answered
// REBALANCE_IN_PROGRESS, its pending member ids forgotten, its timers
// (offset expiry aside) cancelled, and the group is Empty at its
// generation, as retiredRecord writes it.
func (g *Group) RetireClassic(now time.Time, fx *Effects) {
	for len(g.order) > 0 {
		m := g.order[0]
		if m.joinReply != nil {
			fx.reply(m.joinReply, joinError(m.id, ErrRebalanceInProgress))
			g.setJoinReply(m, nil, 0)
		}
		if m.syncReply != nil {
			fx.reply(m.syncReply, syncError(ErrRebalanceInProgress))
			m.syncReply = nil
		}
		g.removeMember(m, fx)
	}
	for id := range g.pending {
		fx.cancel(TimerMember, id)
	}
	clear(g.pending)
	if g.joinArmed {
		g.joinArmed = false
		fx.cancel(TimerJoin, "")
	}
	if g.syncArmed {
		g.syncArmed = false
		fx.cancel(TimerSync, "")
	}
	if g.sessionsArmed {
		g.sessionsArmed = false
		fx.cancel(TimerSessions, "")
	}
	g.pendSync = nil
	g.initial = initialDelay{}
	g.restored, g.silent, g.silentDirty = nil, nil, false
	g.takeover, g.covered = nil, nil
	g.protocolName, g.leader = nil, ""
	g.subscribed, g.subscribedKnown = nil, false
	g.floor = max(g.floor, g.generation)
	g.state, g.stateTime = Empty, now
}

// maybeDowngrade converts the attached consumer group into a classic group
// when the call just made removed its last consumer-protocol member
// (before is how many it had) and only classic members remain.
func (g *Group) maybeDowngrade(before int, now time.Time, cfx *ConsumerEffects, fx *Effects) {
	cg := g.consumer
	if before == 0 || cg.numConsumerProtocol() > 0 || len(cg.members) == 0 ||
		!cg.cfg.MigrationPolicy.DowngradeEnabled() || len(cg.members) > g.cfg.maxSize() {
		return
	}
	g.Downgrade(now, true, cfx, fx)
}

// maybeDowngradeReplaced converts the attached consumer group into a
// classic group when a classic static member's JoinGroup just took the
// seat of its last consumer-protocol member (Kafka's
// validateOnlineDowngradeWithReplacedMember and convertToClassicGroup with
// a joining member). Kafka rebalances when the joining member's
// subscription differs from the replaced member's; here the group
// rebalances unless every member holds its target at the group epoch (a
// changed subscription moves the target, so it rebalances too), so that
// no classic member is handed a partition outside a classic rebalance.
func (g *Group) maybeDowngradeReplaced(now time.Time, cfx *ConsumerEffects, fx *Effects) {
	cg := g.consumer
	if !cg.cfg.MigrationPolicy.DowngradeEnabled() || len(cg.members) > g.cfg.maxSize() {
		return
	}
	settled := cg.assignmentEpoch == cg.epoch
	for _, m := range cg.members {
		if m.state != MemberStable || m.epoch != cg.epoch || !m.assigned.equal(m.target) {
			settled = false
		}
	}
	g.Downgrade(now, !settled, cfx, fx)
}

// Downgrade converts the attached consumer group, whose members all use
// the classic protocol, into this classic group (Kafka's
// convertToClassicGroup and ClassicGroup.fromConsumerGroup): cfx gets the
// removal of every consumer record and the classic record, fx the classic
// timers of a rebalance (when rebalance is set), so that each member
// rejoins on REBALANCE_IN_PROGRESS. Without one the group is Stable, each
// member's assignment its target.
//
// The generation is the highest member epoch among the members, and a
// member behind it keeps its own epoch as its generation until the
// rebalance forms the next one. Kafka takes the group epoch before the removal as the
// generation, so a classic member that had not rejoined since an earlier
// removal (two consumer-protocol members leaving a few milliseconds
// apart) is told ILLEGAL_GENERATION and loses its partitions; here it is
// told REBALANCE_IN_PROGRESS and its commits are accepted, as the
// others'. The members' own epochs live in memory only: after a takeover
// during that rebalance a member behind the generation is told
// ILLEGAL_GENERATION, as in Kafka.
func (g *Group) Downgrade(now time.Time, rebalance bool, cfx *ConsumerEffects, fx *Effects) {
	cg := g.consumer
	cg.writeGroupTombstones(cfx)
	g.consumer = nil
	g.protocolType = consumerProtocolType
	gen := int32(0)
	for _, cm := range cg.members {
		gen = max(gen, cm.epoch)
	}
	g.generation = gen
	g.floor = max(g.floor, g.generation)
	g.converted = nil
	for _, cm := range cg.members {
		if cm.epoch != gen {
			if g.converted == nil {
				g.converted = make(map[string]int32)
			}
			g.converted[cm.id] = cm.epoch
		}
	}
	for _, id := range cg.memberIDs() {
		cm := cg.members[id]
		m := &member{
			id: cm.id, clientID: cm.clientID, clientHost: cm.clientHost,
			rebalanceMs: durationMs(cm.rebalanceTimeout), sessionMs: durationMs(cm.classic.SessionTimeout),
		}
		if cm.instanceID != "" {
			m.instanceID = &cm.instanceID
		}
		for _, p := range cm.classic.Protocols {
			m.protocols = append(m.protocols, &pb.Protocol{Name: p.Name, Metadata: slices.Clone(p.Metadata)})
		}
		g.addMember(m)
	}
	name := g.selectProtocol()
	g.protocolName = &name
	for _, m := range g.order {
		m.assignment = serializeAssignment(cg.members[m.id].target, protocolVersion(g.memberMetadata(m)))
	}
	g.computeSubscribed()
	g.state, g.stateTime = Stable, now
	rec := g.groupRecord(now, nil)
	rec.GetGroup().RebalancePending = rebalance
	cfx.record(ClassicRecord{rec})
	for _, m := range g.order {
		g.armSession(now, m, m.sessionTimeout(), fx)
	}
	if rebalance {
		g.prepareRebalance(now, fx)
	}
}

// isGeneration reports whether gen is the generation for member id: the
// group's, or after a downgrade, until the next generation forms, the
// member epoch the member held in the consumer group.
func (g *Group) isGeneration(id string, gen int32) bool {
	return gen == g.generation || g.convertedAt(id, gen)
}

// convertedAt reports whether member id was behind the generation at a
// downgrade, at member epoch gen, and no generation formed since.
func (g *Group) convertedAt(id string, gen int32) bool {
	e, ok := g.converted[id]
	return ok && e == gen
}
