package actors

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Rebalance causes, as the label of the rebalance metrics and in each
// group's history.
const (
	CauseJoin     = "join"     // a new member joined
	CauseMetadata = "metadata" // a known member joined again (its subscription or protocols changed)
	CauseLeave    = "leave"    // a member left
	CauseExpiry   = "expiry"   // a member's session or sync deadline passed
	CauseFailover = "failover" // the group was loaded by a new leader
	CauseEnforced = "enforced" // anything else (an administrative change)
)

// HistoryLength is how many recent generations each group's history keeps.
const HistoryLength = 16

// Observer keeps what operators see of the groups this node coordinates:
// every group's current view and its recent rebalances, and the group
// metrics. Group actors update it only when their group changes (a state,
// generation or membership change), never on a heartbeat.
type Observer struct {
	mu     sync.Mutex
	groups map[string]*GroupView
	// describe asks a group for its DescribeGroups answer (nil when it
	// cannot be had); Start sets it to go through the Service the Observer
	// was given to. Unset, views have no members.
	describe func(id string) *pb.DescribeGroupResponse
	// describeConsumer is describe for consumer groups (KIP-848).
	describeConsumer func(id string) *pb.ConsumerGroupDescribeResponse

	rebalances  *prometheus.CounterVec
	durations   *prometheus.HistogramVec
	commits     prometheus.Counter
	expirations prometheus.Counter
	deletions   prometheus.Counter
}

// GroupView is one group as the status page shows it.
type GroupView struct {
	ID string
	// Type is "classic", or "consumer" for a group of the consumer group
	// protocol (KIP-848), whose Generation is its group epoch and whose
	// Protocol is its server assignor.
	Type         string
	State        string
	ProtocolType string
	Protocol     string
	Generation   int32
	// AssignmentEpoch is a consumer group's target assignment epoch.
	AssignmentEpoch int32
	// MemberCount is the number of members now.
	MemberCount int
	// Members is filled on read: Observer.Group asks the group itself for
	// them (a DescribeGroups answer, so assignments only while Stable),
	// sorted by member id; Observer.Groups leaves it nil. The Observer does not keep them, as a list of every
	// member of every group would be most of what each idle member costs.
	Members []MemberView
	// History holds the most recent rebalances, oldest first.
	History []Rebalance
}

// MemberView is a member and its assignment.
type MemberView struct {
	MemberID   string
	InstanceID string
	ClientID   string
	ClientHost string
	// assignment is the member's consumer-protocol assignment as the
	// coordinator holds it (shared, never changed in place); nil for other
	// protocols. It is decoded only when asked for.
	assignment []byte
	// A consumer group member's epoch, its reconciliation state (STABLE,
	// UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS) and what it is to hold
	// (topic to sorted partitions).
	MemberEpoch    int32
	Reconciliation string
	Target         map[string][]int32
}

// Assignment is the decoded consumer-protocol assignment, topic to sorted
// partitions; nil for other protocols or an assignment that does not
// decode.
func (m MemberView) Assignment() map[string][]int32 {
	if len(m.assignment) == 0 {
		return nil
	}
	as, err := assignor.DecodeAssignment(m.assignment)
	if err != nil {
		return nil
	}
	out := map[string][]int32{}
	for _, tp := range as.Topics {
		ps := append(out[tp.Topic], tp.Partitions...)
		slices.Sort(ps)
		out[tp.Topic] = ps
	}
	return out
}

// Rebalance is one completed rebalance: the generation it formed.
type Rebalance struct {
	Generation int32
	State      string // Stable, or Empty when every member left
	Cause      string
	Started    time.Time
	Completed  time.Time
	Joined     []string // member ids new in this generation
	Left       []string // member ids of the previous generation gone
	Moved      []Move
	// The members themselves are not kept per generation: a history of 16
	// member lists per group would cost more than the members do. Joined,
	// Left and Moved are allocated at their exact length, as they are kept
	// until the entry leaves the history.
}

// Duration is how long the rebalance took.
func (r Rebalance) Duration() time.Duration { return r.Completed.Sub(r.Started) }

// Move is a partition whose owner changed ("" when it had or has none).
type Move struct {
	Topic     string
	Partition int32
	From, To  string
}

