package coordinator

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"time"

	"github.com/cohort-coord/cohort/assignor"
)

// Error codes of the consumer group protocol (KIP-848) that the classic
// machine does not use; consumer_test.go checks them against franz-go's kerr.
const (
	ErrInvalidRequest           int32 = 42
	ErrFencedMemberEpoch        int32 = 110
	ErrUnreleasedInstanceID     int32 = 111
	ErrUnsupportedAssignor      int32 = 112
	ErrStaleMemberEpoch         int32 = 113
	ErrInvalidRegularExpression int32 = 128
)

// Member epochs with a meaning of their own in ConsumerGroupHeartbeat.
const (
	EpochJoin        int32 = 0
	EpochLeave       int32 = -1
	EpochStaticLeave int32 = -2
)

// ConsumerConfig holds the settings of consumer groups, named after Kafka's
// broker configs.
type ConsumerConfig struct {
	SessionTimeout    time.Duration // group.consumer.session.timeout.ms
	HeartbeatInterval time.Duration // group.consumer.heartbeat.interval.ms
	MaxSize           int           // group.consumer.max.size; 0 means unlimited
	// Assignors are group.consumer.assignors; the first is the default.
	Assignors []assignor.ServerAssignor
	// MigrationPolicy is group.consumer.migration.policy: which online
	// conversions of non-empty groups are allowed ("" is bidirectional,
	// Kafka's default). Empty groups convert whatever it says.
	MigrationPolicy MigrationPolicy
	// RegexRefreshInterval is group.consumer.regex.refresh.interval.ms: a
	// group's regexes are resolved again at least this often
	// (consumer_regex.go). Validate asks for at least
	// RegexRefreshMinInterval; a zero in a config that is not validated
	// turns the periodic resolution off.
	RegexRefreshInterval time.Duration
	// RegexRefreshMinInterval is the least time between two resolutions of
	// a group's regexes, whatever asks for one (Kafka's fixed
	// REGEX_BATCH_REFRESH_MIN_INTERVAL_MS, 10 s; tests shorten it).
	RegexRefreshMinInterval time.Duration
}

// MigrationPolicy is Kafka's ConsumerGroupMigrationPolicy.
type MigrationPolicy string

// The values of group.consumer.migration.policy.
const (
	MigrationBidirectional MigrationPolicy = "bidirectional"
	MigrationUpgrade       MigrationPolicy = "upgrade"
	MigrationDowngrade     MigrationPolicy = "downgrade"
	MigrationDisabled      MigrationPolicy = "disabled"
)

// UpgradeEnabled reports whether a classic group with members may become a
// consumer group.
func (p MigrationPolicy) UpgradeEnabled() bool {
	return p == "" || p == MigrationBidirectional || p == MigrationUpgrade
}

// DowngradeEnabled reports whether a consumer group with members may become
// a classic group.
func (p MigrationPolicy) DowngradeEnabled() bool {
	return p == "" || p == MigrationBidirectional || p == MigrationDowngrade
}

// Disabled reports whether classic members are refused in consumer groups.
func (p MigrationPolicy) Disabled() bool { return p == MigrationDisabled }

// DefaultConsumerConfig returns Kafka's defaults.
func DefaultConsumerConfig() ConsumerConfig {
	return ConsumerConfig{
		SessionTimeout:    45 * time.Second,
		HeartbeatInterval: 5 * time.Second,
		Assignors:         assignor.ServerAssignors(),
		MigrationPolicy:   MigrationBidirectional,
		// Kafka's defaults: 10 minutes, and its fixed 10 s.
		RegexRefreshInterval:    10 * time.Minute,
		RegexRefreshMinInterval: 10 * time.Second,
	}
}

