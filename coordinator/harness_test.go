package coordinator

import (
	"cmp"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// t0 is the start of every test's virtual clock.
var t0 = time.UnixMilli(1_700_000_000_000)

// harness drives one Group the way its actor does: it executes effects, keeps
// armed timers with virtual deadlines, and completes writes (immediately by
// default, or on demand with holdWrites).
type harness struct {
	t       testing.TB
	cfg     Config
	g       *Group
	now     time.Time
	fx      Effects
	timers  map[TimerKey]time.Time
	replies map[int][]proto.Message // handle -> every answer it got
	parked  map[int]bool            // handles without an answer yet
	next    int
	ids     int
	hold    bool
	held    []Persist
	written []*pb.Record
	failErr error // when set, writes fail with it
	lastGen int32
	durable []*pb.Record     // records of successful writes, in order
	gone    bool             // the group reported Effects.Gone
	events  []Event          // every event reported
	log     *strings.Builder // when set: every answer, write and event, with its time
}

func newHarness(t testing.TB, mutate ...func(*Config)) *harness {
	cfg := DefaultConfig()
	for _, f := range mutate {
		f(&cfg)
	}
	h := &harness{t: t, cfg: cfg, now: t0, timers: map[TimerKey]time.Time{}, replies: map[int][]proto.Message{}, parked: map[int]bool{}}
	h.g = New("g", &h.cfg, h.now)
	h.g.Start(h.now, &h.fx)
	h.apply()
	return h
}

func (h *harness) handle() int {
	h.next++
	h.parked[h.next] = true
	return h.next
}

func (h *harness) newID() string {
	h.ids++
	return fmt.Sprintf("id%d", h.ids)
}

// logEffects writes what fx answers, writes and reports to h.log, a line
// each: what a group's users see, without its timers.
func (h *harness) logEffects(fx *Effects) {
	if h.log == nil {
		return
	}
	at := h.now.Sub(t0)
	for _, r := range fx.Replies {
		fmt.Fprintf(h.log, "%v answer %v: %v\n", at, r.To, prototext.MarshalOptions{}.Format(r.Msg))
	}
	for _, p := range fx.Persists {
		for _, rec := range p.Records {
			fmt.Fprintf(h.log, "%v write: %v\n", at, prototext.MarshalOptions{}.Format(rec))
		}
	}
	for _, ev := range fx.Events {
		fmt.Fprintf(h.log, "%v event: %+v\n", at, ev)
	}
}

// apply executes the effects collected by the last call.
func (h *harness) apply() {
	for {
		fx := h.fx
		h.fx = Effects{}
		h.events = append(h.events, fx.Events...)
		h.logEffects(&fx)
		for _, r := range fx.Replies {
			id := r.To.(int)
			h.replies[id] = append(h.replies[id], r.Msg)
			if !h.parked[id] {
				h.t.Fatalf("handle %d answered twice: %v", id, r.Msg)
			}
			delete(h.parked, id)
		}
		for _, op := range fx.Timers {
			if op.Cancel {
				delete(h.timers, op.Key)
			} else {
				h.timers[op.Key] = h.now.Add(op.After)
			}
		}
		for _, p := range fx.Persists {
			h.written = append(h.written, p.Records...)
			if h.hold {
				h.held = append(h.held, p)
				continue
			}
			if h.failErr == nil {
				h.durable = append(h.durable, p.Records...)
			}
			h.g.OnPersisted(h.now, p.Token, h.failErr, &h.fx)
		}
		if fx.Gone {
			h.gone = true
			if h.g.State() != Dead || h.g.InFlight() != 0 {
				h.t.Fatalf("gone while %v with %d writes in flight", h.g.State(), h.g.InFlight())
			}
		}
		if len(h.fx.Replies)+len(h.fx.Timers)+len(h.fx.Persists) == 0 && !h.fx.Gone {
			break
		}
	}
	if h.g.State() == Dead && h.g.InFlight() == 0 && len(h.parked) > 0 {
		h.t.Fatalf("dead group with its writes done left %d requests unanswered", len(h.parked))
	}
	if err := checkInvariants(h.g); err != nil {
		h.t.Fatalf("invariant violated at %v: %v", h.now.Sub(t0), err)
	}
	if err := h.checkTimers(); err != nil {
		h.t.Fatalf("timer invariant violated at %v: %v", h.now.Sub(t0), err)
	}
	if gen := h.g.Generation(); gen < h.lastGen {
		h.t.Fatalf("generation went from %d to %d", h.lastGen, gen)
	} else {
		h.lastGen = gen
	}
	// No request is lost: every unanswered handle is still held by the group
	// (parked in a member or waiting for a write).
	held := heldReplies(h.g)
	for id := range h.parked {
		if !held[id] {
			h.t.Fatalf("handle %d is neither answered nor held by the group (state %v)", id, h.g.State())
		}
	}
}

// release completes every held write with err.
func (h *harness) release(err error) {
	held := h.held
	h.held = nil
	for _, p := range held {
		if err == nil {
			h.durable = append(h.durable, p.Records...)
		}
		h.g.OnPersisted(h.now, p.Token, err, &h.fx)
		h.apply()
	}
}

// advance moves the clock forward by d, firing due timers in deadline order.
func (h *harness) advance(d time.Duration) {
	target := h.now.Add(d)
	sameInstant, fires := 0, 0
	for {
		var key TimerKey
		var at time.Time
		found := false
		for k, dl := range h.timers {
			if dl.After(target) {
				continue
			}
			if !found || dl.Before(at) || (dl.Equal(at) && keyLess(k, key)) {
				key, at, found = k, dl, true
			}
		}
		if !found {
			break
		}
		delete(h.timers, key)
		if fires++; fires > 50_000 {
			// Far more than the periodic timers of any group over the
			// longest advance a test makes: something re-arms too eagerly.
			h.t.Fatalf("%d timer fires in one advance of %v; last %v/%q at %v", fires, d, key.Kind, key.Member, at.Sub(t0))
		}
		if at.Equal(h.now) {
			// A timer re-armed with no delay on every fire would spin forever.
			if sameInstant++; sameInstant > 10_000 {
				h.t.Fatalf("timer loop at %v: %v/%q keeps firing", h.now.Sub(t0), key.Kind, key.Member)
			}
		} else {
			sameInstant = 0
		}
		h.now = at
		h.g.OnTimer(h.now, key, &h.fx)
		h.apply()
	}
	h.now = target
}

func keyLess(a, b TimerKey) bool {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Member, b.Member)) < 0
}