// NewObserver returns an Observer whose metrics are registered with reg
// (nil: no metrics).
func NewObserver(reg prometheus.Registerer) *Observer {
	o := &Observer{
		groups: map[string]*GroupView{},
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cohort_group_rebalances_total",
			Help: "Rebalances completed (a new generation reached Stable, or Empty when every member left), by cause.",
		}, []string{"cause"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cohort_group_rebalance_duration_seconds",
			Help:    "Time from the start of a rebalance to its completion, by cause.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300},
		}, []string{"cause"}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cohort_group_offset_commits_total",
			Help: "Offsets committed (one per partition of a successful commit).",
		}),
		expirations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cohort_group_offset_expirations_total",
			Help: "Committed offsets removed by the retention check.",
		}),
		deletions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cohort_group_offset_deletions_total",
			Help: "Committed offsets removed by OffsetDelete or DeleteGroups.",
		}),
	}
	if reg != nil {
		reg.MustRegister(o.rebalances, o.durations, o.commits, o.expirations, o.deletions, &groupCollector{o: o})
	}
	return o
}

// Groups returns copies of every group's view, sorted by id, without their
// members (MemberCount counts them).
func (o *Observer) Groups() []GroupView {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]GroupView, 0, len(o.groups))
	for _, g := range o.groups {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b GroupView) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Group returns a copy of one group's view with its members, which it asks
// the group for.
func (o *Observer) Group(id string) (GroupView, bool) {
	o.mu.Lock()
	view, ok := o.groups[id]
	consumer := ok && view.Type == "consumer"
	describe, describeConsumer := o.describe, o.describeConsumer
	o.mu.Unlock()
	if !ok {
		return GroupView{}, false
	}
	// Not under the lock: the group actor may run on this goroutine and
	// take it to update its view.
	var members []MemberView
	switch {
	case consumer && describeConsumer != nil:
		members = consumerMembersOf(describeConsumer(id))
	case !consumer && describe != nil:
		members = membersOf(describe(id))
	}
	// The view is read after the answer, so it has caught up with every
	// input the group handled before describing itself.
	o.mu.Lock()
	g, ok := o.groups[id]
	o.mu.Unlock()
	if !ok {
		return GroupView{}, false
	}
	v := *g
	v.Members = members
	return v, true
}

// DescribeWith makes Group read members through describe: the Service's
// Describe, which Start sets, or a node's router over several services.
func (o *Observer) DescribeWith(describe func(id string) *pb.DescribeGroupResponse) {
	o.mu.Lock()
	o.describe = describe
	o.mu.Unlock()
}

// DescribeConsumerWith is DescribeWith for consumer groups (KIP-848).
func (o *Observer) DescribeConsumerWith(describe func(id string) *pb.ConsumerGroupDescribeResponse) {
	o.mu.Lock()
	o.describeConsumer = describe
	o.mu.Unlock()
}

func (o *Observer) forget(id string) {
	o.mu.Lock()
	delete(o.groups, id)
	o.mu.Unlock()
}

// groupCollector reports the group gauges from the views at scrape time.
type groupCollector struct{ o *Observer }

var (
	groupsDesc  = prometheus.NewDesc("cohort_groups", "Groups this node coordinates, by state and protocol type.", []string{"state", "protocol_type"}, nil)
	membersDesc = prometheus.NewDesc("cohort_group_members", "Members of the groups this node coordinates.", nil, nil)
	// Consumer groups (KIP-848) are counted apart: their states are not the
	// classic ones.
	consumerGroupsDesc = prometheus.NewDesc("cohort_consumer_groups", "Consumer-protocol (KIP-848) groups this node coordinates, by state.", []string{"state"}, nil)
)

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- groupsDesc
	ch <- membersDesc
	ch <- consumerGroupsDesc
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ state, protocolType string }
	counts := map[key]int{}
	// Every state is reported, so a series drops to 0 rather than vanishing.
	for _, s := range []coordinator.State{coordinator.Empty, coordinator.PreparingRebalance, coordinator.CompletingRebalance, coordinator.Stable} {
		counts[key{s.String(), "consumer"}] = 0
	}
	consumers := map[string]int{consumerEmpty: 0, "Assigning": 0, "Reconciling": 0, consumerStable: 0}
	members := 0
	c.o.mu.Lock()
	for _, g := range c.o.groups {
		if g.Type == "consumer" {
			consumers[g.State]++
		} else {
			counts[key{g.State, g.ProtocolType}]++
		}
		members += g.MemberCount
	}
	c.o.mu.Unlock()
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(groupsDesc, prometheus.GaugeValue, float64(n), k.state, k.protocolType)
	}
	for state, n := range consumers {
		ch <- prometheus.MustNewConstMetric(consumerGroupsDesc, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(members))
}
