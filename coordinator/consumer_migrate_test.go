package coordinator

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// migHarness drives a group id's Group through the migration entry points
// as the group actor does (ConsumerHeartbeat, ServeClassic, ConsumerTimer,
// the classic methods otherwise), with simulated clients of both
// protocols. After every step it checks that no partition is held by two
// clients (held = what each client's answers gave it), that replaying the
// consumer records written so far rebuilds the attached consumer group (or
// none), and that the classic record last written has no members while a
// consumer group is attached.
type migHarness struct {
	t       *testing.T
	cfg     Config
	ccfg    ConsumerConfig
	g       *Group
	topics  map[string]int32
	now     time.Time
	timers  map[TimerKey]time.Time
	replies map[int]proto.Message
	next    int
	ids     int
	written []*pb.Record // every record written, in order
	clients []*migClient
	// typeChanges counts conversions: to consumer, to classic.
	toConsumer, toClassic int
	wasConsumer           bool
}

type migClient struct {
	id, memberID string
	consumer     bool // speaks ConsumerGroupHeartbeat
	bal          assignor.Balancer
	topics       []string
	held         tpSet
	gen          int32
	state        int // migJoin, migSync, migStable
	pending      int // handle of a parked classic request, 0: none
	pendingKind  int
	leaderPlan   []*pb.SyncGroupAssignment
	gone         bool
	lost         int    // times it lost its partitions (lose)
	instance     string // static membership when set
}

func (c *migClient) instanceID() *string {
	if c.instance == "" {
		return nil
	}
	return &c.instance
}

const (
	migJoin = iota
	migSync
	migStable
)

func newMigHarness(t *testing.T, topics map[string]int32) *migHarness {
	h := &migHarness{t: t, cfg: DefaultConfig(), ccfg: DefaultConsumerConfig(), topics: topics, now: t0,
		timers: map[TimerKey]time.Time{}, replies: map[int]proto.Message{}}
	h.cfg.InitialRebalanceDelay = 0
	h.g = New("g", &h.cfg, h.now)
	var fx Effects
	h.g.Start(h.now, &fx)
	h.exec(&fx, nil)
	return h
}

// exec carries out both effect sets: the consumer records first (one
// write), then the classic effects, writes completing at once.
func (h *migHarness) exec(fx *Effects, cfx *ConsumerEffects) {
	h.t.Helper()
	if cfx != nil {
		h.written = append(h.written, ConsumerRecordsToProto("g", cfx.Records)...)
		for _, op := range cfx.Timers {
			h.setTimer(TimerOp{Key: op.Key(), After: op.After, Cancel: op.Cancel})
		}
	}
	for fx != nil {
		cur := *fx
		next := Effects{}
		for _, r := range cur.Replies {
			id := r.To.(int)
			if _, dup := h.replies[id]; dup {
				h.t.Fatalf("handle %d answered twice", id)
			}
			h.replies[id] = r.Msg
		}
		for _, op := range cur.Timers {
			h.setTimer(op)
		}
		for _, p := range cur.Persists {
			h.written = append(h.written, p.Records...)
			h.g.OnPersisted(h.now, p.Token, nil, &next)
		}
		fx = nil
		if len(next.Replies)+len(next.Timers)+len(next.Persists) > 0 {
			fx = &next
		}
	}
	h.check()
}

func (h *migHarness) setTimer(op TimerOp) {
	if op.Cancel {
		delete(h.timers, op.Key)
	} else {
		h.timers[op.Key] = h.now.Add(op.After)
	}
}

func (h *migHarness) advance(d time.Duration) {
	end := h.now.Add(d)
	for {
		var key TimerKey
		var at time.Time
		found := false
		for k, a := range h.timers {
			if !a.After(end) && (!found || a.Before(at) || a.Equal(at) && keyLess(k, key)) {
				key, at, found = k, a, true
			}
		}
		if !found {
			break
		}
		h.now = at
		delete(h.timers, key)
		var fx Effects
		var cfx ConsumerEffects
		if kind, ok := key.ConsumerKind(); ok {
			h.g.ConsumerTimer(kind, key.Member, h.now, &cfx, &fx)
		} else {
			h.g.OnTimer(h.now, key, &fx)
		}
		h.exec(&fx, &cfx)
	}
	h.now = end
}

