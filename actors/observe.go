package actors

import (
	"bytes"
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

	rebalances  *prometheus.CounterVec
	durations   *prometheus.HistogramVec
	commits     prometheus.Counter
	expirations prometheus.Counter
	deletions   prometheus.Counter
}

// GroupView is one group as the status page shows it.
type GroupView struct {
	ID           string
	State        string
	ProtocolType string
	Protocol     string
	Generation   int32
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
	_, ok := o.groups[id]
	describe := o.describe
	o.mu.Unlock()
	if !ok {
		return GroupView{}, false
	}
	// Not under the lock: the group actor may run on this goroutine and
	// take it to update its view.
	var members []MemberView
	if describe != nil {
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

// describeWith makes Group read members through svc.
func (o *Observer) describeWith(svc *Service) {
	o.mu.Lock()
	o.describe = svc.describe
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
)

func (c *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- groupsDesc
	ch <- membersDesc
}

func (c *groupCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ state, protocolType string }
	counts := map[key]int{}
	// Every state is reported, so a series drops to 0 rather than vanishing.
	for _, s := range []coordinator.State{coordinator.Empty, coordinator.PreparingRebalance, coordinator.CompletingRebalance, coordinator.Stable} {
		counts[key{s.String(), "consumer"}] = 0
	}
	members := 0
	c.o.mu.Lock()
	for _, g := range c.o.groups {
		counts[key{g.State, g.ProtocolType}]++
		members += g.MemberCount
	}
	c.o.mu.Unlock()
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(groupsDesc, prometheus.GaugeValue, float64(n), k.state, k.protocolType)
	}
	ch <- prometheus.MustNewConstMetric(membersDesc, prometheus.GaugeValue, float64(members))
}

// tracker is a group actor's record of what it last told the Observer.
type tracker struct {
	seen       bool // the Observer has a view of the group
	state      coordinator.State
	generation int32
	members    int
	// cause is why the input being handled may start a rebalance.
	cause string
	// The rebalance in progress: when it started and why.
	rebalancing bool
	started     time.Time
	startCause  string
	// last is the membership of the last generation recorded, sorted by
	// member id: the baseline of the next rebalance's Joined, Left and
	// Moved. It keeps only what that diff reads.
	last []memberAssignment
}

// memberAssignment is a member as the next rebalance's diff needs it: its
// id and its consumer-protocol assignment (both shared with the
// coordinator, never changed in place; nil for other protocols). It is 40
// bytes where a MemberView is 88, and one is kept per member of every group.
type memberAssignment struct {
	id         string
	assignment []byte
}

// causeOf is the cause a request would give a rebalance it starts.
func causeOf(g *coordinator.Group, req any) string {
	switch m := req.(type) {
	case *pb.JoinGroupRequest:
		if id := m.GetMemberId(); id != "" && g.HasMember(id) {
			return CauseMetadata
		}
		return CauseJoin
	case *pb.LeaveGroupRequest:
		return CauseLeave
	}
	return CauseEnforced
}

// observe counts the effects about to be executed and, when the group
// changed, updates its view and history. fx is the machine's output.
func (a *groupActor) observe(fx *coordinator.Effects) {
	o := a.env.observer
	if o == nil || a.g == nil {
		return
	}
	for _, r := range fx.Replies {
		if c, ok := r.Msg.(*pb.OffsetCommitResponse); ok {
			n := 0
			for _, t := range c.GetTopics() {
				for _, p := range t.GetPartitions() {
					if p.GetErrorCode() == coordinator.ErrNone {
						n++
					}
				}
			}
			if n > 0 {
				o.commits.Add(float64(n))
			}
		}
	}
	for _, p := range fx.Persists {
		n := 0
		for _, r := range p.Records {
			if r.GetOffsetTombstone() != nil {
				n++
			}
		}
		if n > 0 {
			if a.track.cause == causeRetention {
				o.expirations.Add(float64(n))
			} else {
				o.deletions.Add(float64(n))
			}
		}
	}
}

// causeRetention marks the offset-retention timer's input (not a rebalance
// cause).
const causeRetention = "retention"