func (h *harness) join(req *pb.JoinGroupRequest) int {
	if req.GroupId == "" {
		req.GroupId = "g"
	}
	if req.ProtocolType == "" {
		req.ProtocolType = "consumer"
	}
	if req.Protocols == nil {
		req.Protocols = []*pb.Protocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0}}}
	}
	if req.SessionTimeoutMs == 0 {
		req.SessionTimeoutMs = 10_000
	}
	if req.RebalanceTimeoutMs == 0 {
		req.RebalanceTimeoutMs = 60_000
	}
	id := h.handle()
	h.g.Join(h.now, req, h.newID(), id, &h.fx)
	h.apply()
	return id
}

func (h *harness) sync(req *pb.SyncGroupRequest) int {
	if req.GroupId == "" {
		req.GroupId = "g"
	}
	id := h.handle()
	h.g.Sync(h.now, req, id, &h.fx)
	h.apply()
	return id
}

func (h *harness) heartbeat(memberID string, gen int32) int32 {
	code := h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: memberID, GenerationId: gen}, &h.fx)
	h.apply()
	return code
}

func (h *harness) commit(req *pb.OffsetCommitRequest) int {
	if req.GroupId == "" {
		req.GroupId = "g"
	}
	id := h.handle()
	h.g.Commit(h.now, req, id, &h.fx)
	h.apply()
	return id
}

