package coordinator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

const ms = time.Millisecond

func strp(s string) *string { return &s }

// diffMsg reports a readable difference between two messages, "" if equal.
func diffMsg(want, got proto.Message) string {
	if proto.Equal(want, got) {
		return ""
	}
	o := prototext.MarshalOptions{Multiline: true, EmitUnknown: true}
	w := strings.Split(strings.TrimSpace(o.Format(want)), "\n")
	g := strings.Split(strings.TrimSpace(o.Format(got)), "\n")
	var b strings.Builder
	b.WriteString("(-want +got)\n")
	i, j := 0, 0
	for i < len(w) || j < len(g) {
		switch {
		case i < len(w) && j < len(g) && strings.TrimSpace(w[i]) == strings.TrimSpace(g[j]):
			fmt.Fprintf(&b, "  %s\n", w[i])
			i, j = i+1, j+1
		default:
			if i < len(w) {
				fmt.Fprintf(&b, "- %s\n", w[i])
				i++
			}
			if j < len(g) {
				fmt.Fprintf(&b, "+ %s\n", g[j])
				j++
			}
		}
	}
	return b.String()
}

func checkMsg(t testing.TB, what string, want, got proto.Message) {
	t.Helper()
	if d := diffMsg(want, got); d != "" {
		t.Errorf("%s mismatch %s", what, d)
	}
}

// elapsed is the virtual time since t0.
func (h *harness) elapsed() time.Duration { return h.now.Sub(t0) }

// deadline returns when the timer under key fires, if it is armed. For a
// member whose heartbeats extended its session past the armed timer, that
// is when the session ends (the timer re-arms when it fires).
func (h *harness) deadline(key TimerKey) (time.Duration, bool) {
	d, ok := h.timers[key]
	if m := h.g.members.get(key.Member); ok && key.Kind == TimerMember && m != nil && m.sessionUntil != 0 {
		d = sessionEnd(h.g, m)
	}
	return d.Sub(t0), ok
}

// sessionEnd is when m's extended session ends (m.sessionUntil != 0).
func sessionEnd(g *Group, m *member) time.Time { return g.epoch.Add(time.Duration(m.sessionUntil)) }

func memberKey(id string) TimerKey { return TimerKey{Kind: TimerMember, Member: id} }

var (
	joinKey   = TimerKey{Kind: TimerJoin}
	syncKey   = TimerKey{Kind: TimerSync}
	expiryKey = TimerKey{Kind: TimerOffsetExpiry}
)

// wantDeadline fails unless key is armed to fire at t0+want.
func (h *harness) wantDeadline(key TimerKey, want time.Duration) {
	h.t.Helper()
	got, ok := h.deadline(key)
	if !ok {
		h.t.Fatalf("timer %v/%q not armed, want it at %v", key.Kind, key.Member, want)
	}
	if got != want {
		h.t.Fatalf("timer %v/%q fires at %v, want %v", key.Kind, key.Member, got, want)
	}
}

func (h *harness) wantNoTimer(key TimerKey) {
	h.t.Helper()
	if got, ok := h.deadline(key); ok {
		h.t.Fatalf("timer %v/%q armed at %v, want none", key.Kind, key.Member, got)
	}
}

// wantState fails unless the group has the state, generation and members.
func (h *harness) wantState(state State, gen int32, members ...string) {
	h.t.Helper()
	if h.g.State() != state || h.g.Generation() != gen {
		h.t.Fatalf("group is %v gen %d, want %v gen %d", h.g.State(), h.g.Generation(), state, gen)
	}
	if got := h.g.MemberIDs(); strings.Join(got, ",") != strings.Join(members, ",") {
		h.t.Fatalf("members %q, want %q", got, members)
	}
	for _, id := range members {
		if !h.g.HasMember(id) {
			h.t.Fatalf("HasMember(%q) is false", id)
		}
	}
	if h.g.HasMember("not-a-member") {
		h.t.Fatal("HasMember of an absent id is true")
	}
}

// takeWritten returns the records written since the last call.
func (h *harness) takeWritten() []*pb.Record {
	w := h.written
	h.written = nil
	return w
}

