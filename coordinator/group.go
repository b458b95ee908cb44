package coordinator

import (
	"hash/maphash"
	"slices"
	"time"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// State is a group state (Kafka's GroupState).
type State uint8

const (
	Empty State = iota
	PreparingRebalance
	CompletingRebalance
	Stable
	Dead
)

var stateNames = [...]string{"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"}

// String returns the wire name used by DescribeGroups and ListGroups.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "Unknown"
}

// validPrevious lists, per target state, the states it may be entered from.
var validPrevious = [...][]State{
	Empty:               {PreparingRebalance},
	PreparingRebalance:  {Stable, CompletingRebalance, Empty},
	CompletingRebalance: {PreparingRebalance},
	Stable:              {CompletingRebalance},
	Dead:                {Empty, PreparingRebalance, CompletingRebalance, Stable, Dead},
}

type member struct {
	// The fields a heartbeat reads and writes come first: a member is 192
	// bytes, a size class whose objects start on a 64-byte boundary, so
	// the id's header, the session's end and the session timeout share one
	// cache line (with 100,000 members a heartbeat's member is rarely in
	// cache, and each line it touches is a miss).
	id string
	// sessionUntil is when the member's session ends, in nanoseconds since
	// the group's epoch: its timer fires then or earlier (sessions.go); 0
	// when it has no session timer.
	sessionUntil int64
	// The timeouts are the JoinGroup's, in milliseconds as Kafka sends
	// them (sessionTimeout and rebalanceTimeout read them).
	sessionMs, rebalanceMs int32

	instanceID *string
	clientID   string
	clientHost string
	protocols  []*pb.Protocol
	assignment []byte

	joinReply ReplyTo // parked JoinGroup, nil when not awaiting join
	syncReply ReplyTo // parked SyncGroup, nil when not awaiting sync

	// Ownership guard (guard.go): the generation in which the member was
	// sent its SyncGroup answer, the assignment it was answered (nil: none
	// since it joined or the group was loaded) and the generation in which
	// partitions withheld from others wait for its release (0: none).
	answered  []byte
	syncedGen int32
	blocksGen int32

	// The small fields last, packed: every member of every group has them.
	joinVersion int32
	isNew       bool
}

func (m *member) sessionTimeout() time.Duration   { return msDuration(m.sessionMs) }
func (m *member) rebalanceTimeout() time.Duration { return msDuration(m.rebalanceMs) }

func (m *member) setTimeouts(session, rebalance time.Duration) {
	m.sessionMs, m.rebalanceMs = durationMs(session), durationMs(rebalance)
}

// memberIndex is a group's members, sorted by a hash of their ids: a lookup
// is a binary search over the hashes, which lie together in one array, and
// then one comparison of ids. It costs 16 bytes per member where a map cost
// about 50 (every idle member of every group pays it); searching by the ids
// themselves would touch another member's id at every step. A join or a
// leave moves the array's tail (160 KB at 10,000 members), little next to
// the rebalance it starts, which writes every member's record. Nothing
// iterates the index (join order is Group.order), so its order, which
// depends on the process's hash seed, is never seen.
type memberIndex struct{ byHash []indexEntry }

type indexEntry struct {
	hash uint64
	m    *member
}

var memberSeed = maphash.MakeSeed()

// weakMemberHash, set by tests, makes ids collide often (no test that
// sets it may run in parallel with another).
var weakMemberHash bool

func memberHash(id string) uint64 {
	if weakMemberHash {
		return uint64(len(id) % 3)
	}
	return maphash.String(memberSeed, id)
}

// find returns the position of the member with id, or where one would go.
func (x *memberIndex) find(id string) (int, bool) { return x.search(memberHash(id), id) }

