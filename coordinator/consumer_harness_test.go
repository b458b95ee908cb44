package coordinator

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/assignor"
)

// cgHarness drives a ConsumerGroup the way its owner will: it keeps the
// records written so far and the armed timers, fires due timers as virtual
// time advances, and after every call checks the machine's invariants and
// that replaying the records rebuilds the same group.
type cgHarness struct {
	t         testing.TB
	cfg       ConsumerConfig
	g         *ConsumerGroup
	topics    map[string]int32
	now       time.Time
	records   []ConsumerRecord
	timers    map[cgTimerKey]time.Time
	removed   []string // members removed by timers, in order
	removedBy map[ConsumerTimerKind]int
	// replayEvery: replay the records at every n-th check (1 when zero).
	replayEvery, checks int
	// ownerTopics, when set, is a catalog the owner holds but has not
	// handed the group yet: it does so when the regex timer fires, as the
	// group actor does (it reads the catalog before every regex fire).
	ownerTopics map[string]int32
}

type cgTimerKey struct {
	kind   ConsumerTimerKind
	member string
}

var cgT0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func newCGHarness(t testing.TB, topics map[string]int32) *cgHarness {
	h := &cgHarness{t: t, cfg: DefaultConsumerConfig(), topics: topics, now: cgT0, timers: map[cgTimerKey]time.Time{}}
	h.g = NewConsumerGroup("g", &h.cfg, topics)
	return h
}

func (h *cgHarness) apply(fx *ConsumerEffects) {
	h.records = append(h.records, fx.Records...)
	for _, op := range fx.Timers {
		k := cgTimerKey{op.Kind, op.Member}
		if op.Cancel {
			delete(h.timers, k)
		} else {
			h.timers[k] = h.now.Add(op.After)
		}
	}
	h.check()
}

func (h *cgHarness) hb(req *ConsumerHeartbeatRequest) ConsumerHeartbeatResponse {
	h.t.Helper()
	var fx ConsumerEffects
	resp := h.g.Heartbeat(req, h.now, &fx)
	if resp.ErrorCode != ErrNone && (len(fx.Records) > 0 || len(fx.Timers) > 0) {
		h.t.Fatalf("error %d with effects %+v", resp.ErrorCode, fx)
	}
	h.apply(&fx)
	return resp
}

func (h *cgHarness) setTopics(topics map[string]int32) {
	var fx ConsumerEffects
	h.topics = topics
	h.g.SetTopics(topics, h.now, &fx)
	h.apply(&fx)
}

// advance moves virtual time forward by d, firing due timers in deadline
// order (ties by kind, then member id).
func (h *cgHarness) advance(d time.Duration) {
	end := h.now.Add(d)
	for {
		var next *cgTimerKey
		for k, at := range h.timers {
			if at.After(end) {
				continue
			}
			if next == nil || at.Before(h.timers[*next]) || at.Equal(h.timers[*next]) &&
				(k.kind < next.kind || k.kind == next.kind && k.member < next.member) {
				k := k
				next = &k
			}
		}
		if next == nil {
			break
		}
		h.now = h.timers[*next]
		delete(h.timers, *next)
		var fx ConsumerEffects
		if next.kind == ConsumerTimerRegex && h.ownerTopics != nil {
			h.topics, h.ownerTopics = h.ownerTopics, nil
			h.g.SetTopics(h.topics, h.now, &fx)
		}
		if h.g.OnTimer(next.kind, next.member, h.now, &fx) {
			h.removed = append(h.removed, next.member)
			if h.removedBy != nil {
				h.removedBy[next.kind]++
			}
		}
		h.apply(&fx)
	}
	h.now = end
}

func (h *cgHarness) member(id string) ConsumerMemberView {
	h.t.Helper()
	for _, m := range h.g.Members() {
		if m.MemberID == id {
			return m
		}
	}
	h.t.Fatalf("no member %s", id)
	return ConsumerMemberView{}
}