// Validate reports every invalid setting.
func (c ConsumerConfig) Validate() error {
	var errs []error
	if c.SessionTimeout <= 0 || c.SessionTimeout > time.Duration(math.MaxInt32)*time.Millisecond {
		errs = append(errs, fmt.Errorf("consumer group session timeout must be positive and fit in int32 milliseconds, got %v", c.SessionTimeout))
	}
	if c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= c.SessionTimeout {
		errs = append(errs, fmt.Errorf("consumer group heartbeat interval must be positive and below the session timeout, got %v", c.HeartbeatInterval))
	}
	if c.MaxSize < 0 {
		errs = append(errs, fmt.Errorf("consumer group max size must be 0 (unlimited) or positive, got %d", c.MaxSize))
	}
	if len(c.Assignors) == 0 {
		errs = append(errs, errors.New("consumer group assignors: at least one is needed"))
	}
	switch c.MigrationPolicy {
	case "", MigrationBidirectional, MigrationUpgrade, MigrationDowngrade, MigrationDisabled:
	default:
		errs = append(errs, fmt.Errorf("consumer group migration policy must be bidirectional, upgrade, downgrade or disabled, got %q", c.MigrationPolicy))
	}
	if c.RegexRefreshMinInterval < 0 {
		errs = append(errs, fmt.Errorf("consumer group regex refresh minimum interval must not be negative, got %v", c.RegexRefreshMinInterval))
	}
	if c.RegexRefreshInterval <= 0 || c.RegexRefreshInterval < c.RegexRefreshMinInterval {
		errs = append(errs, fmt.Errorf("consumer group regex refresh interval must be positive and at least %v, got %v", c.RegexRefreshMinInterval, c.RegexRefreshInterval))
	}
	seen := map[string]bool{}
	for _, a := range c.Assignors {
		if seen[a.Name()] {
			errs = append(errs, fmt.Errorf("consumer group assignor %q is listed twice", a.Name()))
		}
		seen[a.Name()] = true
	}
	return errors.Join(errs...)
}

// ConsumerHeartbeatRequest is ConsumerGroupHeartbeat (API key 68, v0-v1)
// with the connection's client id and host. Nullable fields follow kmsg: a
// nil pointer or nil slice is null ("unchanged since my last heartbeat"),
// a non-nil empty slice is an empty list. Topics are named; the wire layer
// maps topic ids to names and back.
type ConsumerHeartbeatRequest struct {
	Version              int16
	GroupID              string
	MemberID             string
	MemberEpoch          int32
	InstanceID           *string
	RackID               *string
	RebalanceTimeoutMs   int32 // -1: unchanged
	SubscribedTopicNames []string
	SubscribedTopicRegex *string
	ServerAssignor       *string
	Topics               []assignor.TopicPartitions // owned partitions
	ClientID, ClientHost string
	// GeneratedMemberID is the id the owner chose for a v0 join without a
	// member id (the machine draws no random numbers).
	GeneratedMemberID string
}

// ConsumerHeartbeatResponse is the ConsumerGroupHeartbeat response.
// Assignment nil means none is sent; otherwise it is the member's full
// current assignment (possibly empty).
type ConsumerHeartbeatResponse struct {
	ErrorCode           int32
	ErrorMessage        string
	MemberID            string
	MemberEpoch         int32
	HeartbeatIntervalMs int32
	Assignment          []assignor.TopicPartitions
	HasAssignment       bool
}

// ConsumerMemberState is a member's reconciliation state (Kafka's
// MemberState, same byte values).
type ConsumerMemberState uint8

const (
	// MemberStable: the member holds what its epoch's target gives it.
	MemberStable ConsumerMemberState = 0
	// MemberUnrevokedPartitions: the member must give partitions up before it
	// moves to the new epoch; its rebalance timeout runs.
	MemberUnrevokedPartitions ConsumerMemberState = 1
	// MemberUnreleasedPartitions: the member is at the new epoch and waits
	// for partitions other members still hold.
	MemberUnreleasedPartitions ConsumerMemberState = 2
)

