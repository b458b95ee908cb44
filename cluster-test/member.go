package clustertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// MemberConfig configures one emulated consumer.
type MemberConfig struct {
	Group      string
	Topic      string
	Partitions int32
	// InstanceID makes the member static when set.
	InstanceID        string
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	CommitInterval    time.Duration
}

// Member emulates a Kafka consumer of the classic group protocol with the
// range assignor: it joins, syncs, heartbeats and commits offsets of its
// partitions, rediscovering the coordinator on NOT_COORDINATOR,
// COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS and connection
// errors. Every JoinGroup, SyncGroup, Heartbeat and OffsetCommit goes into
// the History.
type Member struct {
	Name  string
	cfg   MemberConfig
	coord *Coordinator
	hist  *History
	next  func(p int32) int64 // next offset to commit for a partition

	commits  atomic.Bool
	started  atomic.Bool
	inCommit atomic.Bool
	joins    atomic.Int64 // JoinGroup requests sent

	mu       sync.Mutex
	memberID string
	gen      int32
	synced   bool
	assigned []int32
	lastOK   map[string]time.Time // kind -> last success
	lastNode string

	stop chan struct{}
	done chan struct{}
}

// MemberState is a member's view of its group.
type MemberState struct {
	MemberID string
	Gen      int32
	Synced   bool
	Assigned []int32
	Node     string
}

// State returns the member's current view.
func (m *Member) State() MemberState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemberState{m.memberID, m.gen, m.synced, slices.Clone(m.assigned), m.lastNode}
}

// LastOK returns when a request of kind last succeeded, and at which node.
func (m *Member) LastOK(kind string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastOK[kind]
}

// Joins returns how many JoinGroup requests the member sent.
func (m *Member) Joins() int64 { return m.joins.Load() }

// SetCommits turns periodic offset commits on or off.
func (m *Member) SetCommits(on bool) { m.commits.Store(on) }