// check asserts the invariants after a step.
func (h *migHarness) check() {
	h.t.Helper()
	owner := map[tpKey]string{}
	for _, c := range h.clients {
		c.held.each(func(k tpKey) {
			if o, dup := owner[k]; dup {
				h.t.Fatalf("%s-%d held by %s and %s", k.topic, k.partition, o, c.id)
			}
			owner[k] = c.id
		})
	}
	isConsumer := h.g.Consumer() != nil
	if isConsumer != h.wasConsumer {
		if isConsumer {
			h.toConsumer++
		} else {
			h.toClassic++
		}
		h.wasConsumer = isConsumer
	}
	r := RestoreConsumerGroup("g", &h.ccfg, h.topics, ConsumerRecordsFromProto(h.written))
	if cg := h.g.Consumer(); cg != nil {
		if r.epoch != cg.epoch || r.assignmentEpoch != cg.assignmentEpoch || !reflect.DeepEqual(r.Members(), cg.Members()) ||
			!reflect.DeepEqual(r.owners, cg.owners) {
			h.t.Fatalf("replay differs: %d/%d %+v, live %d/%d %+v", r.epoch, r.assignmentEpoch, r.Members(), cg.epoch, cg.assignmentEpoch, cg.Members())
		}
		if rec := h.lastClassic(); rec != nil && len(rec.GetMembers()) > 0 && cg.NumMembers() > 0 {
			h.t.Fatalf("a consumer group is attached and the classic record names members %v", rec.GetMembers())
		}
	} else if r.epoch != 0 || len(r.members) != 0 {
		h.t.Fatalf("classic group, and the consumer records rebuild epoch %d with %d members", r.epoch, len(r.members))
	}
}

func (h *migHarness) lastClassic() *pb.GroupRecord {
	for i := len(h.written) - 1; i >= 0; i-- {
		if g := h.written[i].GetGroup(); g != nil {
			return g
		}
	}
	return nil
}

func (h *migHarness) addClassic(bal assignor.Balancer, topics ...string) *migClient {
	h.ids++
	c := &migClient{id: fmt.Sprintf("c%d", h.ids), bal: bal, topics: topics, held: tpSet{}}
	h.clients = append(h.clients, c)
	return c
}

func (h *migHarness) addConsumer(topics ...string) *migClient {
	h.ids++
	c := &migClient{id: fmt.Sprintf("k%d", h.ids), memberID: fmt.Sprintf("k%d", h.ids), consumer: true, topics: topics, held: tpSet{}}
	h.clients = append(h.clients, c)
	return c
}

// classic sends a classic request as the group actor routes it.
func (h *migHarness) classic(req proto.Message) (int, proto.Message) {
	h.next++
	hd := h.next
	var fx Effects
	var cfx ConsumerEffects
	newID := fmt.Sprintf("n%d", hd)
	if resp, served := h.g.ServeClassic(req, newID, h.now, &cfx, &fx); served {
		h.exec(&fx, &cfx)
		return hd, resp
	}
	h.exec(nil, &cfx)
	switch r := req.(type) {
	case *pb.JoinGroupRequest:
		h.g.Join(h.now, r, newID, hd, &fx)
	case *pb.SyncGroupRequest:
		h.g.Sync(h.now, r, hd, &fx)
	case *pb.HeartbeatRequest:
		fx.reply(hd, HeartbeatAnswer(h.g.Heartbeat(h.now, r, &fx)))
	case *pb.LeaveGroupRequest:
		h.g.Leave(h.now, r, hd, &fx)
	case *pb.OffsetCommitRequest:
		h.g.Commit(h.now, r, hd, &fx)
	}
	h.exec(&fx, nil)
	return hd, h.replies[hd]
}