// publishView updates the Observer after the effects of an input ran.
func (a *groupActor) publishView() {
	o := a.env.observer
	if o == nil || a.g == nil {
		return
	}
	t := &a.track
	st, gen, n := a.g.State(), a.g.Generation(), a.g.NumMembers()
	if t.seen && st == t.state && gen == t.generation && n == t.members {
		return
	}
	now := a.env.clock.Now()
	inRebalance := st == coordinator.PreparingRebalance || st == coordinator.CompletingRebalance
	if inRebalance && !t.rebalancing {
		t.rebalancing, t.started, t.startCause = true, now, t.cause
		if t.startCause == "" || t.startCause == causeRetention {
			t.startCause = CauseEnforced
		}
	}
	if st == coordinator.Dead {
		o.forget(a.id)
		t.seen, t.state = true, st
		return
	}
	if t.seen && st == t.state && gen == t.generation && inRebalance {
		// Only the membership changed, in the middle of a rebalance: count
		// it, and describe the members when the rebalance ends.
		t.members = n
		o.mu.Lock()
		if v := o.groups[a.id]; v != nil {
			cp := *v
			cp.MemberCount = n
			o.groups[a.id] = &cp
		}
		o.mu.Unlock()
		return
	}
	view := GroupView{MemberCount: n, ID: a.id, State: st.String(), ProtocolType: a.g.ProtocolType(), Protocol: a.g.ProtocolName(), Generation: gen}
	var done *Rebalance
	if t.rebalancing && (st == coordinator.Stable || st == coordinator.Empty) {
		t.rebalancing = false
		r := Rebalance{Generation: gen, State: st.String(), Cause: t.startCause, Started: t.started, Completed: now}
		cur := baselineOf(a.g)
		r.Joined, r.Left = diffMembers(t.last, cur)
		r.Moved = moves(t.last, cur)
		t.last = cur
		done = &r
		o.rebalances.WithLabelValues(r.Cause).Inc()
		o.durations.WithLabelValues(r.Cause).Observe(r.Duration().Seconds())
	}
	if !t.seen && !inRebalance {
		t.last = baselineOf(a.g) // loaded: the generation it had is the baseline
	}
	t.seen, t.state, t.generation, t.members = true, st, gen, n
	o.mu.Lock()
	prev := o.groups[a.id]
	if prev != nil {
		view.History = prev.History
	}
	if done != nil {
		h := append(slices.Clone(view.History), *done)
		if len(h) > HistoryLength {
			h = h[len(h)-HistoryLength:]
		}
		view.History = h
	}
	o.groups[a.id] = &view
	o.mu.Unlock()
}

// membersOf lists a DescribeGroups answer's members, sorted by member id,
// with their assignments for the consumer protocol (nil d: none).
func membersOf(d *pb.DescribeGroupResponse) []MemberView {
	out := make([]MemberView, 0, len(d.GetMembers()))
	for _, m := range d.GetMembers() {
		out = append(out, MemberView{MemberID: m.GetMemberId(), InstanceID: m.GetGroupInstanceId(), ClientID: m.GetClientId(), ClientHost: m.GetClientHost(),
			assignment: consumerAssignment(d.GetProtocolType(), m.GetAssignment())})
	}
	slices.SortFunc(out, func(a, b MemberView) int { return cmp.Compare(a.MemberID, b.MemberID) })
	return out
}

// consumerAssignment is a member's assignment as the views keep it: the
// consumer protocol's, nil for other protocols and for none.
func consumerAssignment(protocolType string, assignment []byte) []byte {
	if protocolType != "consumer" || len(assignment) == 0 {
		return nil
	}
	return assignment
}

// baselineOf is what the next diff needs of g's members, which publishView
// asks for only once g is Stable or Empty (no members): their ids and
// consumer-protocol assignments, sorted by id. It reads them from the group
// rather than from a DescribeGroups answer, which would build a message
// per member on every rebalance.
func baselineOf(g *coordinator.Group) []memberAssignment {
	out := make([]memberAssignment, 0, g.NumMembers())
	protocolType := g.ProtocolType()
	g.StableAssignments(func(id string, assignment []byte) {
		out = append(out, memberAssignment{id: id, assignment: consumerAssignment(protocolType, assignment)})
	})
	slices.SortFunc(out, func(a, b memberAssignment) int { return cmp.Compare(a.id, b.id) })
	return out
}