func (s ConsumerMemberState) String() string {
	switch s {
	case MemberStable:
		return "STABLE"
	case MemberUnrevokedPartitions:
		return "UNREVOKED_PARTITIONS"
	case MemberUnreleasedPartitions:
		return "UNRELEASED_PARTITIONS"
	}
	return "UNKNOWN"
}

// ConsumerTimerKind names a consumer member's timer.
type ConsumerTimerKind uint8

const (
	// ConsumerTimerSession expires a member that stopped heartbeating.
	ConsumerTimerSession ConsumerTimerKind = iota + 1
	// ConsumerTimerRebalance fences a member that did not revoke in time.
	ConsumerTimerRebalance
	// ConsumerTimerJoin fences a classic member told to rejoin
	// (REBALANCE_IN_PROGRESS) that did not within its rebalance timeout.
	ConsumerTimerJoin
	// ConsumerTimerSync fences a classic member that did not send SyncGroup
	// within its rebalance timeout after its JoinGroup.
	ConsumerTimerSync
	// ConsumerTimerRegex resolves the group's regexes against the catalog
	// (consumer_regex.go); its Member is empty.
	ConsumerTimerRegex
)

// ConsumerTimer arms (Cancel false) or cancels the timer of one member.
// Arming a (Kind, Member) replaces the timer armed under it before. The
// owner calls ConsumerGroup.OnTimer when it fires; a stale fire is ignored.
type ConsumerTimer struct {
	Kind   ConsumerTimerKind
	Member string
	After  time.Duration
	Cancel bool
}

// ConsumerEffects collects what one call asks the owner to do: write
// Records (replicate them, in order) before sending the call's response,
// and arm or cancel Timers.
type ConsumerEffects struct {
	Records []ConsumerRecord
	Timers  []ConsumerTimer
}

// Reset empties e for the next call.
func (e *ConsumerEffects) Reset() {
	e.Records = resetSlice(e.Records)
	e.Timers = resetSlice(e.Timers)
}

func (e *ConsumerEffects) record(r ConsumerRecord) { e.Records = append(e.Records, r) }

func (e *ConsumerEffects) arm(k ConsumerTimerKind, member string, after time.Duration) {
	e.Timers = append(e.Timers, ConsumerTimer{Kind: k, Member: member, After: after})
}

func (e *ConsumerEffects) cancel(k ConsumerTimerKind, member string) {
	e.Timers = append(e.Timers, ConsumerTimer{Kind: k, Member: member, Cancel: true})
}

// ConsumerGroup is the pure state machine of one consumer group (KIP-848).
// See consumer_doc.go.
type ConsumerGroup struct {
	id              string
	cfg             *ConsumerConfig
	epoch           int32 // group epoch; 0: the group does not exist yet
	assignmentEpoch int32 // epoch of the target assignment
	members         map[string]*consumerMember
	static          map[string]string // instance id -> member id
	// owners holds, for every partition in some member's assigned or
	// pending-revocation set, that member and its member epoch (Kafka's
	// partition epochs); replaying the records rebuilds it exactly.
	owners  map[tpKey]partitionOwner
	topics  map[string]int32 // the catalog: topic -> partition count
	sig     string           // subscribedSignature at the last bump
	regexes map[string]*regexp.Regexp
	regex   regexState // resolved regexes (consumer_regex.go)
}

type tpKey struct {
	topic     string
	partition int32
}

type partitionOwner struct {
	member string
	epoch  int32
}

type consumerMember struct {
	id, instanceID, rackID   string
	clientID, clientHost     string
	rebalanceTimeout         time.Duration
	topics                   []string // sorted subscribed names
	regex                    string
	assignor                 string
	epoch, previousEpoch     int32
	state                    ConsumerMemberState
	assigned, pending        tpSet
	target                   tpSet
	sessionEnd, revokeBefore time.Time // timers' deadlines (not replicated)
	// classic is set for a member that uses the classic protocol
	// (consumer_classic.go); joinBefore and syncBefore are its join and
	// sync deadlines (zero: none; not replicated).
	classic                *ClassicMemberMetadata
	joinBefore, syncBefore time.Time
}