func (h *migHarness) consumerHB(req *ConsumerHeartbeatRequest) ConsumerHeartbeatResponse {
	var fx Effects
	var cfx ConsumerEffects
	resp := h.g.ConsumerHeartbeat(&h.ccfg, h.topics, req, h.now, &cfx, &fx)
	if resp.ErrorCode != ErrNone && len(cfx.Records) > 0 {
		h.t.Fatalf("error %d with records", resp.ErrorCode)
	}
	h.exec(&fx, &cfx)
	return resp
}

func (c *migClient) protocols() []*pb.Protocol {
	st := assignor.MemberState{Topics: c.topics, Generation: c.gen}
	if c.bal.IsCooperative() {
		st.Owned = c.held.list()
	}
	return []*pb.Protocol{{Name: c.bal.ProtocolName(), Metadata: c.bal.Metadata(st)}}
}

// step lets client c do its next action; it reports whether c is settled.
func (h *migHarness) step(c *migClient) bool {
	h.t.Helper()
	if c.gone {
		return true
	}
	if c.consumer {
		return h.stepConsumer(c)
	}
	if c.pending != 0 {
		msg, ok := h.replies[c.pending]
		if !ok {
			return false
		}
		c.pending = 0
		h.onClassic(c, msg)
		return false
	}
	switch c.state {
	case migJoin:
		if !c.bal.IsCooperative() {
			c.held = tpSet{} // eager: revoke everything before joining
			h.check()
		}
		hd, resp := h.classic(&pb.JoinGroupRequest{ApiVersion: 9, GroupId: "g", MemberId: c.memberID, GroupInstanceId: c.instanceID(), ClientId: c.id,
			SessionTimeoutMs: 10000, RebalanceTimeoutMs: 20000, ProtocolType: "consumer", Protocols: c.protocols()})
		c.pendingKind = migJoin
		if resp == nil {
			c.pending = hd
			return false
		}
		h.onClassic(c, resp)
	case migSync:
		hd, resp := h.classic(&pb.SyncGroupRequest{GroupId: "g", MemberId: c.memberID, GroupInstanceId: c.instanceID(), GenerationId: c.gen, Assignments: c.leaderPlan})
		c.pendingKind = migSync
		if resp == nil {
			c.pending = hd
			return false
		}
		h.onClassic(c, resp)
	case migStable:
		_, resp := h.classic(&pb.HeartbeatRequest{GroupId: "g", MemberId: c.memberID, GroupInstanceId: c.instanceID(), GenerationId: c.gen})
		c.pendingKind = migStable
		h.onClassic(c, resp)
		return c.state == migStable
	}
	return false
}

func (h *migHarness) onClassic(c *migClient, msg proto.Message) {
	h.t.Helper()
	switch r := msg.(type) {
	case *pb.JoinGroupResponse:
		switch r.GetErrorCode() {
		case ErrNone:
			c.memberID, c.gen, c.state = r.GetMemberId(), r.GetGenerationId(), migSync
			c.leaderPlan = nil
			if len(r.GetMembers()) > 0 {
				c.leaderPlan = h.lead(c, r.GetMembers())
			}
		case ErrMemberIDRequired:
			c.memberID = r.GetMemberId()
		case ErrRebalanceInProgress:
		default:
			h.t.Fatalf("%s: JoinGroup refused with %d", c.id, r.GetErrorCode())
		}
	case *pb.SyncGroupResponse:
		switch r.GetErrorCode() {
		case ErrNone:
			a, err := assignor.DecodeAssignment(r.GetAssignment())
			if err != nil {
				h.t.Fatalf("%s: assignment %v", c.id, err)
			}
			got := newTPSet(a.Topics)
			revoked := c.held.filter(func(k tpKey) bool { return !got.has(k.topic, k.partition) })
			c.held, c.state = got, migStable
			if c.bal.IsCooperative() && revoked.len() > 0 {
				c.state = migJoin
			}
		case ErrRebalanceInProgress:
			c.state = migJoin
		default:
			c.lose(h)
		}
	case *pb.HeartbeatResponse:
		switch r.GetErrorCode() {
		case ErrNone:
		case ErrRebalanceInProgress:
			c.state = migJoin
		default:
			c.lose(h)
		}
	}
	h.check()
}