// diffMembers returns the ids in cur but not in prev (joined) and in prev
// but not in cur (left), in id order; both lists are sorted by id. The two
// are counted first, so that each is allocated at its length (nil when
// empty).
func diffMembers(prev, cur []memberAssignment) (joined, left []string) {
	both := 0
	for i, j := 0, 0; i < len(prev) && j < len(cur); {
		switch c := cmp.Compare(prev[i].id, cur[j].id); {
		case c < 0:
			i++
		case c > 0:
			j++
		default:
			both++
			i, j = i+1, j+1
		}
	}
	if n := len(cur) - both; n > 0 {
		joined = make([]string, 0, n)
	}
	if n := len(prev) - both; n > 0 {
		left = make([]string, 0, n)
	}
	for i, j := 0, 0; i < len(prev) || j < len(cur); {
		switch {
		case j == len(cur) || i < len(prev) && prev[i].id < cur[j].id:
			left = append(left, prev[i].id)
			i++
		case i == len(prev) || cur[j].id < prev[i].id:
			joined = append(joined, cur[j].id)
			j++
		default:
			i, j = i+1, j+1
		}
	}
	return joined, left
}

// owner is one partition an assignment gives to a member; the topic points
// into the member's assignment bytes.
type owner struct {
	topic     []byte
	partition int32
	member    string
}

// compareOwners orders owners by topic, then partition.
func compareOwners(a, b owner) int {
	return cmp.Or(bytes.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
}

// owners lists every assigned partition with its member, sorted by topic
// and partition, walking the encoded assignments rather than decoding them.
// A partition in several assignments is the last one's (in ms's order); an
// assignment that does not decode owns nothing.
func owners(ms []memberAssignment) []owner {
	var out []owner
	for _, m := range ms {
		if len(m.assignment) == 0 {
			continue
		}
		start := len(out)
		w := assignor.NewAssignedPartitions(m.assignment)
		for w.Next() {
			out = append(out, owner{topic: w.Topic(), partition: w.Partition(), member: m.id})
		}
		if w.Err() != nil {
			out = out[:start]
		}
	}
	slices.SortStableFunc(out, compareOwners)
	kept := out[:0]
	for i, o := range out {
		if i+1 < len(out) && compareOwners(o, out[i+1]) == 0 {
			continue // a later member's claim wins
		}
		kept = append(kept, o)
	}
	return kept
}

// moves lists the partitions whose owner changed from prev to cur, sorted
// by topic and partition. They are counted first, so that the list is
// allocated at its length (nil when empty).
func moves(prev, cur []memberAssignment) []Move {
	before, after := owners(prev), owners(cur)
	n := 0
	eachMove(before, after, func(owner, string, string) { n++ })
	if n == 0 {
		return nil
	}
	out := make([]Move, 0, n)
	topic := ""
	eachMove(before, after, func(o owner, from, to string) {
		if topic != string(o.topic) { // one string per topic, not per move
			topic = string(o.topic)
		}
		out = append(out, Move{Topic: topic, Partition: o.partition, From: from, To: to})
	})
	return out
}

// eachMove merges two sorted owner lists and calls f, in order, for every
// partition whose owner differs ("" for none).
func eachMove(before, after []owner, f func(o owner, from, to string)) {
	for i, j := 0, 0; i < len(before) || j < len(after); {
		c := 0
		switch {
		case i == len(before):
			c = 1
		case j == len(after):
			c = -1
		default:
			c = compareOwners(before[i], after[j])
		}
		switch {
		case c < 0:
			f(before[i], before[i].member, "")
			i++
		case c > 0:
			f(after[j], "", after[j].member)
			j++
		default:
			if before[i].member != after[j].member {
				f(after[j], before[i].member, after[j].member)
			}
			i, j = i+1, j+1
		}
	}
}