// groupRecords returns the group records among recs.
func groupRecords(recs []*pb.Record) []*pb.GroupRecord {
	var out []*pb.GroupRecord
	for _, r := range recs {
		if g := r.GetGroup(); g != nil {
			out = append(out, g)
		}
	}
	return out
}

// syncGroup sends the SyncGroups of a generation (the first id carries the
// assignment "a-<id>" for everyone) and returns the handles.
func (h *harness) syncGroup(gen int32, leader string, ids ...string) map[string]int {
	h.t.Helper()
	out := map[string]int{}
	var as []*pb.SyncGroupAssignment
	for _, id := range ids {
		as = append(as, &pb.SyncGroupAssignment{MemberId: id, Assignment: []byte("a-" + id)})
	}
	for _, id := range ids {
		req := &pb.SyncGroupRequest{MemberId: id, GenerationId: gen}
		if id == leader {
			req.Assignments = as
		}
		out[id] = h.sync(req)
	}
	return out
}

// joinOK returns the successful answer of a JoinGroup handle.
func (h *harness) joinOK(hd int) *pb.JoinGroupResponse {
	h.t.Helper()
	r := answer[*pb.JoinGroupResponse](h, hd)
	if r.ErrorCode != ErrNone {
		h.t.Fatalf("join handle %d: error %d", hd, r.ErrorCode)
	}
	return r
}

func (h *harness) joinCode(hd int) int32 {
	h.t.Helper()
	return answer[*pb.JoinGroupResponse](h, hd).ErrorCode
}

func (h *harness) syncCode(hd int) int32 {
	h.t.Helper()
	return answer[*pb.SyncGroupResponse](h, hd).ErrorCode
}

func (h *harness) wantParked(hds ...int) {
	h.t.Helper()
	for _, hd := range hds {
		if !h.parked[hd] {
			h.t.Fatalf("handle %d answered (%v), want it parked", hd, h.replies[hd])
		}
	}
}

// consumerMeta is a ConsumerProtocol v0 subscription to topics.
func consumerMeta(topics ...string) []byte {
	b := []byte{0, 0, 0, 0, 0, byte(len(topics))}
	for _, t := range topics {
		b = append(b, 0, byte(len(t)))
		b = append(b, t...)
	}
	return b
}

func protos(names ...string) []*pb.Protocol {
	out := make([]*pb.Protocol, len(names))
	for i, n := range names {
		out[i] = &pb.Protocol{Name: n, Metadata: []byte(n)}
	}
	return out
}

// heldReplies returns every reply handle the group still owes an answer to.
func heldReplies(g *Group) map[ReplyTo]bool {
	held := map[ReplyTo]bool{}
	add := func(r ReplyTo) {
		if r != nil {
			held[r] = true
		}
	}
	for _, m := range g.order {
		add(m.joinReply)
		add(m.syncReply)
	}
	for _, op := range g.inflight {
		switch w := op.(type) {
		case *commitWrite:
			add(w.reply)
		case *replyWrite:
			add(w.reply)
		case *deleteWrite:
			add(w.reply)
		case *staticReplaceWrite:
			// answered through the member's parked JoinGroup
		case *generationWrite:
			for _, r := range w.replies {
				add(r.To)
			}
		}
	}
	return held
}

// commitCode returns the code of one partition in a commit answer.
func (h *harness) commitCode(hd int, topic string, partition int32) int32 {
	h.t.Helper()
	r := answer[*pb.OffsetCommitResponse](h, hd)
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if t.Name == topic && p.Partition == partition {
				return p.ErrorCode
			}
		}
	}
	h.t.Fatalf("commit answer %v has no %s-%d", r, topic, partition)
	return 0
}

// fetchOne fetches one partition's committed offset.
func (h *harness) fetchOne(topic string, partition int32, requireStable bool) *pb.OffsetFetchPartition {
	h.t.Helper()
	r := h.g.Fetch(&pb.OffsetFetchRequest{GroupId: "g", Topics: []*pb.TopicPartitions{{Name: topic, Partitions: []int32{partition}}}, RequireStable: requireStable})
	return r.Topics[0].Partitions[0]
}

// nextID is the member id the next unknown-id join with this client or
// instance id will get.
func (h *harness) nextID(prefix string) string { return fmt.Sprintf("%s-id%d", prefix, h.ids+1) }