// search is find for an id whose hash is h.
func (x *memberIndex) search(h uint64, id string) (int, bool) {
	lo, hi := 0, len(x.byHash)
	for lo < hi {
		if mid := int(uint(lo+hi) >> 1); x.byHash[mid].hash < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	for i := lo; i < len(x.byHash) && x.byHash[i].hash == h; i++ {
		if x.byHash[i].m.id == id {
			return i, true
		}
	}
	return lo, false
}

// get returns the member with id, nil when there is none.
func (x *memberIndex) get(id string) *member {
	if i, ok := x.find(id); ok {
		return x.byHash[i].m
	}
	return nil
}

// put adds m under its id, replacing a member with the same id.
func (x *memberIndex) put(m *member) {
	h := memberHash(m.id)
	i, ok := x.search(h, m.id)
	if ok {
		x.byHash[i].m = m
		return
	}
	x.byHash = slices.Insert(x.byHash, i, indexEntry{h, m})
}

func (x *memberIndex) del(id string) {
	if i, ok := x.find(id); ok {
		x.byHash = slices.Delete(x.byHash, i, i+1)
	}
}

func (x *memberIndex) len() int { return len(x.byHash) }

func (m *member) metadata(protocol string) []byte {
	for _, p := range m.protocols {
		if p.GetName() == protocol {
			return p.GetMetadata()
		}
	}
	return nil
}

// shareProtocols returns the protocols of another member when they are
// byte for byte the same as protocols, and protocols otherwise. Members of
// one group usually send the same protocols (same assignors, same
// subscription, no owned partitions in eager groups), and each idle member
// would otherwise hold its own copy. Protocols are never changed in place,
// so members can share them; the newest and the first member are compared,
// which finds the common set without a scan of the group.
func (g *Group) shareProtocols(protocols []*pb.Protocol) []*pb.Protocol {
	if len(g.order) == 0 || len(protocols) == 0 {
		return protocols
	}
	for _, o := range [2]*member{g.order[len(g.order)-1], g.order[0]} {
		if o.matches(protocols) {
			return o.protocols
		}
	}
	return protocols
}

// matches is Kafka's byte-exact, order-sensitive protocol comparison.
func (m *member) matches(protocols []*pb.Protocol) bool {
	if len(protocols) != len(m.protocols) {
		return false
	}
	for i, p := range protocols {
		q := m.protocols[i]
		if p.GetName() != q.GetName() || string(p.GetMetadata()) != string(q.GetMetadata()) {
			return false
		}
	}
	return true
}

type topicPartition struct {
	topic     string
	partition int32
}

type offsetEntry struct {
	offset      int64
	leaderEpoch int32
	metadata    string
	commitMs    int64
	expireMs    int64 // -1: follows the group's retention rules
}

// initialDelay is the state of Kafka's InitialDelayedJoin.
type initialDelay struct {
	active    bool
	delay     time.Duration
	remaining time.Duration
}

// Group is one consumer group's state machine. It is not safe for concurrent
// use; its owner serialises calls.
type Group struct {
	id  string
	cfg *Config

	// epoch is the clock reading member session ends count from
	// (sessions.go): the group's creation.
	epoch time.Time

	state     State
	stateTime time.Time

	protocolType string // "" when none
	protocolName *string
	generation   int32
	// floor is the highest generation reserved in the store: the next join
	// phase continues above it (see GroupRecord.generation_floor).
	floor  int32
	leader string // "" when none
	// rebalancePending: restored from a record written after a membership
	// change; Start rebalances.
	rebalancePending bool

	// consumer, when set, is the consumer group (KIP-848) this group id is:
	// it serves the members, this Group keeps the offsets (consumer_host.go).
	consumer *ConsumerGroup
	// converted holds, after a downgrade and until the next generation
	// forms, the member epoch of each member that was behind the
	// generation: its Heartbeat and OffsetCommit count it as the
	// generation (consumer_migrate.go). nil when none.
	converted map[string]int32

	members    memberIndex
	order      []*member // join order; drives leader election and listings
	static     map[string]string
	pending    map[string]struct{}
	awaitJoin  int
	protoCount map[string]int
	pendSync   map[string]struct{} // nil when none is pending

	newMemberAdded bool
	initial        initialDelay
	joinArmed      bool
	syncArmed      bool
	syncGen        int32

	subscribed      map[string]struct{}
	subscribedKnown bool

	offsets map[topicPartition]offsetEntry

	// takeover holds, per restored member, the end of its takeover window
	// (takeover.go); covered caches the partitions the current generation's
	// assignments cover, per topic, for the window's partition check.
	takeover        map[string]time.Time
	takeoverRejoins int
	covered         map[string]map[int32]bool

	// Sessions through takeovers (liveness.go): what the takeover knew, the
	// restored members not heard from since, the silent members as last
	// written (sorted by id), and whether the periodic check is armed.
	takeoverSessions *TakeoverSessions
	restored         map[string]restoredSession
	silent           []silentMember
	silentDirty      bool
	sessionsArmed    bool
	sessionsAt       int64 // when the armed check runs, since the epoch

	nextToken uint64
	inflight  map[uint64]persistOp
	deleting  bool // a group deletion is being written

	guard      guardState
	guardStats GuardStats
	// mixedGen is the generation the coordinator computed the assignment of
	// (mixed-assignor groups, mixed.go).
	mixedGen int32
}

// New returns an Empty group at generation 0.
func New(id string, cfg *Config, now time.Time) *Group {
	return &Group{
		id:         id,
		cfg:        cfg,
		epoch:      now,
		state:      Empty,
		stateTime:  now,
		static:     map[string]string{},
		pending:    map[string]struct{}{},
		protoCount: map[string]int{},
		offsets:    map[topicPartition]offsetEntry{},
		inflight:   map[uint64]persistOp{},
	}
}

// Restore rebuilds a group from its durable records, as Kafka does on load:
// Stable with the persisted generation if it has members, Empty otherwise.
// Call Start afterwards to arm its timers.
func Restore(cfg *Config, rec *pb.GroupRecord, offsets []*pb.OffsetRecord, now time.Time) *Group {
	id := rec.GetGroupId()
	g := New(id, cfg, now)
	g.protocolType = rec.GetProtocolType()
	g.generation = rec.GetGeneration()
	g.floor = max(rec.GetGenerationFloor(), rec.GetGeneration())
	g.rebalancePending = rec.GetRebalancePending()
	if rec.ProtocolName != nil {
		name := rec.GetProtocolName()
		g.protocolName = &name
	}
	if ts := rec.GetStateTimestampMs(); ts > 0 {
		g.stateTime = time.UnixMilli(ts)
	}
	for _, mr := range rec.GetMembers() {
		m := &member{
			id:          mr.GetMemberId(),
			instanceID:  cloneOpt(mr.GroupInstanceId),
			clientID:    mr.GetClientId(),
			clientHost:  mr.GetClientHost(),
			rebalanceMs: mr.GetRebalanceTimeoutMs(),
			sessionMs:   mr.GetSessionTimeoutMs(),
			protocols:   []*pb.Protocol{{Name: g.protocolNameOr(""), Metadata: mr.GetSubscription()}},
			assignment:  mr.GetAssignment(),
		}
		if m.assignment == nil {
			// An empty assignment decodes as nil; a Stable member has one.
			m.assignment = []byte{}
		}
		if g.members.get(m.id) != nil || m.id == "" {
			continue
		}
		g.addMember(m)
	}
	if rec.Leader != nil {
		if g.members.get(rec.GetLeader()) != nil {
			g.leader = rec.GetLeader()
		}
	}
	if g.members.len() > 0 && g.protocolName != nil {
		g.state = Stable
		g.computeSubscribed()
	} else {
		// A record without members (or without a protocol) loads as Empty.
		for len(g.order) > 0 {
			g.removeMember(g.order[0], nil)
		}
		g.protocolName = nil
	}
	for _, o := range offsets {
		g.offsets[topicPartition{o.GetTopic(), o.GetPartition()}] = offsetEntry{
			offset:      o.GetOffset(),
			leaderEpoch: o.GetLeaderEpoch(),
			metadata:    o.GetMetadata(),
			commitMs:    o.GetCommitTimestampMs(),
			expireMs:    o.GetExpireTimestampMs(),
		}
	}
	g.openTakeoverWindow(now)
	return g
}

// Start arms the timers of a new or restored group: the periodic offset
// check and a session timer for every member, which after SetTakeover ends
// when the member's session would have (liveness.go), and otherwise runs a
// full session timeout. A restored group larger than group.max.size starts
// a rebalance.
func (g *Group) Start(now time.Time, fx *Effects) {
	fx.arm(TimerOffsetExpiry, "", g.cfg.OffsetsRetentionCheckInterval)
	for _, m := range g.order {
		g.armSession(now, m, g.takeoverSession(now, m), fx)
	}
	if len(g.restored) > 0 {
		g.armSessionCheck(now, g.sinceEpoch(now)+int64(firstCheckAfterTakeover), fx)
	}
	g.takeoverSessions = nil
	if (g.members.len() > g.cfg.maxSize() || g.rebalancePending) && g.state == Stable {
		g.prepareRebalance(now, fx)
	}
	g.rebalancePending = false
}

// ID returns the group id.
func (g *Group) ID() string { return g.id }

// State returns the current state.
func (g *Group) State() State { return g.state }

// Generation returns the current generation.
func (g *Group) Generation() int32 { return g.generation }

// ProtocolType returns the group's protocol type ("" when it has none).
func (g *Group) ProtocolType() string { return g.protocolType }

// Leader returns the leader's member id ("" when there is none).
func (g *Group) Leader() string { return g.leader }

// NumMembers returns the number of members (pending ids excluded).
func (g *Group) NumMembers() int { return g.members.len() }

// StableAssignments calls fn with each member's id and assignment, in join
// order, while the group is Stable (what Describe answers of them), and
// with none in any other state. The assignment is shared and never changed
// in place.
func (g *Group) StableAssignments(fn func(id string, assignment []byte)) {
	if g.state != Stable {
		return
	}
	for _, m := range g.order {
		fn(m.id, m.assignment)
	}
}

// ProtocolName returns the selected protocol while the group is Stable
// (Describe's ProtocolData), and "" in any other state.
func (g *Group) ProtocolName() string {
	if g.state != Stable {
		return ""
	}
	return g.protocolNameOr("")
}

// MemberIDs returns the member ids in join order.
func (g *Group) MemberIDs() []string {
	ids := make([]string, len(g.order))
	for i, m := range g.order {
		ids[i] = m.id
	}
	return ids
}

// HasMember reports whether id is a member of the group.
func (g *Group) HasMember(id string) bool { return g.members.get(id) != nil }

// HasPending reports whether id is a pending (MEMBER_ID_REQUIRED) member id.
func (g *Group) HasPending(id string) bool {
	_, ok := g.pending[id]
	return ok
}

func (g *Group) protocolNameOr(def string) string {
	if g.protocolName == nil {
		return def
	}
	return *g.protocolName
}

func (g *Group) transition(to State, now time.Time) {
	if !slices.Contains(validPrevious[to], g.state) {
		panic("coordinator: illegal transition " + g.state.String() + " -> " + to.String())
	}
	g.state = to
	g.stateTime = now
	if to != Stable {
		g.takeover, g.covered = nil, nil
	}
}

// canRebalance is Kafka's canRebalance.
func (g *Group) canRebalance() bool {
	return g.state == Stable || g.state == CompletingRebalance || g.state == Empty
}

func (g *Group) rebalanceTimeout() time.Duration {
	var d time.Duration
	for _, m := range g.order {
		d = max(d, m.rebalanceTimeout())
	}
	return d
}

func (g *Group) hasAllMembersJoined() bool {
	return g.members.len() == g.awaitJoin && len(g.pending) == 0
}

// anyMemberJoined serves the early-handout seeded bug only.
func (g *Group) anyMemberJoined() bool { return g.awaitJoin > 0 }

// addMember is Kafka's group.add (the caller sets the protocol type for the
// first member): leader if there is none, protocol counters, pending id and static mapping.
func (g *Group) addMember(m *member) {
	if g.leader == "" {
		g.leader = m.id
	}
	m.protocols = g.shareProtocols(m.protocols)
	g.members.put(m)
	g.order = append(g.order, m)
	for _, p := range m.protocols {
		g.protoCount[p.GetName()]++
	}
	delete(g.pending, m.id)
	if m.instanceID != nil {
		g.static[*m.instanceID] = m.id
	}
	if m.joinReply != nil {
		g.awaitJoin++
	}
}

// removeMember is Kafka's group.remove plus removeStaticMember: it forgets the
// member, cancels its liveness timer and answers a parked SyncGroup with
// REBALANCE_IN_PROGRESS (the answer the member would get from the rebalance
// its removal starts). A parked JoinGroup must be answered by the caller.
func (g *Group) removeMember(m *member, fx *Effects) {
	delete(g.converted, m.id)
	if fx != nil {
		g.cancelSession(m, fx)
		if m.syncReply != nil {
			fx.reply(m.syncReply, syncError(ErrRebalanceInProgress))
		}
	}
	m.syncReply = nil
	if m.joinReply != nil {
		g.awaitJoin--
		m.joinReply = nil
	}
	for _, p := range m.protocols {
		g.decProto(p.GetName())
	}
	g.guardRemoved(m)
	g.members.del(m.id)
	g.closeTakeover(m.id)
	g.covered = nil
	if i := slices.Index(g.order, m); i >= 0 {
		g.order = slices.Delete(g.order, i, i+1)
	}
	if m.instanceID != nil && g.static[*m.instanceID] == m.id {
		delete(g.static, *m.instanceID)
	}
	g.removePendingSync(m.id, fx)
	if g.leader == m.id {
		g.leader = ""
		if len(g.order) > 0 {
			g.leader = g.order[0].id
		}
	}
}

func (g *Group) decProto(name string) {
	if n := g.protoCount[name] - 1; n > 0 {
		g.protoCount[name] = n
	} else {
		delete(g.protoCount, name)
	}
}

func (g *Group) removePendingSync(id string, fx *Effects) {
	if _, ok := g.pendSync[id]; !ok {
		return
	}
	delete(g.pendSync, id)
	if len(g.pendSync) == 0 {
		g.pendSync = nil // a map keeps its size: drop it
	}
	if len(g.pendSync) == 0 && g.syncArmed {
		g.syncArmed = false
		if fx != nil {
			fx.cancel(TimerSync, "")
		}
	}
}

func (g *Group) setJoinReply(m *member, to ReplyTo, version int32) {
	if m.joinReply == nil && to != nil {
		g.awaitJoin++
	} else if m.joinReply != nil && to == nil {
		g.awaitJoin--
	}
	m.joinReply = to
	m.joinVersion = version
}

// supportsProtocols is Kafka's admission check for a joining member.
func (g *Group) supportsProtocols(protocolType string, protocols []*pb.Protocol) bool {
	if g.state == Empty {
		return protocolType != "" && len(protocols) > 0
	}
	if protocolType != g.protocolType {
		return false
	}
	for _, p := range protocols {
		if g.protoCount[p.GetName()] == g.members.len() {
			return true
		}
	}
	return g.mixedAdmits(protocolType, protocols)
}

// selectProtocol runs the vote: each member votes for its first protocol that
// every member supports; most votes win; ties go to the protocol the leader
// lists first.
func (g *Group) selectProtocol() string {
	n := g.members.len()
	votes := map[string]int{}
	for _, m := range g.order {
		for _, p := range m.protocols {
			if g.protoCount[p.GetName()] == n {
				votes[p.GetName()]++
				break
			}
		}
	}
	var ranking []*pb.Protocol
	if l := g.members.get(g.leader); l != nil {
		ranking = l.protocols
	} else if len(g.order) > 0 {
		ranking = g.order[0].protocols
	}
	best, bestVotes := "", -1
	for _, p := range ranking {
		if v, ok := votes[p.GetName()]; ok && v > bestVotes {
			best, bestVotes = p.GetName(), v
		}
	}
	if best == "" {
		// No protocol common to all: a mixed-assignor group (mixed.go).
		best = g.mixedFallback(ranking)
	}
	return best
}

// validateMember is Kafka's validateCurrentMember; it also returns the
// member, so callers look it up once.
func (g *Group) validateMember(memberID string, instanceID *string) (*member, int32) {
	if instanceID != nil {
		mapped, ok := g.static[*instanceID]
		if !ok {
			return nil, ErrUnknownMemberID
		}
		if mapped != memberID {
			return nil, ErrFencedInstanceID
		}
	}
	m := g.members.get(memberID)
	if m == nil {
		return nil, ErrUnknownMemberID
	}
	return m, ErrNone
}

// computeSubscribed derives the topics a "consumer" group subscribes to from
// the selected protocol's subscriptions (ConsumerProtocol v0 prefix).
func (g *Group) computeSubscribed() {
	g.subscribed, g.subscribedKnown = nil, false
	if g.protocolType != "consumer" || g.protocolName == nil {
		return
	}
	set := map[string]struct{}{}
	for _, m := range g.order {
		topics, ok := subscriptionTopics(g.memberMetadata(m))
		if !ok {
			return
		}
		for _, t := range topics {
			set[t] = struct{}{}
		}
	}
	g.subscribed, g.subscribedKnown = set, true
}

func msDuration(ms int32) time.Duration { return time.Duration(ms) * time.Millisecond }

func durationMs(d time.Duration) int32 { return int32(d / time.Millisecond) }

func cloneOpt(s *string) *string {
	if s == nil {
		return nil
	}
	v := *s
	return &v
}