func (m *Member) run() {
	defer close(m.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-m.done:
		}
	}()
	needJoin := true
	var lastCommit time.Time
	tick := time.NewTicker(m.cfg.HeartbeatInterval)
	defer tick.Stop()
	for ctx.Err() == nil {
		if needJoin {
			if err := m.joinAndSync(ctx); err != nil {
				pause(ctx, 100*time.Millisecond)
				continue
			}
			needJoin = false
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if m.heartbeat(ctx) {
			needJoin = true
			continue
		}
		if m.commits.Load() && time.Since(lastCommit) >= m.cfg.CommitInterval {
			lastCommit = time.Now()
			m.inCommit.Store(true)
			rejoin := m.commit(ctx)
			m.inCommit.Store(false)
			if rejoin {
				needJoin = true
			}
		}
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (m *Member) record(op *Op, addr string, err error) {
	op.Node, op.End, op.Err = addr, time.Now(), err
	if err != nil || coordinatorMoved(op.Code) {
		m.coord.Forget()
	}
	if op.OK() {
		m.mu.Lock()
		m.lastOK[op.Kind] = op.End
		m.lastNode = addr
		m.mu.Unlock()
	}
	m.hist.Add(op)
}

func (m *Member) newOp(kind string) *Op {
	m.mu.Lock()
	defer m.mu.Unlock()
	return &Op{Kind: kind, Group: m.cfg.Group, Client: m.Name, Start: time.Now(), MemberID: m.memberID, Gen: m.gen}
}

// joinAndSync runs one rebalance from the member's side.
func (m *Member) joinAndSync(ctx context.Context) error {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{m.cfg.Topic}
	for {
		m.mu.Lock()
		m.synced = false
		m.mu.Unlock()
		op := m.newOp(OpJoin)
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID = m.cfg.Group, op.MemberID
		if m.cfg.InstanceID != "" {
			req.InstanceID = &m.cfg.InstanceID
		}
		req.SessionTimeoutMillis = int32(m.cfg.SessionTimeout.Milliseconds())
		req.RebalanceTimeoutMillis = int32(m.cfg.RebalanceTimeout.Milliseconds())
		req.ProtocolType = "consumer"
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", meta.AppendTo(nil)
		req.Protocols = []kmsg.JoinGroupRequestProtocol{p}
		m.joins.Add(1)
		rctx, cancel := context.WithTimeout(ctx, m.cfg.RebalanceTimeout+5*time.Second)
		res, addr, err := m.coord.Do(rctx, req)
		cancel()
		if err != nil {
			m.record(op, addr, err)
			return err
		}
		r := res.(*kmsg.JoinGroupResponse)
		op.Code = r.ErrorCode
		switch r.ErrorCode {
		case kerr.MemberIDRequired.Code:
			m.mu.Lock()
			m.memberID = r.MemberID
			m.mu.Unlock()
			op.MemberID = r.MemberID
			m.record(op, addr, nil)
			continue
		case kerr.UnknownMemberID.Code:
			m.mu.Lock()
			m.memberID, m.gen = "", -1
			m.mu.Unlock()
			m.record(op, addr, nil)
			return fmt.Errorf("join: unknown member id")
		case errNone:
		default:
			m.record(op, addr, nil)
			return fmt.Errorf("join: error code %d", r.ErrorCode)
		}
		op.MemberID, op.Gen, op.Leader = r.MemberID, r.Generation, r.LeaderID
		if r.Protocol != nil {
			op.Protocol = *r.Protocol
		}
		for _, mem := range r.Members {
			op.Members = append(op.Members, mem.MemberID)
		}
		m.mu.Lock()
		m.memberID, m.gen = r.MemberID, r.Generation
		m.mu.Unlock()
		m.record(op, addr, nil)
		err = m.sync(ctx, r)
		if errors.Is(err, errRejoin) {
			continue
		}
		return err
	}
}

var errRejoin = errors.New("rejoin")

// rangeAssign splits partitions 0..n-1 over the sorted members, earlier
// members taking one more when it does not divide.
func rangeAssign(members []string, n int32) map[string][]int32 {
	ms := sortedCopy(members)
	out := map[string][]int32{}
	per, extra := n/int32(len(ms)), n%int32(len(ms))
	var p int32
	for i, id := range ms {
		k := per
		if int32(i) < extra {
			k++
		}
		for range k {
			out[id] = append(out[id], p)
			p++
		}
	}
	return out
}

func (m *Member) sync(ctx context.Context, jr *kmsg.JoinGroupResponse) error {
	op := m.newOp(OpSync)
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.Generation, req.MemberID = m.cfg.Group, op.Gen, op.MemberID
	if m.cfg.InstanceID != "" {
		req.InstanceID = &m.cfg.InstanceID
	}
	req.ProtocolType = kmsg.StringPtr("consumer")
	req.Protocol = jr.Protocol
	if jr.LeaderID == jr.MemberID {
		var ids []string
		for _, mem := range jr.Members {
			ids = append(ids, mem.MemberID)
		}
		for id, parts := range rangeAssign(ids, m.cfg.Partitions) {
			a := kmsg.NewConsumerMemberAssignment()
			t := kmsg.NewConsumerMemberAssignmentTopic()
			t.Topic, t.Partitions = m.cfg.Topic, parts
			a.Topics = []kmsg.ConsumerMemberAssignmentTopic{t}
			ga := kmsg.NewSyncGroupRequestGroupAssignment()
			ga.MemberID, ga.MemberAssignment = id, a.AppendTo(nil)
			req.GroupAssignment = append(req.GroupAssignment, ga)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.RebalanceTimeout+5*time.Second)
	res, addr, err := m.coord.Do(rctx, req)
	cancel()
	if err != nil {
		m.record(op, addr, err)
		return err
	}
	r := res.(*kmsg.SyncGroupResponse)
	op.Code = r.ErrorCode
	if r.ErrorCode == kerr.RebalanceInProgress.Code {
		m.record(op, addr, nil)
		return errRejoin
	}
	if r.ErrorCode != errNone {
		m.record(op, addr, nil)
		return fmt.Errorf("sync: error code %d", r.ErrorCode)
	}
	var a kmsg.ConsumerMemberAssignment
	if len(r.MemberAssignment) > 0 {
		if err := a.ReadFrom(r.MemberAssignment); err != nil {
			op.Code = -1
			m.record(op, addr, nil)
			return fmt.Errorf("sync: bad assignment: %w", err)
		}
	}
	op.Assignment = []int32{}
	for _, t := range a.Topics {
		op.Assignment = append(op.Assignment, t.Partitions...)
	}
	m.mu.Lock()
	m.assigned, m.synced = slices.Clone(op.Assignment), true
	m.mu.Unlock()
	m.record(op, addr, nil)
	return nil
}

// heartbeat sends one heartbeat and reports whether the member must rejoin.
func (m *Member) heartbeat(ctx context.Context) bool {
	op := m.newOp(OpHeartbeat)
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.Generation, req.MemberID = m.cfg.Group, op.Gen, op.MemberID
	if m.cfg.InstanceID != "" {
		req.InstanceID = &m.cfg.InstanceID
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	res, addr, err := m.coord.Do(rctx, req)
	cancel()
	if err != nil {
		m.record(op, addr, err)
		return false
	}
	op.Code = res.(*kmsg.HeartbeatResponse).ErrorCode
	m.record(op, addr, nil)
	return m.mustRejoin(op.Code)
}

func (m *Member) mustRejoin(code int16) bool {
	switch code {
	case kerr.RebalanceInProgress.Code, kerr.IllegalGeneration.Code:
		return true
	case kerr.UnknownMemberID.Code:
		m.mu.Lock()
		m.memberID, m.gen = "", -1
		m.mu.Unlock()
		return true
	}
	return false
}

// commit commits the next offset of every assigned partition and reports
// whether the member must rejoin.
func (m *Member) commit(ctx context.Context) bool {
	op := m.newOp(OpCommit)
	m.mu.Lock()
	parts := slices.Clone(m.assigned)
	m.mu.Unlock()
	if len(parts) == 0 {
		return false
	}
	op.Topic, op.Offsets, op.Acked = m.cfg.Topic, map[int32]int64{}, map[int32]bool{}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation, req.MemberID = m.cfg.Group, op.Gen, op.MemberID
	if m.cfg.InstanceID != "" {
		req.InstanceID = &m.cfg.InstanceID
	}
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = m.cfg.Topic
	for _, p := range parts {
		off := m.next(p)
		op.Offsets[p] = off
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, off
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = []kmsg.OffsetCommitRequestTopic{t}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	res, addr, err := m.coord.Do(rctx, req)
	cancel()
	if err != nil {
		m.record(op, addr, err)
		return false
	}
	r := res.(*kmsg.OffsetCommitResponse)
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode == errNone {
				op.Acked[rp.Partition] = true
			} else if op.Code == errNone {
				op.Code = rp.ErrorCode
			}
		}
	}
	m.record(op, addr, nil)
	return m.mustRejoin(op.Code)
}

// GroupLoad is one group of emulated members on its own topic.
type GroupLoad struct {
	ID         string
	Topic      string
	Partitions int32
	Members    []*Member
	Coord      *Coordinator

	static bool

	mu   sync.Mutex
	next map[int32]int64
}

func (g *GroupLoad) nextOffset(p int32) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.next[p]++
	return g.next[p]
}

// Workload runs groups of emulated members against a cluster.
type Workload struct {
	Groups  []*GroupLoad
	History *History
	cfg     WorkloadConfig
	seeds   func() []string

	mu      sync.Mutex
	conns   []*Conns
	stopped []*Member
	seq     int
}

// WorkloadConfig sizes a workload.
type WorkloadConfig struct {
	Groups     int
	Members    int
	Partitions int32
	// StaticGroups is how many of the groups use static membership (each
	// member's group.instance.id is its name).
	StaticGroups int
	Member       MemberConfig // Group, Topic, Partitions and InstanceID are filled in
}

// DefaultWorkload is 3 groups of 5 members on 10-partition topics, heart-
// beating every 200 ms with a 10 s session and committing every 100 ms.
func DefaultWorkload() WorkloadConfig {
	return WorkloadConfig{
		Groups: 3, Members: 5, Partitions: 10,
		Member: MemberConfig{
			SessionTimeout:    10 * time.Second,
			RebalanceTimeout:  10 * time.Second,
			HeartbeatInterval: 200 * time.Millisecond,
			CommitInterval:    100 * time.Millisecond,
		},
	}
}

// StartWorkload creates one topic per group and starts the members. seeds
// returns the Kafka addresses clients may bootstrap from.
func StartWorkload(ctx context.Context, seeds func() []string, cfg WorkloadConfig) (*Workload, error) {
	w := &Workload{History: &History{}, cfg: cfg, seeds: seeds}
	for gi := range cfg.Groups {
		g := &GroupLoad{
			ID:         fmt.Sprintf("group-%d", gi),
			Topic:      fmt.Sprintf("topic-%d", gi),
			Partitions: cfg.Partitions,
			static:     gi < cfg.StaticGroups,
			next:       map[int32]int64{},
		}
		g.Coord = &Coordinator{Conns: w.newConns(g.ID + "-admin"), Seeds: seeds, Group: g.ID}
		if err := CreateTopic(ctx, g.Coord, g.Topic, g.Partitions); err != nil {
			w.Stop()
			return nil, err
		}
		for range cfg.Members {
			g.Members = append(g.Members, w.newMember(g))
		}
		w.Groups = append(w.Groups, g)
	}
	for _, g := range w.Groups {
		for _, m := range g.Members {
			m.start()
		}
	}
	return w, nil
}

func (w *Workload) newConns(clientID string) *Conns {
	c := NewConns(clientID)
	w.mu.Lock()
	w.conns = append(w.conns, c)
	w.mu.Unlock()
	return c
}

// newMember makes the next member of g; the caller appends and starts it.
func (w *Workload) newMember(g *GroupLoad) *Member {
	mc := w.cfg.Member
	mc.Group, mc.Topic, mc.Partitions = g.ID, g.Topic, g.Partitions
	w.mu.Lock()
	name := fmt.Sprintf("%s-m%d", g.ID, w.seq)
	w.seq++
	w.mu.Unlock()
	if g.static {
		mc.InstanceID = name
	}
	return &Member{
		Name:   name,
		cfg:    mc,
		coord:  &Coordinator{Conns: w.newConns(name), Seeds: w.seeds, Group: g.ID},
		hist:   w.History,
		next:   g.nextOffset,
		lastOK: map[string]time.Time{},
		gen:    -1,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

func (m *Member) start() {
	m.started.Store(true)
	go m.run()
}

// RemoveMember stops member m of group g abruptly (no LeaveGroup, as a
// crashed client): the group rebalances once m's session expires. Call it
// from the goroutine that owns the workload.
func (w *Workload) RemoveMember(g *GroupLoad, m *Member) {
	close(m.stop)
	<-m.done
	g.Members = slices.DeleteFunc(g.Members, func(o *Member) bool { return o == m })
	w.mu.Lock()
	w.stopped = append(w.stopped, m)
	w.mu.Unlock()
}

// AddMember starts one more member in group g, which makes the group
// rebalance. Call it from the goroutine that owns the workload.
func (w *Workload) AddMember(g *GroupLoad) *Member {
	m := w.newMember(g)
	m.SetCommits(len(g.Members) > 0 && g.Members[0].commits.Load())
	g.Members = append(g.Members, m)
	m.start()
	return m
}

// Members returns every member of every group.
func (w *Workload) Members() []*Member {
	var out []*Member
	for _, g := range w.Groups {
		out = append(out, g.Members...)
	}
	return out
}

// SetCommits turns offset commits on or off for every member.
func (w *Workload) SetCommits(on bool) {
	for _, m := range w.Members() {
		m.SetCommits(on)
	}
}

// StopCommits turns commits off and waits until no member has one in
// flight, so the committed offsets no longer change.
func (w *Workload) StopCommits(timeout time.Duration) error {
	w.SetCommits(false)
	deadline := time.Now().Add(timeout)
	for _, m := range w.Members() {
		for m.inCommit.Load() {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: commit still in flight after %v", m.Name, timeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// Joins returns the JoinGroup requests sent so far by all members,
// including removed ones.
func (w *Workload) Joins() int64 {
	var n int64
	w.mu.Lock()
	ms := append(w.Members(), w.stopped...)
	w.mu.Unlock()
	for _, m := range ms {
		n += m.Joins()
	}
	return n
}

// GroupView is a group's generation and member ids as the members see them.
type GroupView struct {
	Gen     int32
	Members []string
}

// Stable returns each group's view when every member of every group is
// synced in the same generation with a full, disjoint assignment.
func (w *Workload) Stable() (map[string]GroupView, bool) {
	out := map[string]GroupView{}
	for _, g := range w.Groups {
		var v GroupView
		owned := map[int32]bool{}
		for i, m := range g.Members {
			s := m.State()
			if !s.Synced || (i > 0 && s.Gen != v.Gen) {
				return nil, false
			}
			v.Gen = s.Gen
			v.Members = append(v.Members, s.MemberID)
			for _, p := range s.Assigned {
				if owned[p] {
					return nil, false
				}
				owned[p] = true
			}
		}
		if int32(len(owned)) != g.Partitions {
			return nil, false
		}
		v.Members = sortedCopy(v.Members)
		out[g.ID] = v
	}
	return out, true
}

// WaitStable waits until Stable holds and stays so for settle.
func (w *Workload) WaitStable(timeout, settle time.Duration) (map[string]GroupView, error) {
	deadline := time.Now().Add(timeout)
	var since time.Time
	var last map[string]GroupView
	for time.Now().Before(deadline) {
		v, ok := w.Stable()
		switch {
		case !ok:
			since = time.Time{}
		case since.IsZero() || !sameViews(v, last):
			since, last = time.Now(), v
		case time.Since(since) >= settle:
			return v, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("groups not stable within %v", timeout)
}

func sameViews(a, b map[string]GroupView) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		o, ok := b[k]
		if !ok || o.Gen != v.Gen || !slices.Equal(o.Members, v.Members) {
			return false
		}
	}
	return true
}

// Stop stops every member (without leaving its group) and closes the
// connections.
func (w *Workload) Stop() {
	for _, m := range w.Members() {
		select {
		case <-m.stop:
		default:
			close(m.stop)
		}
	}
	for _, m := range w.Members() {
		if m.started.Load() {
			<-m.done
		}
	}
	w.mu.Lock()
	conns := w.conns
	w.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