// lose is the client losing its partitions (ILLEGAL_GENERATION,
// UNKNOWN_MEMBER_ID) and rejoining.
func (c *migClient) lose(h *migHarness) {
	c.lost++
	c.held, c.state, c.gen = tpSet{}, migJoin, -1
}

// lead computes the leader's assignment as a client does: the balancer's
// plan, and for a cooperative one without the partitions another member
// still owns (they follow in the next rebalance).
func (h *migHarness) lead(c *migClient, members []*pb.JoinGroupMember) []*pb.SyncGroupAssignment {
	in := make([]assignor.Member, 0, len(members))
	owned := map[tpKey]string{}
	for _, m := range members {
		sub, err := assignor.DecodeSubscription(m.GetMetadata())
		if err != nil {
			h.t.Fatal(err)
		}
		in = append(in, assignor.Member{ID: m.GetMemberId(), Subscription: sub})
		newTPSet(sub.OwnedPartitions).each(func(k tpKey) { owned[k] = m.GetMemberId() })
	}
	plan := c.bal.Balance(in, h.topics)
	var out []*pb.SyncGroupAssignment
	for _, ma := range plan.Members() {
		s := newTPSet(ma.Topics)
		if c.bal.IsCooperative() {
			s = s.filter(func(k tpKey) bool { o, ok := owned[k]; return !ok || o == ma.MemberID })
		}
		a := assignor.Assignment{Version: 3, Topics: s.list()}
		out = append(out, &pb.SyncGroupAssignment{MemberId: ma.MemberID, Assignment: a.AppendTo(nil)})
	}
	return out
}

func (h *migHarness) stepConsumer(c *migClient) bool {
	h.t.Helper()
	var req *ConsumerHeartbeatRequest
	if c.state == migJoin {
		req = cgJoin(c.memberID, c.topics...)
		req.InstanceID = c.instanceID()
	} else {
		req = cgBeat(c.memberID, c.gen, c.held.list())
	}
	resp := h.consumerHB(req)
	switch resp.ErrorCode {
	case ErrNone:
		c.gen, c.state = resp.MemberEpoch, migStable
		if resp.HasAssignment {
			c.held = newTPSet(resp.Assignment)
		}
	case ErrFencedMemberEpoch, ErrUnknownMemberID:
		c.held, c.state = tpSet{}, migJoin
	default:
		h.t.Fatalf("%s: ConsumerGroupHeartbeat refused with %d (%s)", c.id, resp.ErrorCode, resp.ErrorMessage)
	}
	h.check()
	if cg := h.g.Consumer(); cg != nil {
		m := cg.members[c.memberID]
		return m != nil && m.state == MemberStable && m.epoch == cg.epoch && m.assigned.equal(c.held)
	}
	return true
}

// leaveClient makes c leave the group as its protocol does, giving up its
// partitions first.
func (h *migHarness) leaveClient(c *migClient) {
	c.held = tpSet{}
	c.gone = true
	if c.consumer {
		if resp := h.consumerHB(cgBeat(c.memberID, EpochLeave, nil)); resp.ErrorCode != ErrNone {
			h.t.Fatalf("%s: leave refused with %d", c.id, resp.ErrorCode)
		}
		return
	}
	h.classic(&pb.LeaveGroupRequest{GroupId: "g", Members: []*pb.MemberIdentity{{MemberId: c.memberID}}})
}

// settle runs the clients until all are settled twice in a row and the
// group is stable, advancing time a little between rounds.
func (h *migHarness) settle() {
	h.t.Helper()
	calm := 0
	for round := 0; round < 400; round++ {
		all := true
		for _, c := range h.clients {
			if !h.step(c) {
				all = false
			}
		}
		stable := h.g.State() == Stable || h.g.Consumer() != nil && h.g.Consumer().State() == "Stable"
		if all && stable {
			if calm++; calm == 2 {
				return
			}
		} else {
			calm = 0
		}
		h.advance(100 * time.Millisecond)
	}
	h.t.Fatalf("the group did not settle: classic %v, consumer %v", h.g.State(), h.g.Consumer() != nil)
}