func (h *harness) leave(ids ...*pb.MemberIdentity) *pb.LeaveGroupResponse {
	return h.leaveReq(&pb.LeaveGroupRequest{GroupId: "g", Members: ids})
}

// leaveReq sends a LeaveGroup and returns its answer (nil while a held
// write keeps it parked).
func (h *harness) leaveReq(req *pb.LeaveGroupRequest) *pb.LeaveGroupResponse {
	id := h.handle()
	h.g.Leave(h.now, req, id, &h.fx)
	h.apply()
	if h.parked[id] {
		return nil
	}
	return answer[*pb.LeaveGroupResponse](h, id)
}

// answer returns the single answer of a handle, failing if there is none.
func answer[T proto.Message](h *harness, id int) T {
	h.t.Helper()
	got := h.replies[id]
	if len(got) != 1 {
		h.t.Fatalf("handle %d: want one answer, got %d (parked=%v)", id, len(got), h.parked[id])
	}
	r, ok := got[0].(T)
	if !ok {
		h.t.Fatalf("handle %d: answer is %T", id, got[0])
	}
	return r
}

func (h *harness) isParked(id int) bool { return h.parked[id] }

// joinV4 runs the two-step v4+ join and returns the parked handle and the member id.
func (h *harness) joinV4(clientID string, version int32) (int, string) {
	h.t.Helper()
	first := h.join(&pb.JoinGroupRequest{ClientId: clientID, ApiVersion: version})
	r := answer[*pb.JoinGroupResponse](h, first)
	if r.ErrorCode != ErrMemberIDRequired {
		h.t.Fatalf("first join: want MEMBER_ID_REQUIRED, got %d", r.ErrorCode)
	}
	return h.join(&pb.JoinGroupRequest{ClientId: clientID, ApiVersion: version, MemberId: r.MemberId}), r.MemberId
}

// stableGroup forms a Stable group of n v3 members (initial delay 0) and
// returns their member ids in join order (the first is the leader).
func (h *harness) stableGroup(n int) []string {
	h.t.Helper()
	handles := make([]int, n)
	for i := range n {
		handles[i] = h.join(&pb.JoinGroupRequest{ClientId: fmt.Sprintf("c%d", i), ApiVersion: 3})
	}
	h.advance(2 * h.cfg.InitialRebalanceDelay) // joins in the first window extend the delay once
	ids := make([]string, n)
	gen := int32(0)
	for i, hd := range handles {
		r := answer[*pb.JoinGroupResponse](h, hd)
		if r.ErrorCode != ErrNone {
			h.t.Fatalf("join %d: error %d", i, r.ErrorCode)
		}
		ids[i], gen = r.MemberId, r.GenerationId
	}
	var assignments []*pb.SyncGroupAssignment
	for _, id := range ids {
		assignments = append(assignments, &pb.SyncGroupAssignment{MemberId: id, Assignment: []byte("a-" + id)})
	}
	syncs := make([]int, n)
	for i, id := range ids {
		req := &pb.SyncGroupRequest{MemberId: id, GenerationId: gen}
		if i == 0 {
			req.Assignments = assignments
		}
		syncs[i] = h.sync(req)
	}
	if h.g.State() != Stable {
		h.t.Fatalf("group is %v after syncs", h.g.State())
	}
	for i, s := range syncs {
		if r := answer[*pb.SyncGroupResponse](h, s); r.ErrorCode != ErrNone || string(r.Assignment) != "a-"+ids[i] {
			h.t.Fatalf("sync %d: %v", i, r)
		}
	}
	return ids
}