// NewConsumerGroup returns an empty consumer group that does not exist yet
// (epoch 0). topics is the catalog (topic -> partition count); the machine
// keeps it and SetTopics replaces it.
func NewConsumerGroup(id string, cfg *ConsumerConfig, topics map[string]int32) *ConsumerGroup {
	return &ConsumerGroup{
		id:      id,
		cfg:     cfg,
		members: map[string]*consumerMember{},
		static:  map[string]string{},
		owners:  map[tpKey]partitionOwner{},
		topics:  topics,
		regexes: map[string]*regexp.Regexp{},
		regex:   regexState{resolved: map[string][]string{}},
	}
}

// ID returns the group id.
func (g *ConsumerGroup) ID() string { return g.id }

// Epoch returns the group epoch.
func (g *ConsumerGroup) Epoch() int32 { return g.epoch }

// AssignmentEpoch returns the epoch of the target assignment.
func (g *ConsumerGroup) AssignmentEpoch() int32 { return g.assignmentEpoch }

// State returns the group state as ConsumerGroupDescribe and ListGroups
// name it: Empty, Assigning, Reconciling or Stable.
func (g *ConsumerGroup) State() string {
	switch {
	case len(g.members) == 0:
		return "Empty"
	case g.epoch > g.assignmentEpoch:
		return "Assigning"
	}
	for _, m := range g.members {
		if m.state != MemberStable || m.epoch != g.assignmentEpoch {
			return "Reconciling"
		}
	}
	return "Stable"
}

// ConsumerMemberView is one member as ConsumerGroupDescribe shows it.
type ConsumerMemberView struct {
	MemberID, InstanceID, RackID string
	ClientID, ClientHost         string
	MemberEpoch, PreviousEpoch   int32
	State                        ConsumerMemberState
	SubscribedTopicNames         []string
	SubscribedTopicRegex         string
	ServerAssignor               string
	RebalanceTimeout             time.Duration
	Assigned, PendingRevocation  []assignor.TopicPartitions
	Target                       []assignor.TopicPartitions
	// Classic is set for a member that uses the classic protocol.
	Classic *ClassicMemberMetadata
}

// Members returns every member, ordered by member id.
func (g *ConsumerGroup) Members() []ConsumerMemberView {
	out := make([]ConsumerMemberView, 0, len(g.members))
	for _, id := range g.memberIDs() {
		m := g.members[id]
		out = append(out, ConsumerMemberView{
			MemberID: m.id, InstanceID: m.instanceID, RackID: m.rackID,
			ClientID: m.clientID, ClientHost: m.clientHost,
			MemberEpoch: m.epoch, PreviousEpoch: m.previousEpoch, State: m.state,
			SubscribedTopicNames: slices.Clone(m.topics), SubscribedTopicRegex: m.regex,
			ServerAssignor: m.assignor, RebalanceTimeout: m.rebalanceTimeout,
			Assigned: m.assigned.list(), PendingRevocation: m.pending.list(), Target: m.target.list(),
			Classic: m.classic.clone(),
		})
	}
	return out
}

// AssignorName is the assignor the group uses: the one most members name,
// ties to the one configured first; the default when none is named.
func (g *ConsumerGroup) AssignorName() string { return g.assignorFor().Name() }

func (g *ConsumerGroup) assignorFor() assignor.ServerAssignor {
	votes := make([]int, len(g.cfg.Assignors))
	for _, m := range g.members {
		for i, a := range g.cfg.Assignors {
			if a.Name() == m.assignor {
				votes[i]++
			}
		}
	}
	best := 0
	for i := range votes {
		if votes[i] > votes[best] {
			best = i
		}
	}
	return g.cfg.Assignors[best]
}

func (g *ConsumerGroup) memberIDs() []string {
	ids := make([]string, 0, len(g.members))
	for id := range g.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