// covered asserts that every partition is held by some live client.
func (h *migHarness) covered() {
	h.t.Helper()
	n := 0
	for _, c := range h.clients {
		n += c.held.len()
	}
	want := 0
	for _, p := range h.topics {
		want += int(p)
	}
	if n != want {
		h.t.Fatalf("clients hold %d partitions, want %d", n, want)
	}
}

// A classic group of eager (range) or cooperative (cooperative-sticky)
// members is upgraded one member at a time to the consumer protocol, then
// downgraded one member at a time: no partition is ever held twice, no join
// is refused, the group converts once each way, and the records rebuild
// the group at every step.
func TestMigrationRollingUpgradeAndDowngrade(t *testing.T) {
	for _, bal := range []assignor.Balancer{assignor.Range(), assignor.CooperativeSticky()} {
		t.Run(bal.ProtocolName(), func(t *testing.T) {
			h := newMigHarness(t, map[string]int32{"t": 6, "u": 4})
			for range 3 {
				h.addClassic(bal, "t", "u")
			}
			h.settle()
			h.covered()
			if h.g.Consumer() != nil || h.g.NumMembers() != 3 {
				t.Fatalf("not a classic group of 3: consumer %v, %d members", h.g.Consumer() != nil, h.g.NumMembers())
			}
			// Upgrade: each classic member is replaced by a consumer one.
			for i := range 3 {
				h.leaveClient(h.clients[i])
				h.addConsumer("t", "u")
				h.settle()
				h.covered()
				if cg := h.g.Consumer(); cg == nil || cg.NumMembers() != 3 || cg.numConsumerProtocol() != i+1 {
					t.Fatalf("upgrade step %d: consumer group %v", i, cg != nil)
				}
			}
			if n := h.g.Consumer().numConsumerProtocol(); n != 3 || h.toConsumer != 1 || h.toClassic != 0 {
				t.Fatalf("after the upgrade: %d consumer members, conversions %d/%d", n, h.toConsumer, h.toClassic)
			}
			// Downgrade: each consumer member is replaced by a classic one.
			for i := range 3 {
				h.leaveClient(h.clients[3+i])
				h.addClassic(bal, "t", "u")
				h.settle()
				h.covered()
				if cg := h.g.Consumer(); i < 2 && (cg == nil || cg.NumMembers() != 3 || cg.numConsumerProtocol() != 2-i) {
					t.Fatalf("downgrade step %d: consumer group %v", i, cg != nil)
				}
			}
			if h.g.Consumer() != nil || h.g.NumMembers() != 3 || h.toConsumer != 1 || h.toClassic != 1 {
				t.Fatalf("after the downgrade: consumer %v, %d classic members, conversions %d/%d", h.g.Consumer() != nil, h.g.NumMembers(), h.toConsumer, h.toClassic)
			}
		})
	}
}