// checkInvariants asserts the structural invariants of a group.
func checkInvariants(g *Group) error {
	if len(g.order) != g.members.len() {
		return fmt.Errorf("order has %d members, map %d", len(g.order), g.members.len())
	}
	awaiting := 0
	for _, m := range g.order {
		if g.members.get(m.id) != m {
			return fmt.Errorf("member %q not indexed", m.id)
		}
		if _, p := g.pending[m.id]; p {
			return fmt.Errorf("member %q is both pending and joined", m.id)
		}
		if m.joinReply != nil {
			awaiting++
		}
		if g.state == Stable && m.assignment == nil {
			return fmt.Errorf("stable group: member %q has no assignment", m.id)
		}
		if m.syncReply != nil && g.state != CompletingRebalance {
			return fmt.Errorf("member %q has a parked SyncGroup in %v", m.id, g.state)
		}
		if m.joinReply != nil && g.state != PreparingRebalance && !g.staticWriteFor(m) {
			return fmt.Errorf("member %q has a parked JoinGroup in %v", m.id, g.state)
		}
	}
	if awaiting != g.awaitJoin {
		return fmt.Errorf("awaitJoin=%d, counted %d", g.awaitJoin, awaiting)
	}
	if (g.leader == "") != (g.members.len() == 0) {
		return fmt.Errorf("leader %q with %d members", g.leader, g.members.len())
	}
	if g.leader != "" && g.members.get(g.leader) == nil {
		return fmt.Errorf("leader %q is not a member", g.leader)
	}
	for inst, id := range g.static {
		if m := g.members.get(id); m == nil || m.instanceID == nil || *m.instanceID != inst {
			return fmt.Errorf("static %q maps to %q which does not carry it", inst, id)
		}
	}
	if g.state == Empty && g.members.len() > 0 {
		return fmt.Errorf("empty group with %d members", g.members.len())
	}
	if (g.state == Stable || g.state == CompletingRebalance) && g.members.len() == 0 {
		return fmt.Errorf("%v group without members", g.state)
	}
	counts := map[string]int{}
	for _, m := range g.order {
		for _, p := range m.protocols {
			counts[p.GetName()]++
		}
	}
	if !maps_equal(counts, g.protoCount) {
		return fmt.Errorf("protocol counters %v, want %v", g.protoCount, counts)
	}
	return nil
}

func (g *Group) staticWriteFor(m *member) bool {
	for _, op := range g.inflight {
		if w, ok := op.(*staticReplaceWrite); ok && w.member == m {
			return true
		}
	}
	return false
}

func maps_equal(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkTimers asserts liveness: nothing can wait forever. Every member has
// a liveness timer unless a parked request makes a join or sync timer
// responsible for it; every pending id has one; a join phase has its join
// timer; members yet to sync have the pending-sync timer.
func (h *harness) checkTimers() error {
	g := h.g
	if g.state == Dead {
		return nil
	}
	for _, m := range g.order {
		at, ok := h.timers[memberKey(m.id)]
		if !ok && m.joinReply == nil && m.syncReply == nil {
			return fmt.Errorf("member %q has no liveness timer in %v", m.id, g.state)
		}
		if m.sessionUntil != 0 && (!ok || at.After(sessionEnd(g, m))) {
			return fmt.Errorf("member %q: session extended to %v without a timer armed before it (timer %v, armed %v)",
				m.id, sessionEnd(g, m).Sub(t0), at.Sub(t0), ok)
		}
	}
	for id := range g.pending {
		if _, ok := h.timers[memberKey(id)]; !ok {
			return fmt.Errorf("pending id %q has no timer", id)
		}
	}
	if _, ok := h.timers[TimerKey{Kind: TimerJoin}]; g.state == PreparingRebalance && !ok {
		return fmt.Errorf("join phase without a join timer")
	}
	if _, ok := h.timers[TimerKey{Kind: TimerSync}]; len(g.pendSync) > 0 && !ok {
		return fmt.Errorf("%d members yet to sync without a pending-sync timer", len(g.pendSync))
	}
	if _, ok := h.timers[TimerKey{Kind: TimerOffsetExpiry}]; !ok {
		return fmt.Errorf("no offset expiry timer")
	}
	return nil
}
