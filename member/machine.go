package member

import (
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Phase is where a member is in its protocol loop.
type Phase uint8

const (
	// Idle: not started.
	Idle Phase = iota
	// Discovering: finding the coordinator (or waiting to retry).
	Discovering
	// Preparing: waiting for a revoke or lost callback before JoinGroup.
	Preparing
	// Joining: JoinGroup in flight (or waiting to retry it).
	Joining
	// Assigning: the leader waits for topic metadata to run its assignor.
	Assigning
	// Downgrading: waiting for the revoke of everything before SyncGroup.
	Downgrading
	// Syncing: SyncGroup in flight.
	Syncing
	// Stable: in a generation, heartbeating.
	Stable
	// Closing: revoking, committing and leaving.
	Closing
	// Stopped: done; the machine answers nothing more.
	Stopped
)

var phaseNames = [...]string{"Idle", "Discovering", "Preparing", "Joining", "Assigning", "Downgrading", "Syncing", "Stable", "Closing", "Stopped"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "Unknown"
}

// rebalancing reports whether a join or sync is under way.
func (p Phase) rebalancing() bool {
	return p == Preparing || p == Joining || p == Assigning || p == Downgrading || p == Syncing
}

// after says what a waiting callback unblocks.
type after uint8

const (
	afterNothing after = iota
	afterJoin
	afterSync
	afterClose
)

// retry says what the retry timer restarts.
type retry uint8

const (
	retryNone retry = iota
	retryDiscover
	retryJoin
	retryMetadata
	retryHeartbeat
)

type commitInFlight struct {
	token      uint64
	generation int32
	closing    bool
}

// Machine is one member's protocol state. It is not safe for concurrent use;
// its owner serialises calls.
type Machine struct {
	cfg        Config
	coopByRule bool // the Java consumer's rule: every balancer supports COOPERATIVE

	phase     Phase
	exclusive bool  // the coordinator enforces exclusive ownership
	resume    Phase // where Discovering returns to: Stable or Joining

	memberID   string
	generation int32
	protocol   string // selected in the current generation
	leader     bool
	members    []*pb.JoinGroupMember // the leader's view of the join
	// assignedFrom: the partition counts the leader took from Metadata for
	// its assignment in this generation (nil when none or not leader).
	assignedFrom   map[string]int32
	metadataTopics []string // the topics the leader sized from Metadata
	owned          set
	marks          map[TopicPartition]int64

	rejoinReason string
	followUp     bool // a rejoin is due once the waiting callback returns

	nextID, nextToken uint64
	joinID, syncID    uint64
	hbID, metaID      uint64
	findID, leaveID   uint64
	// The join and sync in flight when Close began (onClosingAnswer), and
	// the generation a closing member left for the one such a join formed
	// (-1: none), which it returns to if that one was lost in a failover.
	closingJoinID, closingSyncID uint64
	closingPrevGen               int32
	hbGeneration                 int32
	commits                      map[uint64]commitInFlight

	waitToken  uint64
	waitThen   after
	closeStage closeStage
	// revoking is what the waited-for revoke callback gives up (nil when the
	// waited-for callback is no revoke): lost if the callback outlives the
	// rebalance timeout.
	revoking set
	// revokeSince is when the member began to give partitions up in the
	// current rebalance (zero: it is not): the coordinator's wait for it,
	// and so the revoke limit, runs from then however many revoke
	// callbacks follow, until it sends JoinGroup.
	revokeSince time.Time
	now         time.Time // of the call being handled

	retryWhat retry
	backoff   time.Duration

	err error
}

// New returns a machine for cfg, which must have passed Validate.
func New(cfg Config) *Machine {
	p, _ := assignor.CommonProtocol(cfg.Balancers...)
	return &Machine{
		cfg:        cfg,
		coopByRule: p == assignor.Cooperative,
		generation: assignor.DefaultGeneration,
		owned:      set{},
		marks:      map[TopicPartition]int64{},
		commits:    map[uint64]commitInFlight{},
	}
}

// Phase returns the current phase.
func (m *Machine) Phase() Phase { return m.phase }

// MemberID returns the member id the coordinator gave ("" before).
func (m *Machine) MemberID() string { return m.memberID }

// Generation returns the generation the member is in (-1 when none).
func (m *Machine) Generation() int32 { return m.generation }

// Protocol returns the assignor the group selected in the current generation.
func (m *Machine) Protocol() string { return m.protocol }

// Leader reports whether the member leads the current generation.
func (m *Machine) Leader() bool { return m.leader }

// Owned returns the partitions the member owns.
func (m *Machine) Owned() []assignor.TopicPartitions { return m.owned.list() }

// Err returns why the member stopped, nil while it runs or after Close.
func (m *Machine) Err() error { return m.err }

// Cooperative reports whether the member follows the cooperative protocol in
// a generation that selected the given assignor.
func (m *Machine) Cooperative(protocol string) bool {
	if !m.exclusive {
		return m.coopByRule
	}
	for _, b := range m.cfg.Balancers {
		if b.ProtocolName() == protocol {
			return b.IsCooperative()
		}
	}
	return m.coopByRule
}

func (m *Machine) id() uint64 {
	m.nextID++
	return m.nextID
}

func (m *Machine) send(fx *Effects, msg any) uint64 {
	id := m.id()
	fx.Requests = append(fx.Requests, Request{ID: id, Msg: msg})
	return id
}

func (m *Machine) callback(fx *Effects, kind CallbackKind, s set, wait bool) uint64 {
	m.nextToken++
	fx.Callbacks = append(fx.Callbacks, Callback{Token: m.nextToken, Kind: kind, Partitions: s.list(), Generation: m.generation, Wait: wait})
	return m.nextToken
}

// Start begins the member's loop: find the coordinator, then join.
func (m *Machine) Start(now time.Time, fx *Effects) {
	m.now = now
	if m.phase != Idle {
		return
	}
	m.resume = Joining
	m.discover(fx)
}

// discover asks for the coordinator; resume says where to go when found.
func (m *Machine) discover(fx *Effects) {
	m.phase = Discovering
	m.joinID, m.syncID, m.hbID, m.metaID = 0, 0, 0, 0
	fx.cancel(TimerHeartbeat)
	fx.cancel(TimerRetry)
	m.retryWhat = retryNone
	m.findID = m.send(fx, &FindCoordinator{Group: m.cfg.Group})
}

// rediscover is discover after the coordinator moved or did not answer.
func (m *Machine) rediscover(fx *Effects, resume Phase) {
	m.resume = resume
	m.discover(fx)
}

func (m *Machine) retryAfter(fx *Effects, what retry) {
	if m.backoff == 0 {
		m.backoff = m.cfg.RetryBackoff
	} else {
		m.backoff = min(2*m.backoff, m.cfg.MaxRetryBackoff)
	}
	m.retryWhat = what
	fx.arm(TimerRetry, m.backoff)
}

// answered records that the coordinator answered: the session runs from now.
func (m *Machine) answered(fx *Effects) {
	m.backoff = 0
	if m.generation >= 0 || len(m.owned) > 0 {
		fx.arm(TimerSession, m.cfg.SessionTimeout)
	}
}

// startJoin prepares and sends a JoinGroup: an eager member first revokes
// everything it owns.
func (m *Machine) startJoin(fx *Effects) {
	m.phase = Preparing
	if m.waitToken != 0 {
		// A revoke or lost callback still runs: join once it returned.
		m.waitThen = afterJoin
		return
	}
	m.followUp = false
	m.leader, m.members, m.assignedFrom = false, nil, nil
	if len(m.owned) > 0 && !m.Cooperative(m.protocol) {
		revoked := m.owned
		m.owned = set{}
		m.revoke(fx, revoked, afterJoin)
		return
	}
	m.sendJoin(fx)
}

func (m *Machine) wait(token uint64, then after) {
	m.waitToken, m.waitThen = token, then
	m.revoking = nil
}

// revoke runs the Revoked callback for s and waits for it before then. The
// member keeps heartbeating meanwhile, as the Java consumer does until it
// sends JoinGroup: the coordinator keeps a member that heartbeats through a
// rebalance for up to its rebalance timeout, which bounds how long the
// callback may take (TimerRevoke, revokeLimit).
func (m *Machine) revoke(fx *Effects, s set, then after) {
	m.wait(m.callback(fx, Revoked, s, true), then)
	m.revoking = s
	if m.revokeSince.IsZero() {
		m.revokeSince = m.now
	}
	fx.arm(TimerRevoke, max(m.revokeSince.Add(m.revokeLimit()).Sub(m.now), 0))
	if m.heartbeats() {
		m.armHeartbeat(fx)
	}
}

// revokeLimit is how long a revoke callback may run before its partitions
// count as lost: the rebalance timeout, less two heartbeat intervals, since
// the coordinator's rebalance (and its timeout) may have begun that long
// before the member learned of it from a heartbeat's answer; at least half
// the rebalance timeout.
func (m *Machine) revokeLimit() time.Duration {
	rt := m.cfg.RebalanceTimeout
	return max(rt-2*m.cfg.HeartbeatInterval, rt/2)
}

// onRevokeTimeout: the waited-for revoke callback ran for the rebalance
// timeout. The coordinator removes a member that has not rejoined (or
// synced) by then and hands its partitions out, so the member gives up its
// generation as if its session had expired (the Java consumer's answer to
// max.poll.interval.ms): commits, from the callback too, are refused, what
// a cooperative member kept is reported lost after the callback returns,
// and the member joins again afterwards.
func (m *Machine) onRevokeTimeout(fx *Effects) {
	if m.waitToken == 0 || m.revoking == nil {
		return
	}
	m.revoking = nil
	if m.phase == Closing {
		// Closing goes on once the callback returns, without the
		// generation: nothing is committed, and the member leaves.
		m.generation = assignor.DefaultGeneration
		fx.cancel(TimerHeartbeat)
		m.hbID = 0
		return
	}
	m.followUp = false
	m.reset(fx, m.cfg.InstanceID != "")
	if m.phase != Discovering {
		m.phase = Preparing
	}
	m.retryWhat = retryNone
	m.waitThen = afterJoin
}

func (m *Machine) sendJoin(fx *Effects) {
	m.phase = Joining
	m.revokeSince = time.Time{}
	m.followUp = false
	m.retryWhat = retryNone
	fx.cancel(TimerSession) // the coordinator keeps a member waiting in join alive
	owned := m.owned.list()
	st := assignor.MemberState{Topics: m.cfg.Topics, Owned: owned, Generation: m.generation, Rack: m.cfg.Rack}
	req := &pb.JoinGroupRequest{
		GroupId:            m.cfg.Group,
		SessionTimeoutMs:   int32(m.cfg.SessionTimeout / time.Millisecond),
		RebalanceTimeoutMs: int32(m.cfg.RebalanceTimeout / time.Millisecond),
		MemberId:           m.memberID,
		ProtocolType:       "consumer",
		ClientId:           m.cfg.ClientID,
	}
	if m.cfg.InstanceID != "" {
		req.GroupInstanceId = &m.cfg.InstanceID
	}
	if m.rejoinReason != "" {
		r := m.rejoinReason
		req.Reason = &r
		m.rejoinReason = ""
	}
	for _, b := range m.cfg.Balancers {
		req.Protocols = append(req.Protocols, &pb.Protocol{Name: b.ProtocolName(), Metadata: b.Metadata(st)})
	}
	m.joinID = m.send(fx, req)
}

// reset forgets the generation (and the member id unless keepID): whatever
// the member owns is lost, since the coordinator may have handed it out.
func (m *Machine) reset(fx *Effects, keepID bool) {
	if len(m.owned) > 0 {
		lost := m.owned
		m.owned = set{}
		m.callback(fx, Lost, lost, true) // waited for through the join it leads to
		m.wait(m.nextToken, afterJoin)
	}
	m.joinID, m.syncID, m.metaID = 0, 0, 0
	m.generation = assignor.DefaultGeneration
	m.revokeSince = time.Time{}
	m.protocol, m.leader, m.members, m.assignedFrom = "", false, nil, nil
	if !keepID {
		m.memberID = ""
	}
	fx.cancel(TimerSession)
	fx.cancel(TimerHeartbeat)
	m.hbID = 0
}

// resetAndRejoin is reset followed by a join once the lost callback returns.
func (m *Machine) resetAndRejoin(fx *Effects, keepID bool) {
	m.joinID, m.syncID, m.metaID = 0, 0, 0
	m.reset(fx, keepID)
	m.phase = Preparing
	m.retryWhat = retryNone
	if m.waitToken == 0 {
		m.sendJoin(fx)
		return
	}
	m.waitThen = afterJoin // whatever the running callback was for, join next
}

// stop ends the member: what it owns is lost (when err is set) and nothing
// more is sent.
func (m *Machine) stop(fx *Effects, err error) {
	if m.phase == Stopped {
		return
	}
	if len(m.owned) > 0 {
		m.callback(fx, Lost, m.owned, false)
		m.owned = set{}
	}
	m.phase = Stopped
	m.err = err
	m.waitToken, m.revoking = 0, nil
	fx.cancel(TimerRevoke)
	for id, c := range m.commits {
		if !c.closing {
			fx.Commits = append(fx.Commits, CommitResult{Token: c.token, Err: ErrIllegalState})
		}
		delete(m.commits, id)
	}
	fx.cancel(TimerHeartbeat)
	fx.cancel(TimerSession)
	fx.cancel(TimerRetry)
	fx.Stopped, fx.Err = true, err
}

// OnResponse feeds the answer to request id (or the transport error that
// stands for it) into the machine.
func (m *Machine) OnResponse(now time.Time, id uint64, res any, err error, fx *Effects) {
	m.now = now
	if m.phase == Stopped || id == 0 {
		return
	}
	switch {
	case id == m.findID:
		m.findID = 0
		m.onFound(res, err, fx)
	case id == m.joinID:
		m.joinID = 0
		r, _ := res.(*pb.JoinGroupResponse)
		m.onJoin(r, err, fx)
	case id == m.metaID:
		m.metaID = 0
		r, _ := res.(*MetadataResponse)
		m.onMetadata(r, err, fx)
	case id == m.syncID:
		m.syncID = 0
		r, _ := res.(*pb.SyncGroupResponse)
		m.onSync(r, err, fx)
	case id == m.hbID:
		m.hbID = 0
		r, _ := res.(*pb.HeartbeatResponse)
		m.onHeartbeat(r, err, fx)
	case id == m.leaveID:
		m.leaveID = 0
		m.stop(fx, nil)
	case id == m.closingJoinID:
		m.closingJoinID = 0
		r, _ := res.(*pb.JoinGroupResponse)
		m.onClosingAnswer(r.GetErrorCode(), r.GetMemberId(), r.GetGenerationId(), err, fx)
	case id == m.closingSyncID:
		m.closingSyncID = 0
		r, _ := res.(*pb.SyncGroupResponse)
		m.onClosingAnswer(r.GetErrorCode(), m.memberID, m.generation, err, fx)
	default:
		if c, ok := m.commits[id]; ok {
			delete(m.commits, id)
			r, _ := res.(*pb.OffsetCommitResponse)
			m.onCommit(c, r, err, fx)
		}
	}
}

func (m *Machine) onFound(res any, err error, fx *Effects) {
	f, ok := res.(*CoordinatorFound)
	if err != nil || !ok {
		m.retryAfter(fx, retryDiscover)
		return
	}
	m.exclusive = f.Exclusive
	if m.phase == Closing {
		m.closeStep(fx)
		return
	}
	if m.resume == Stable && m.generation >= 0 {
		m.phase = Stable
		m.sendHeartbeat(fx)
		return
	}
	m.startJoin(fx)
}

// coordinatorMoved reports codes that send a member to find its coordinator.
func coordinatorMoved(code int16) bool {
	return code == kerr.NotCoordinator.Code || code == kerr.CoordinatorNotAvailable.Code
}

// fatalJoin lists the JoinGroup codes the member cannot recover from.
func fatalJoin(code int16) bool {
	switch code {
	case kerr.InconsistentGroupProtocol.Code, kerr.InvalidSessionTimeout.Code, kerr.InvalidGroupID.Code,
		kerr.GroupAuthorizationFailed.Code, kerr.GroupMaxSizeReached.Code, kerr.UnsupportedVersion.Code:
		return true
	}
	return false
}

func (m *Machine) onJoin(r *pb.JoinGroupResponse, err error, fx *Effects) {
	code := int16(r.GetErrorCode()) // 0 for a nil answer
	if err != nil || r == nil || coordinatorMoved(code) {
		m.answeredIfOwned(fx)
		m.rediscover(fx, Joining)
		return
	}
	switch {
	case code == 0:
	case code == kerr.MemberIDRequired.Code:
		m.answered(fx)
		m.memberID = r.GetMemberId()
		m.sendJoin(fx)
		return
	case code == kerr.UnknownMemberID.Code:
		m.resetAndRejoin(fx, false)
		return
	case code == kerr.RebalanceInProgress.Code:
		m.answered(fx)
		m.sendJoin(fx)
		return
	case code == kerr.FencedInstanceID.Code:
		m.stop(fx, fmt.Errorf("%w (join): %w", ErrFenced, kerr.FencedInstanceID))
		return
	case fatalJoin(code):
		m.stop(fx, &CodeError{Op: "join", Code: code})
		return
	default: // COORDINATOR_LOAD_IN_PROGRESS and anything unexpected
		m.answeredIfOwned(fx)
		m.phase = Joining
		m.retryAfter(fx, retryJoin)
		return
	}
	m.memberID = r.GetMemberId()
	m.generation = r.GetGenerationId()
	m.protocol = r.GetProtocolName()
	m.leader = r.GetLeader() == m.memberID
	m.answered(fx)
	m.armHeartbeat(fx)
	if m.leader && !r.GetSkipAssignment() {
		m.members = r.GetMembers()
	}
	if len(m.owned) > 0 && !m.Cooperative(m.protocol) {
		// Downgrade: kept through the join, but this generation is eager.
		m.phase = Downgrading
		revoked := m.owned
		m.owned = set{}
		m.revoke(fx, revoked, afterSync)
		return
	}
	m.assign(fx)
}

// answeredIfOwned re-arms the session timer after a failed join, counting
// conservatively from now.
func (m *Machine) answeredIfOwned(fx *Effects) {
	if len(m.owned) > 0 {
		fx.arm(TimerSession, m.cfg.SessionTimeout)
	}
}

// assign runs the leader's assignor (asking for metadata first when needed)
// and sends SyncGroup; a follower syncs straight away.
func (m *Machine) assign(fx *Effects) {
	if !m.leader || m.members == nil {
		m.sendSync(fx, nil)
		return
	}
	var missing []string
	for _, t := range m.subscribedTopics() {
		if _, ok := m.cfg.Partitions[t]; !ok {
			missing = append(missing, t)
		}
	}
	m.metadataTopics = missing
	if len(missing) == 0 {
		m.sendSync(fx, m.balance(nil))
		return
	}
	m.phase = Assigning
	m.metaID = m.send(fx, &MetadataRequest{Topics: missing})
}

// subscribedTopics is the union of the members' subscriptions, sorted.
func (m *Machine) subscribedTopics() []string {
	var ts []string
	for _, jm := range m.members {
		s, err := assignor.DecodeSubscription(jm.GetMetadata())
		if err != nil {
			continue
		}
		ts = append(ts, s.Topics...)
	}
	slices.Sort(ts)
	return slices.Compact(ts)
}

func (m *Machine) onMetadata(r *MetadataResponse, err error, fx *Effects) {
	if m.phase == Stable {
		m.onMetadataCheck(r, err, fx)
		return
	}
	if m.phase != Assigning {
		return
	}
	if err != nil || r == nil {
		m.retryAfter(fx, retryMetadata)
		return
	}
	m.assignedFrom = map[string]int32{}
	for t, n := range r.Partitions {
		if _, sized := m.cfg.Partitions[t]; !sized {
			m.assignedFrom[t] = n
		}
	}
	m.sendSync(fx, m.balance(r.Partitions))
}

// onMetadataCheck: the leader's periodic look at the partition counts it
// assigned from. A changed count (a topic grew, or appeared) means a new
// assignment: rejoin, as Kafka's leader does.
func (m *Machine) onMetadataCheck(r *MetadataResponse, err error, fx *Effects) {
	if err == nil && r != nil && m.leader {
		for t, n := range r.Partitions {
			if old, ok := m.assignedFrom[t]; ok && old != n || !ok && n > 0 && m.subscribedMissing(t) {
				m.rejoinReason = fmt.Sprintf("partitions of %s changed from %d to %d", t, old, n)
				m.startJoin(fx)
				return
			}
		}
	}
	if m.leader && len(m.metadataTopics) > 0 {
		fx.arm(TimerMetadata, m.cfg.MetadataMaxAge)
	}
}

// subscribedMissing reports whether t was subscribed but unknown (so
// unassigned) when the leader assigned.
func (m *Machine) subscribedMissing(t string) bool {
	return slices.Contains(m.metadataTopics, t) && m.assignedFrom[t] == 0
}

// balance runs the selected assignor over the members' subscriptions.
func (m *Machine) balance(extra map[string]int32) []*pb.SyncGroupAssignment {
	var bal assignor.Balancer
	for _, b := range m.cfg.Balancers {
		if b.ProtocolName() == m.protocol {
			bal = b
		}
	}
	if bal == nil {
		return nil // cannot happen: the group selects only protocols every member listed
	}
	counts := map[string]int32{}
	for t, n := range extra {
		counts[t] = n
	}
	for t, n := range m.cfg.Partitions {
		counts[t] = n
	}
	in := make([]assignor.Member, 0, len(m.members))
	var d assignor.Decoder
	for _, jm := range m.members {
		var s assignor.Subscription
		if err := d.DecodeSubscription(jm.GetMetadata(), &s); err != nil {
			s = assignor.Subscription{} // an undecodable member gets nothing
		}
		in = append(in, assignor.Member{ID: jm.GetMemberId(), InstanceID: jm.GetGroupInstanceId(), Subscription: s})
	}
	plan := bal.Balance(in, counts)
	enc := plan.Encode()
	out := make([]*pb.SyncGroupAssignment, plan.Len())
	for i := range out {
		out[i] = &pb.SyncGroupAssignment{MemberId: plan.MemberID(i), Assignment: enc[i]}
	}
	return out
}

func (m *Machine) sendSync(fx *Effects, assignments []*pb.SyncGroupAssignment) {
	m.phase = Syncing
	m.retryWhat = retryNone
	fx.cancel(TimerSession)
	req := &pb.SyncGroupRequest{
		GroupId:      m.cfg.Group,
		GenerationId: m.generation,
		MemberId:     m.memberID,
		Assignments:  assignments,
	}
	pt, pn := "consumer", m.protocol
	req.ProtocolType, req.ProtocolName = &pt, &pn
	if m.cfg.InstanceID != "" {
		req.GroupInstanceId = &m.cfg.InstanceID
	}
	m.members = nil
	m.syncID = m.send(fx, req)
}

func (m *Machine) onSync(r *pb.SyncGroupResponse, err error, fx *Effects) {
	code := int16(r.GetErrorCode()) // 0 for a nil answer
	if err != nil || r == nil || coordinatorMoved(code) {
		m.answeredIfOwned(fx)
		m.rediscover(fx, Joining)
		return
	}
	switch {
	case code == 0:
	case code == kerr.RebalanceInProgress.Code:
		m.answered(fx)
		m.startJoin(fx)
		return
	case code == kerr.UnknownMemberID.Code:
		m.resetAndRejoin(fx, false)
		return
	case code == kerr.IllegalGeneration.Code:
		m.resetAndRejoin(fx, true)
		return
	case code == kerr.FencedInstanceID.Code:
		m.stop(fx, fmt.Errorf("%w (sync): %w", ErrFenced, kerr.FencedInstanceID))
		return
	default:
		m.answeredIfOwned(fx)
		m.phase = Joining
		m.retryAfter(fx, retryJoin)
		return
	}
	m.answered(fx)
	a, derr := assignor.DecodeAssignment(r.GetAssignment())
	if derr != nil && len(r.GetAssignment()) > 0 {
		// Not an assignment we can read: join again (Kafka requests a rejoin).
		m.phase = Joining
		m.retryAfter(fx, retryJoin)
		return
	}
	m.phase = Stable
	if m.leader && len(m.metadataTopics) > 0 {
		fx.arm(TimerMetadata, m.cfg.MetadataMaxAge)
	}
	next := setOf(a.Topics)
	subscribed := map[string]bool{}
	for _, t := range m.cfg.Topics {
		subscribed[t] = true
	}
	for tp := range next {
		if !subscribed[tp.Topic] {
			delete(next, tp) // never take a topic this member does not subscribe to
		}
	}
	revoked := m.owned.minus(next)
	added := next.minus(m.owned)
	m.owned = next
	if len(revoked) > 0 {
		// Cooperative: give up what moved, then join the follow-up round.
		m.phase = Preparing
		m.revoke(fx, revoked, afterJoin)
		m.followUp = true
	}
	m.callback(fx, Assigned, added, false)
	if m.phase == Stable && m.rejoinReason != "" {
		m.startJoin(fx) // EnforceRebalance during the rebalance
	}
}

func (m *Machine) armHeartbeat(fx *Effects) {
	fx.arm(TimerHeartbeat, m.cfg.HeartbeatInterval)
}

func (m *Machine) heartbeats() bool {
	return m.generation >= 0 && m.memberID != "" && m.phase != Joining && m.phase != Discovering &&
		m.phase != Stopped && m.phase != Idle
}

func (m *Machine) sendHeartbeat(fx *Effects) {
	if m.hbID != 0 || !m.heartbeats() {
		return
	}
	req := &pb.HeartbeatRequest{GroupId: m.cfg.Group, GenerationId: m.generation, MemberId: m.memberID}
	if m.cfg.InstanceID != "" {
		req.GroupInstanceId = &m.cfg.InstanceID
	}
	m.hbGeneration = m.generation
	m.hbID = m.send(fx, req)
}

func (m *Machine) onHeartbeat(r *pb.HeartbeatResponse, err error, fx *Effects) {
	if !m.heartbeats() {
		return
	}
	if err != nil || r == nil {
		if m.phase == Stable {
			m.rediscover(fx, Stable)
		} else {
			m.armHeartbeat(fx) // a closing member too: its revoke may still run
		}
		return
	}
	code := int16(r.GetErrorCode())
	if m.phase == Closing {
		// The member is leaving either way; while it is still in the group
		// its heartbeats keep what it revokes from being handed out.
		switch {
		case code == 0, code == kerr.RebalanceInProgress.Code, coordinatorMoved(code), code == kerr.CoordinatorLoadInProgress.Code,
			m.hbGeneration != m.generation: // an answer about the generation it left
			m.armHeartbeat(fx)
		case code == kerr.IllegalGeneration.Code && m.closingPrevGen >= 0:
			// The generation its join formed was lost with the coordinator
			// that formed it: the member is still in the one before.
			m.generation, m.closingPrevGen = m.closingPrevGen, -1
			m.armHeartbeat(fx)
		}
		return
	}
	stale := m.hbGeneration != m.generation
	switch {
	case code == 0:
		m.answered(fx)
		m.armHeartbeat(fx)
	case code == kerr.RebalanceInProgress.Code:
		m.answered(fx)
		if m.phase == Stable {
			m.startJoin(fx)
		} else {
			m.armHeartbeat(fx)
		}
	case stale:
		m.armHeartbeat(fx) // an answer about an older generation
	case code == kerr.IllegalGeneration.Code:
		m.resetAndRejoin(fx, true)
	case code == kerr.UnknownMemberID.Code:
		m.resetAndRejoin(fx, false)
	case code == kerr.FencedInstanceID.Code:
		m.stop(fx, fmt.Errorf("%w (heartbeat): %w", ErrFenced, kerr.FencedInstanceID))
	case coordinatorMoved(code):
		if m.phase == Stable {
			m.rediscover(fx, Stable)
		} else {
			m.armHeartbeat(fx)
		}
	case code == kerr.GroupAuthorizationFailed.Code:
		m.stop(fx, &CodeError{Op: "heartbeat", Code: code})
	default: // COORDINATOR_LOAD_IN_PROGRESS and anything unexpected: try again
		m.retryAfter(fx, retryHeartbeat)
	}
}

// OnTimer feeds a timer fire into the machine.
func (m *Machine) OnTimer(now time.Time, kind TimerKind, fx *Effects) {
	m.now = now
	if m.phase == Stopped {
		return
	}
	switch kind {
	case TimerHeartbeat:
		m.sendHeartbeat(fx)
	case TimerSession:
		m.onSessionExpired(fx)
	case TimerRetry:
		what := m.retryWhat
		m.retryWhat = retryNone
		switch what {
		case retryDiscover:
			m.discover(fx)
		case retryJoin:
			if m.phase == Joining {
				m.sendJoin(fx)
			}
		case retryMetadata:
			if m.phase == Assigning {
				m.assign(fx)
			}
		case retryHeartbeat:
			m.sendHeartbeat(fx)
		}
	case TimerRevoke:
		m.onRevokeTimeout(fx)
	case TimerMetadata:
		if m.phase == Stable && m.leader && m.metaID == 0 && len(m.metadataTopics) > 0 {
			m.metaID = m.send(fx, &MetadataRequest{Topics: m.metadataTopics})
		}
	}
}

// onSessionExpired: no answer for a session timeout. Unless a join or sync
// is waiting for its answer (the coordinator keeps such a member), the
// member may have been removed and its partitions given to others.
func (m *Machine) onSessionExpired(fx *Effects) {
	if m.joinID != 0 || m.syncID != 0 || m.phase == Closing {
		return
	}
	if m.generation < 0 && len(m.owned) == 0 {
		return
	}
	m.reset(fx, m.cfg.InstanceID != "")
	if m.phase == Discovering {
		m.resume = Joining
		return
	}
	m.phase = Preparing
	m.retryWhat = retryNone
	if m.waitToken == 0 {
		m.discover(fx)
		m.resume = Joining
		return
	}
	m.waitThen = afterJoin
}

// OnCallbackDone reports that the callback with token returned.
func (m *Machine) OnCallbackDone(now time.Time, token uint64, fx *Effects) {
	m.now = now
	if m.phase == Stopped || token == 0 || token != m.waitToken {
		return
	}
	m.waitToken = 0
	if m.revoking != nil {
		m.revoking = nil
		fx.cancel(TimerRevoke)
	}
	then := m.waitThen
	m.waitThen = afterNothing
	switch then {
	case afterJoin:
		if m.phase == Discovering {
			m.resume = Joining
			return
		}
		m.sendJoin(fx)
	case afterSync:
		m.assign(fx)
	case afterClose:
		m.closeStep(fx)
	}
}

// Commit starts a commit of offsets (topic -> partition -> offset), or of the
// marked offsets when offsets is nil. The result comes back in a
// CommitResult with token; an error returned here means nothing was sent.
func (m *Machine) Commit(now time.Time, token uint64, offsets map[string]map[int32]int64, fx *Effects) error {
	m.now = now
	switch {
	case m.phase == Stopped || m.phase == Closing || m.phase == Idle:
		return ErrIllegalState
	case m.phase == Joining || m.phase == Assigning || m.phase == Downgrading || m.phase == Syncing:
		return ErrRebalanceInProgress
	case m.generation < 0:
		return ErrRebalanceInProgress // joining: nothing to commit in
	case m.phase == Discovering:
		return ErrCoordinatorNotAvailable
	}
	if offsets == nil {
		offsets = m.markedOffsets()
	}
	req := m.commitRequest(offsets)
	if len(req.Topics) == 0 {
		fx.Commits = append(fx.Commits, CommitResult{Token: token})
		return nil
	}
	id := m.send(fx, req)
	m.commits[id] = commitInFlight{token: token, generation: m.generation}
	return nil
}

// Mark records an offset to commit with the next Commit(nil) or at Close.
func (m *Machine) Mark(topic string, partition int32, offset int64) {
	m.marks[TopicPartition{topic, partition}] = offset
}

func (m *Machine) markedOffsets() map[string]map[int32]int64 {
	out := map[string]map[int32]int64{}
	for tp, o := range m.marks {
		if out[tp.Topic] == nil {
			out[tp.Topic] = map[int32]int64{}
		}
		out[tp.Topic][tp.Partition] = o
	}
	return out
}

func (m *Machine) commitRequest(offsets map[string]map[int32]int64) *pb.OffsetCommitRequest {
	req := &pb.OffsetCommitRequest{GroupId: m.cfg.Group, GenerationId: m.generation, MemberId: m.memberID, RetentionTimeMs: -1}
	if m.cfg.InstanceID != "" {
		req.GroupInstanceId = &m.cfg.InstanceID
	}
	topics := make([]string, 0, len(offsets))
	for t := range offsets {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	for _, t := range topics {
		ps := offsets[t]
		if len(ps) == 0 {
			continue
		}
		ot := &pb.OffsetCommitTopic{Name: t}
		parts := make([]int32, 0, len(ps))
		for p := range ps {
			parts = append(parts, p)
		}
		slices.Sort(parts)
		for _, p := range parts {
			ot.Partitions = append(ot.Partitions, &pb.OffsetCommitPartition{Partition: p, Offset: ps[p], LeaderEpoch: -1})
		}
		req.Topics = append(req.Topics, ot)
	}
	return req
}

func (m *Machine) onCommit(c commitInFlight, r *pb.OffsetCommitResponse, err error, fx *Effects) {
	res := m.commitOutcome(c, r, err, fx)
	if !c.closing {
		fx.Commits = append(fx.Commits, CommitResult{Token: c.token, Err: res})
	} else {
		m.closeStep(fx)
	}
}

func (m *Machine) commitOutcome(c commitInFlight, r *pb.OffsetCommitResponse, err error, fx *Effects) error {
	if err != nil || r == nil {
		if m.phase == Stable {
			m.rediscover(fx, Stable)
		}
		return fmt.Errorf("%w: %v", ErrCoordinatorNotAvailable, err)
	}
	var code int16
	for _, t := range r.GetTopics() {
		for _, p := range t.GetPartitions() {
			if p.GetErrorCode() != 0 && code == 0 {
				code = int16(p.GetErrorCode())
			}
		}
	}
	if code == 0 {
		m.answered(fx)
		return nil
	}
	current := c.generation == m.generation && !c.closing
	switch {
	case code == kerr.RebalanceInProgress.Code:
		if current && m.phase == Stable {
			m.startJoin(fx)
		}
		return fmt.Errorf("%w: %w", ErrRebalanceInProgress, kerr.RebalanceInProgress)
	case code == kerr.IllegalGeneration.Code || code == kerr.UnknownMemberID.Code:
		if current && m.phase == Stable {
			m.resetAndRejoin(fx, code == kerr.IllegalGeneration.Code)
		}
		return fmt.Errorf("%w: %w", ErrCommitFailed, kerr.ErrorForCode(code))
	case code == kerr.FencedInstanceID.Code:
		if !c.closing {
			m.stop(fx, fmt.Errorf("%w (commit): %w", ErrFenced, kerr.FencedInstanceID))
		}
		return fmt.Errorf("%w: %w", ErrFenced, kerr.FencedInstanceID)
	case coordinatorMoved(code):
		if m.phase == Stable {
			m.rediscover(fx, Stable)
		}
		return fmt.Errorf("%w: %w", ErrCoordinatorNotAvailable, kerr.ErrorForCode(code))
	}
	return &CodeError{Op: "commit", Code: code}
}

// EnforceRebalance asks for a rebalance without revoking what a cooperative
// member owns (KIP-568). reason goes with the JoinGroup.
func (m *Machine) EnforceRebalance(now time.Time, reason string, fx *Effects) error {
	m.now = now
	switch {
	case m.phase == Stopped || m.phase == Closing || m.phase == Idle:
		return ErrIllegalState
	case m.phase.rebalancing() || m.followUp:
		return ErrRebalanceInProgress
	case m.generation < 0:
		return nil // not in an active group: already rejoining
	case m.phase == Discovering:
		return ErrCoordinatorNotAvailable
	}
	if reason == "" {
		reason = "enforced rebalance"
	}
	m.rejoinReason = reason
	m.startJoin(fx)
	return nil
}

// Close revokes what the member owns, commits the marked offsets, and leaves
// the group (a static member does not leave, so that it can come back within
// its session timeout). The machine reports Stopped when done.
func (m *Machine) Close(now time.Time, fx *Effects) {
	m.now = now
	switch m.phase {
	case Stopped, Closing:
		return
	case Idle:
		m.stop(fx, nil)
		return
	}
	m.phase = Closing
	// A join or sync in flight is answered still: the coordinator counts the
	// member in the generation it forms, and the member heartbeats in it
	// until it leaves (onClosingAnswer).
	m.closingJoinID, m.closingSyncID, m.closingPrevGen = m.joinID, m.syncID, -1
	m.joinID, m.syncID, m.metaID, m.findID = 0, 0, 0, 0
	// Heartbeats go on while the revoke callback runs, so that the session
	// does not expire (and the partitions move) before it returned.
	fx.cancel(TimerRetry)
	fx.cancel(TimerSession)
	m.closeStage = closeRevoke
	if m.waitToken != 0 {
		m.waitThen = afterClose // the running callback finishes first
		return
	}
	m.closeStep(fx)
}

// onClosingAnswer takes the answer to a JoinGroup or SyncGroup that was in
// flight when Close began: a successful one puts the member in the
// generation the coordinator formed, so that its heartbeats, which keep
// what it revokes from being handed out, are accepted until it leaves. It
// takes nothing that was assigned: the member leaves.
func (m *Machine) onClosingAnswer(code int32, memberID string, generation int32, err error, fx *Effects) {
	if err != nil || code != 0 || m.generation < 0 && len(m.owned) == 0 && m.revoking == nil {
		return
	}
	if generation != m.generation {
		m.closingPrevGen = m.generation
	}
	m.memberID, m.generation = memberID, generation
	if m.closeStage != closeDone && m.heartbeats() && m.hbID == 0 {
		m.armHeartbeat(fx)
	}
}

// closeStage is how far Close got.
type closeStage uint8

const (
	closeRevoke closeStage = iota
	closeCommit
	closeLeave
	closeDone
)

// closeStep runs the next step of Close: revoke, commit the marks, leave.
func (m *Machine) closeStep(fx *Effects) {
	switch m.closeStage {
	case closeRevoke:
		m.closeStage = closeCommit
		if len(m.owned) > 0 {
			kind := Revoked
			if m.generation < 0 {
				kind = Lost // the generation is gone: they may be someone else's
			}
			owned := m.owned
			m.owned = set{}
			if kind == Revoked {
				m.revoke(fx, owned, afterClose)
			} else {
				m.wait(m.callback(fx, kind, owned, true), afterClose)
			}
			return
		}
		fallthrough
	case closeCommit:
		m.closeStage = closeLeave
		if m.generation >= 0 && m.memberID != "" && len(m.marks) > 0 {
			id := m.send(fx, m.commitRequest(m.markedOffsets()))
			m.commits[id] = commitInFlight{generation: m.generation, closing: true}
			return
		}
		fallthrough
	case closeLeave:
		m.closeStage = closeDone
		fx.cancel(TimerHeartbeat)
		m.hbID = 0
		if m.cfg.InstanceID == "" && m.memberID != "" {
			reason := "member closed"
			m.leaveID = m.send(fx, &pb.LeaveGroupRequest{GroupId: m.cfg.Group, Members: []*pb.MemberIdentity{{MemberId: m.memberID, Reason: &reason}}})
			return
		}
		fallthrough
	default:
		m.stop(fx, nil)
	}
}