// Each refusal of an upgrade answers GROUP_ID_NOT_FOUND with Kafka's
// message, and the group stays classic with its members, nothing written.
func TestMigrationUpgradeRefusals(t *testing.T) {
	const prefix = "Cannot upgrade classic group g to consumer group because "
	for _, tc := range []struct {
		name   string
		mutate func(h *migHarness)
		msg    string
	}{
		{"policy disabled", func(h *migHarness) { h.ccfg.MigrationPolicy = MigrationDisabled }, "online upgrade is disabled."},
		{"policy downgrade only", func(h *migHarness) { h.ccfg.MigrationPolicy = MigrationDowngrade }, "online upgrade is disabled."},
		{"not the consumer protocol", func(h *migHarness) { h.g.protocolType = "connect" }, "the group does not use the consumer embedded protocol."},
		{"max size", func(h *migHarness) { h.ccfg.MaxSize = 1 }, "the group size exceeds the consumer group maximum size."},
		{"malformed metadata", func(h *migHarness) {
			h.g.order[0].protocols = []*pb.Protocol{{Name: "range", Metadata: []byte{0, 1, 0xff}}}
		}, "the embedded consumer protocol is malformed."},
		{"userData", func(h *migHarness) {
			a := assignor.Assignment{Version: 3, Topics: h.clients[0].held.list(), UserData: []byte("x")}
			h.g.order[0].assignment = a.AppendTo(nil)
		}, "an unsupported custom assignor is in use. Please refer to the documentation or switch to a default assignor before re-attempting the upgrade."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newMigHarness(t, map[string]int32{"t": 4})
			h.addClassic(assignor.Range(), "t")
			h.addClassic(assignor.Range(), "t")
			h.settle()
			tc.mutate(h)
			before := len(h.written)
			resp := h.consumerHB(cgJoin("k", "t"))
			if resp.ErrorCode != ErrGroupIDNotFound || resp.ErrorMessage != prefix+tc.msg {
				t.Fatalf("answer %d %q", resp.ErrorCode, resp.ErrorMessage)
			}
			if h.g.Consumer() != nil || h.g.NumMembers() != 2 || len(h.written) != before {
				t.Fatalf("consumer %v, %d members, %d records written", h.g.Consumer() != nil, h.g.NumMembers(), len(h.written)-before)
			}
		})
	}
	// A heartbeat at an epoch other than 0 finds no consumer group.
	h := newMigHarness(t, map[string]int32{"t": 4})
	h.addClassic(assignor.Range(), "t")
	h.settle()
	if resp := h.consumerHB(cgBeat("k", 3, nil)); resp.ErrorCode != ErrGroupIDNotFound || resp.ErrorMessage != "Group g is not a consumer group." {
		t.Fatalf("answer %d %q", resp.ErrorCode, resp.ErrorMessage)
	}
}