// check asserts the invariants: every partition is in at most one member's
// assigned or pending-revocation set, the owners index matches those sets,
// and replaying the records gives the same group.
func (h *cgHarness) check() {
	h.t.Helper()
	seen := map[tpKey]string{}
	for id, m := range h.g.members {
		for _, s := range []tpSet{m.assigned, m.pending} {
			s.each(func(k tpKey) {
				if other, dup := seen[k]; dup {
					h.t.Fatalf("%s-%d owned by %s and %s", k.topic, k.partition, other, id)
				}
				seen[k] = id
				if o := h.g.owners[k]; o.member != id {
					h.t.Fatalf("%s-%d: owners index says %q, member %s holds it", k.topic, k.partition, o.member, id)
				}
			})
		}
	}
	if len(seen) != len(h.g.owners) {
		h.t.Fatalf("owners index has %d partitions, members hold %d", len(h.g.owners), len(seen))
	}
	if h.checks++; h.replayEvery > 1 && h.checks%h.replayEvery != 0 {
		return
	}
	// Replayed as the store keeps them: as protobuf records.
	r := RestoreConsumerGroup("g", &h.cfg, h.topics, ConsumerRecordsFromProto(ConsumerRecordsToProto("g", h.records)))
	if r.epoch != h.g.epoch || r.assignmentEpoch != h.g.assignmentEpoch {
		h.t.Fatalf("replay: epochs %d/%d, live %d/%d", r.epoch, r.assignmentEpoch, h.g.epoch, h.g.assignmentEpoch)
	}
	if got, want := r.Members(), h.g.Members(); !reflect.DeepEqual(got, want) {
		h.t.Fatalf("replay differs:\n got %#v\nwant %#v", got, want)
	}
	if !reflect.DeepEqual(r.static, h.g.static) || !reflect.DeepEqual(r.owners, h.g.owners) {
		h.t.Fatalf("replay: static %v owners %v, live %v %v", r.static, r.owners, h.g.static, h.g.owners)
	}
}

func cgJoin(id string, topics ...string) *ConsumerHeartbeatRequest {
	return &ConsumerHeartbeatRequest{
		Version: 1, GroupID: "g", MemberID: id, MemberEpoch: 0, RebalanceTimeoutMs: 30000,
		SubscribedTopicNames: append([]string{}, topics...), Topics: []assignor.TopicPartitions{},
	}
}

func cgBeat(id string, epoch int32, owned []assignor.TopicPartitions) *ConsumerHeartbeatRequest {
	return &ConsumerHeartbeatRequest{Version: 1, GroupID: "g", MemberID: id, MemberEpoch: epoch, RebalanceTimeoutMs: -1, Topics: owned}
}

// tps builds a partition list: tps("a", 0, 1, "b", 2) is a-0, a-1, b-2.
func tps(args ...any) []assignor.TopicPartitions {
	out := []assignor.TopicPartitions{}
	for _, a := range args {
		switch a := a.(type) {
		case string:
			out = append(out, assignor.TopicPartitions{Topic: a, Partitions: []int32{}})
		case int:
			last := &out[len(out)-1]
			last.Partitions = append(last.Partitions, int32(a))
		}
	}
	return newTPSet(out).list()
}

func countParts(l []assignor.TopicPartitions) int {
	n := 0
	for _, tp := range l {
		n += len(tp.Partitions)
	}
	return n
}

func fmtParts(l []assignor.TopicPartitions) string {
	s := ""
	for _, tp := range l {
		s += fmt.Sprintf("%s%v ", tp.Topic, tp.Partitions)
	}
	return s
}

func wantResp(t testing.TB, got ConsumerHeartbeatResponse, code int32, epoch int32, assignment []assignor.TopicPartitions) {
	t.Helper()
	if got.ErrorCode != code {
		t.Fatalf("error %d (%s), want %d", got.ErrorCode, got.ErrorMessage, code)
	}
	if code != ErrNone {
		return
	}
	if got.MemberEpoch != epoch {
		t.Fatalf("epoch %d, want %d", got.MemberEpoch, epoch)
	}
	if assignment == nil {
		if got.HasAssignment {
			t.Fatalf("assignment %s, want none", fmtParts(got.Assignment))
		}
		return
	}
	if !got.HasAssignment || !slices.EqualFunc(got.Assignment, assignment, func(a, b assignor.TopicPartitions) bool {
		return a.Topic == b.Topic && slices.Equal(a.Partitions, b.Partitions)
	}) {
		t.Fatalf("assignment %s (sent %v), want %s", fmtParts(got.Assignment), got.HasAssignment, fmtParts(assignment))
	}
}