// Classic requests to a consumer group: with the policy disabled, today's
// refusals; otherwise each classic rule answers with Kafka's code. An
// empty consumer group becomes classic on a JoinGroup whatever the policy.
func TestMigrationClassicMembersInConsumerGroup(t *testing.T) {
	meta := assignor.Range().Metadata(assignor.MemberState{Topics: []string{"t"}, Generation: -1})
	join := func(id string, version int32) *pb.JoinGroupRequest {
		return &pb.JoinGroupRequest{ApiVersion: version, GroupId: "g", MemberId: id, ClientId: "cl", SessionTimeoutMs: 10000,
			RebalanceTimeoutMs: 20000, ProtocolType: "consumer", Protocols: []*pb.Protocol{{Name: "range", Metadata: meta}}}
	}
	h := newMigHarness(t, map[string]int32{"t": 4})
	k := h.addConsumer("t")
	h.settle()
	h.ccfg.MigrationPolicy = MigrationDisabled
	if _, r := h.classic(join("", 9)); r.(*pb.JoinGroupResponse).GetErrorCode() != ErrInconsistentGroupProto {
		t.Fatalf("disabled: %v", r)
	}
	h.ccfg.MigrationPolicy = MigrationBidirectional
	_, r := h.classic(join("", 9))
	jr := r.(*pb.JoinGroupResponse)
	if jr.GetErrorCode() != ErrMemberIDRequired || jr.GetMemberId() != "cl-n2" {
		t.Fatalf("v9 unknown member: %v", jr)
	}
	bad := join(jr.GetMemberId(), 9)
	bad.ProtocolType = "connect"
	if _, r := h.classic(bad); r.(*pb.JoinGroupResponse).GetErrorCode() != ErrInconsistentGroupProto {
		t.Fatalf("protocol type: %v", r)
	}
	_, r = h.classic(join(jr.GetMemberId(), 9))
	jr = r.(*pb.JoinGroupResponse)
	if jr.GetErrorCode() != ErrNone || jr.GetLeader() != "" || len(jr.GetMembers()) != 0 || jr.GetProtocolName() != "range" {
		t.Fatalf("join: %v", jr)
	}
	id, gen := jr.GetMemberId(), jr.GetGenerationId()
	// A classic member commits at its generation (its member epoch); at
	// another it is told ILLEGAL_GENERATION, as a classic group tells it.
	commit := func(g int32) int32 {
		_, r := h.classic(&pb.OffsetCommitRequest{GroupId: "g", MemberId: id, GenerationId: g,
			Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 1}}}}})
		if r == nil {
			return -100 // not answered yet (written by exec)
		}
		return r.(*pb.OffsetCommitResponse).GetTopics()[0].GetPartitions()[0].GetErrorCode()
	}
	if code := commit(gen + 1); code != ErrIllegalGeneration {
		t.Fatalf("classic member's commit at another generation: %d", code)
	}
	if code := commit(gen); code != ErrNone {
		t.Fatalf("classic member's commit at its generation: %d", code)
	}
	if _, r := h.classic(&pb.SyncGroupRequest{GroupId: "g", MemberId: id, GenerationId: gen + 1}); r.(*pb.SyncGroupResponse).GetErrorCode() != ErrIllegalGeneration {
		t.Fatalf("sync at another generation: %v", r)
	}
	if _, r := h.classic(&pb.SyncGroupRequest{GroupId: "g", MemberId: k.memberID, GenerationId: gen}); r.(*pb.SyncGroupResponse).GetErrorCode() != ErrUnknownMemberID {
		t.Fatalf("sync of a consumer-protocol member: %v", r)
	}
	// The consumer member still holds what the new member's target
	// gives it: the classic member must wait and is told to rejoin.
	if _, r := h.classic(&pb.HeartbeatRequest{GroupId: "g", MemberId: id, GenerationId: gen}); r.(*pb.HeartbeatResponse).GetErrorCode() != ErrNone {
		t.Fatalf("heartbeat while waiting: %v", r)
	}
	h.step(k) // told to revoke
	h.step(k) // releases
	if _, r := h.classic(&pb.HeartbeatRequest{GroupId: "g", MemberId: id, GenerationId: gen}); r.(*pb.HeartbeatResponse).GetErrorCode() != ErrRebalanceInProgress {
		t.Fatalf("heartbeat once released: %v", r)
	}
	if _, ok := h.timers[TimerKey{Kind: TimerConsumerJoin, Member: id}]; !ok {
		t.Fatal("no join timeout armed")
	}
	// The member does not rejoin: its join timeout fences it; the group
	// keeps its consumer member and stays a consumer group.
	for range 30 {
		h.step(k)
		h.advance(time.Second)
	}
	if cg := h.g.Consumer(); cg == nil || cg.NumMembers() != 1 {
		t.Fatalf("after the join timeout: consumer %v", cg != nil)
	}
	// The last member leaves; a JoinGroup takes the empty group whatever
	// the policy, and the consumer records are gone.
	h.leaveClient(k)
	h.ccfg.MigrationPolicy = MigrationDisabled
	c := h.addClassic(assignor.Range(), "t")
	h.settle()
	if h.g.Consumer() != nil || !h.g.HasMember(c.memberID) || h.toClassic != 1 {
		t.Fatalf("the empty consumer group was not taken: consumer %v", h.g.Consumer() != nil)
	}
}

// A downgrade keeps the generation the classic members know (the group
// epoch before the last consumer-protocol member left), so their next
// heartbeat is told REBALANCE_IN_PROGRESS, not ILLEGAL_GENERATION, which
// ends a client's session.
func TestMigrationDowngradeKeepsTheClassicGeneration(t *testing.T) {
	h := newMigHarness(t, map[string]int32{"t": 4})
	c := h.addClassic(assignor.CooperativeSticky(), "t")
	h.settle()
	k := h.addConsumer("t")
	h.settle()
	epoch := h.g.Consumer().Epoch()
	if c.gen != epoch {
		t.Fatalf("classic member at generation %d, group epoch %d", c.gen, epoch)
	}
	h.leaveClient(k)
	if h.g.Consumer() != nil || h.g.Generation() != epoch {
		t.Fatalf("after the downgrade: consumer %v, generation %d, want %d", h.g.Consumer() != nil, h.g.Generation(), epoch)
	}
	_, r := h.classic(&pb.HeartbeatRequest{GroupId: "g", MemberId: c.memberID, GenerationId: c.gen})
	if code := r.(*pb.HeartbeatResponse).GetErrorCode(); code != ErrRebalanceInProgress {
		t.Fatalf("classic member's heartbeat after the downgrade: %d, want REBALANCE_IN_PROGRESS", code)
	}
}
