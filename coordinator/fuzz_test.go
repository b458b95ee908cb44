package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// fuzzInput hands out the fuzzer's bytes as small choices.
type fuzzInput struct {
	b []byte
	i int
}

func (f *fuzzInput) more() bool { return f.i < len(f.b) }

func (f *fuzzInput) next() byte {
	if f.i >= len(f.b) {
		return 0
	}
	v := f.b[f.i]
	f.i++
	return v
}

func (f *fuzzInput) pick(n int) int { return int(f.next()) % n }

func pickOf[T any](f *fuzzInput, xs ...T) T { return xs[f.pick(len(xs))] }

// groupDriver sends fuzzer-chosen requests (valid and invalid) to a group
// through the harness, which checks the invariants after every step.
type groupDriver struct {
	h     *harness
	in    *fuzzInput
	known []string // every member or pending id seen so far
	big   []byte   // metadata larger than MaxRecordBytes
}

func (d *groupDriver) remember() {
	ids := d.h.g.MemberIDs()
	for id := range d.h.g.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if !slices.Contains(d.known, id) {
			d.known = append(d.known, id)
		}
	}
}

// current picks a current member (the leader more often) with its
// instance id, for well-formed requests.
func (d *groupDriver) current() (string, *string, bool) {
	ids := d.h.g.MemberIDs()
	if len(ids) == 0 {
		return "", nil, false
	}
	id := ids[d.in.pick(len(ids))]
	if d.in.pick(2) == 0 {
		id = d.h.g.Leader()
	}
	return id, cloneOpt(d.h.g.members.get(id).instanceID), true
}

func (d *groupDriver) wellFormed() bool { return d.in.pick(4) != 0 }

func (d *groupDriver) memberID() string {
	f := d.in
	if len(d.known) == 0 || f.pick(5) == 0 {
		return pickOf(f, "", "bogus", "c1-id1")
	}
	return d.known[f.pick(len(d.known))]
}

func (d *groupDriver) instance() *string {
	return pickOf(d.in, nil, nil, strp("i1"), strp("i2"))
}

func (d *groupDriver) generation() int32 {
	g := d.h.g.Generation()
	return pickOf(d.in, g, g, g-1, g+1, -1, 0)
}

func (d *groupDriver) metadata() []byte {
	return pickOf(d.in, consumerMeta("t1"), consumerMeta("t1"), consumerMeta("t1", "t2"), consumerMeta("t2"), []byte{1, 2, 3}, nil, d.big)
}

func (d *groupDriver) protocols() []*pb.Protocol {
	names := pickOf(d.in, []string{"range"}, []string{"range"}, []string{"rr"}, []string{"range", "rr"}, []string{"rr", "range"}, []string{}, []string{"sticky", "range"})
	out := make([]*pb.Protocol, len(names))
	for i, n := range names {
		out[i] = &pb.Protocol{Name: n, Metadata: d.metadata()}
	}
	return out
}

func (d *groupDriver) groupID() string { return pickOf(d.in, "g", "g", "g", "g", "g", "g", "g", "") }

func (d *groupDriver) topics() []*pb.OffsetCommitTopic {
	f := d.in
	var out []*pb.OffsetCommitTopic
	for i := range f.pick(3) {
		t := &pb.OffsetCommitTopic{Name: fmt.Sprintf("t%d", i+1)}
		for p := range f.pick(3) + 1 {
			md := pickOf(f, nil, strp(""), strp("meta"), strp(string(make([]byte, 4097))))
			t.Partitions = append(t.Partitions, &pb.OffsetCommitPartition{Partition: int32(p), Offset: int64(f.pick(100)), LeaderEpoch: int32(f.pick(3)) - 1, Metadata: md})
		}
		out = append(out, t)
	}
	return out
}

func (d *groupDriver) partitions() []*pb.TopicPartitions {
	f := d.in
	var out []*pb.TopicPartitions
	for i := range f.pick(3) {
		out = append(out, &pb.TopicPartitions{Name: fmt.Sprintf("t%d", i+1), Partitions: []int32{0, int32(f.pick(3))}})
	}
	return out
}

var fuzzErrs = []error{nil, ErrStoreTimeout, ErrStoreNotLeader, ErrStoreUnavailable, ErrRecordTooLarge, ErrStoreFenced, errors.New("other")}

func (d *groupDriver) step() {
	h, f := d.h, d.in
	switch f.pick(20) {
	case 18: // a static member restarts: unknown member id, same instance and protocols
		var statics []*member
		for _, m := range h.g.order {
			if m.instanceID != nil {
				statics = append(statics, m)
			}
		}
		if len(statics) == 0 {
			break
		}
		m := statics[f.pick(len(statics))]
		h.rawJoin(&pb.JoinGroupRequest{GroupId: "g", ApiVersion: pickOf[int32](f, 5, 9), ClientId: m.clientID, ProtocolType: h.g.protocolType,
			Protocols: m.protocols, SessionTimeoutMs: int32(m.sessionTimeout() / ms), RebalanceTimeoutMs: int32(m.rebalanceTimeout() / ms), GroupInstanceId: cloneOpt(m.instanceID)})
	case 19: // every member heartbeats
		for _, id := range h.g.MemberIDs() {
			if m := h.g.members.get(id); m != nil {
				h.g.Heartbeat(h.now, &pb.HeartbeatRequest{GroupId: "g", MemberId: id, GroupInstanceId: cloneOpt(m.instanceID), GenerationId: h.g.Generation()}, &h.fx)
				h.apply()
			}
		}
	case 0, 1: // JoinGroup
		req := &pb.JoinGroupRequest{
			GroupId:            d.groupID(),
			ApiVersion:         int32(f.pick(10)),
			ClientId:           pickOf(f, "c1", "c2", "c3"),
			ProtocolType:       pickOf(f, "consumer", "consumer", "consumer", "connect", ""),
			Protocols:          d.protocols(),
			SessionTimeoutMs:   pickOf[int32](f, 10_000, 10_000, 6_000, 30_000, 0, -1, 5_999, 1<<31-1),
			RebalanceTimeoutMs: pickOf[int32](f, 60_000, 20_000, 0, 1_000, -1, 1<<31-1),
			GroupInstanceId:    d.instance(),
			Reason:             pickOf(f, nil, strp("why")),
		}
		if f.pick(2) == 0 {
			req.MemberId = d.memberID()
		}
		if d.wellFormed() {
			req.GroupId, req.ProtocolType, req.SessionTimeoutMs, req.RebalanceTimeoutMs = "g", "consumer", 10_000, pickOf[int32](f, 60_000, 20_000)
			if len(req.Protocols) == 0 {
				req.Protocols = []*pb.Protocol{{Name: "range", Metadata: consumerMeta("t1")}}
			}
			if id, inst, ok := d.current(); ok && f.pick(2) == 0 {
				req.MemberId, req.GroupInstanceId = id, inst
				if m := h.g.members.get(id); f.pick(2) == 0 {
					req.Protocols = m.protocols // unchanged metadata
				}
			} else if req.GroupInstanceId != nil && req.ApiVersion < 5 {
				req.ApiVersion = 5
			}
		}
		h.rawJoin(req)
	case 2, 3: // SyncGroup
		req := &pb.SyncGroupRequest{GroupId: d.groupID(), MemberId: d.memberID(), GroupInstanceId: d.instance(), GenerationId: d.generation(), ApiVersion: int32(f.pick(6))}
		if f.pick(3) == 0 {
			req.ProtocolType = pickOf(f, strp("consumer"), strp("connect"), strp(""))
			req.ProtocolName = pickOf(f, strp("range"), strp("rr"), nil)
		}
		if id, inst, ok := d.current(); ok && d.wellFormed() {
			req.GroupId, req.MemberId, req.GroupInstanceId, req.GenerationId = "g", id, inst, h.g.Generation()
		}
		if f.pick(2) == 0 {
			for _, id := range h.g.MemberIDs() {
				if f.pick(4) != 0 {
					req.Assignments = append(req.Assignments, &pb.SyncGroupAssignment{MemberId: id, Assignment: pickOf(f, []byte("a"), []byte{}, nil, d.big)})
				}
			}
			if f.pick(4) == 0 {
				req.Assignments = append(req.Assignments, &pb.SyncGroupAssignment{MemberId: "stranger", Assignment: []byte("x")})
			}
		}
		hd := h.handle()
		h.g.Sync(h.now, req, hd, &h.fx)
		h.apply()
	case 4, 5: // Heartbeat
		req := &pb.HeartbeatRequest{GroupId: d.groupID(), MemberId: d.memberID(), GroupInstanceId: d.instance(), GenerationId: d.generation()}
		if id, inst, ok := d.current(); ok && d.wellFormed() {
			req.GroupId, req.MemberId, req.GroupInstanceId, req.GenerationId = "g", id, inst, h.g.Generation()
		}
		h.g.Heartbeat(h.now, req, &h.fx)
		h.apply()
	case 6: // LeaveGroup
		req := &pb.LeaveGroupRequest{GroupId: d.groupID()}
		for range f.pick(3) + 1 {
			req.Members = append(req.Members, &pb.MemberIdentity{MemberId: d.memberID(), GroupInstanceId: d.instance()})
		}
		resp := h.leaveReq(req)
		if resp != nil && resp.ErrorCode == ErrNone && len(resp.Members) != len(req.Members) {
			h.t.Fatalf("leave answered %d of %d members", len(resp.Members), len(req.Members))
		}
	case 7: // OffsetCommit
		req := &pb.OffsetCommitRequest{GroupId: "g", GenerationId: d.generation(), MemberId: d.memberID(), GroupInstanceId: d.instance(),
			RetentionTimeMs: pickOf[int64](f, -1, -1, 0, 1000, 1<<40), Topics: d.topics()}
		if id, inst, ok := d.current(); ok && d.wellFormed() {
			req.MemberId, req.GroupInstanceId, req.GenerationId = id, inst, h.g.Generation()
		}
		hd := h.handle()
		h.g.Commit(h.now, req, hd, &h.fx)
		h.apply()
	case 8: // OffsetFetch
		req := &pb.OffsetFetchRequest{GroupId: "g", AllTopics: f.pick(2) == 0, Topics: d.partitions(), RequireStable: f.pick(2) == 0}
		h.g.Fetch(req)
	case 9: // DeleteGroups
		hd := h.handle()
		h.g.Delete(h.now, hd, &h.fx)
		h.apply()
	case 10: // OffsetDelete
		hd := h.handle()
		h.g.OffsetDelete(h.now, &pb.OffsetDeleteRequest{GroupId: "g", Topics: d.partitions()}, hd, &h.fx)
		h.apply()
	case 11: // DescribeGroups
		r := h.g.Describe()
		if r.State != h.g.State().String() || len(r.Members) != h.g.NumMembers() && h.g.State() != Dead {
			h.t.Fatalf("describe %v for a %v group", r, h.g.State())
		}
	case 12, 13: // time passes
		h.advance(pickOf(f, 0, ms, time.Second, 3*time.Second, 6*time.Second, 10*time.Second, time.Minute, 5*time.Minute, time.Hour, 3*time.Hour))
	case 14: // writes: hold them, or complete the held ones
		if len(h.held) > 0 && f.pick(2) == 0 {
			h.release(pickOf(f, fuzzErrs...))
		} else {
			h.hold = !h.hold
		}
		if !h.hold && len(h.held) > 0 {
			h.release(pickOf(f, fuzzErrs...))
		}
	case 15: // immediate writes fail, or succeed again
		h.failErr = pickOf(f, fuzzErrs...)
	case 16: // unload
		h.g.Unload(h.now, &h.fx)
		h.apply()
	case 17: // failover: unload, then load the durable records as a new coordinator would
		if f.pick(4) == 0 {
			d.failover()
		}
	}
	d.remember()
}

func (d *groupDriver) failover() {
	h := d.h
	h.g.Unload(h.now, &h.fx)
	h.apply()
	if len(h.parked) > 0 {
		h.t.Fatalf("unload left %d requests unanswered", len(h.parked))
	}
	var rec *pb.GroupRecord
	offsets := map[topicPartition]*pb.OffsetRecord{}
	for _, r := range h.durable {
		switch {
		case r.GetGroup() != nil:
			rec = r.GetGroup()
		case r.GetGroupTombstone() != nil:
			rec = nil
		case r.GetOffset() != nil:
			o := r.GetOffset()
			offsets[topicPartition{o.Topic, o.Partition}] = o
		case r.GetOffsetTombstone() != nil:
			o := r.GetOffsetTombstone()
			delete(offsets, topicPartition{o.Topic, o.Partition})
		}
	}
	if rec == nil {
		rec = &pb.GroupRecord{GroupId: "g"}
	}
	rec = roundTrip(h.t, rec).(*pb.GroupRecord)
	var offs []*pb.OffsetRecord
	for _, o := range offsets {
		offs = append(offs, o)
	}
	slices.SortFunc(offs, func(a, b *pb.OffsetRecord) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition - b.Partition)
	})
	h.held, h.hold = nil, false
	clear(h.timers)
	h.g = Restore(&h.cfg, rec, offs, h.now)
	h.lastGen = h.g.Generation()
	h.gone = false
	h.g.Start(h.now, &h.fx)
	h.apply()
}

func runFuzz(t *testing.T, data []byte) { runFuzzLog(t, data, nil) }

// runFuzzLog is runFuzz writing the harness log to log (when not nil).
func runFuzzLog(t *testing.T, data []byte, log *strings.Builder) {
	in := &fuzzInput{b: data}
	cfgByte := in.next()
	h := newHarness(t, func(c *Config) {
		c.MaxSize = []int{0, 2, 3, 1}[cfgByte&3]
		c.InitialRebalanceDelay = []time.Duration{0, 3 * time.Second}[cfgByte>>2&1]
		c.MaxRecordBytes = 2048
		// Short retention, checked rarely: expiry happens within a few
		// advances and long advances stay cheap.
		c.OffsetsRetention = 2 * time.Hour
		c.OffsetsRetentionCheckInterval = 30 * time.Minute
	})
	h.log = log
	d := &groupDriver{h: h, in: in, big: make([]byte, 2100)}
	for steps := 0; in.more() && steps < 400; steps++ {
		d.step()
	}
	// Whatever happened, a final unload answers everything.
	h.g.Unload(h.now, &h.fx)
	h.apply()
	if len(h.parked) > 0 {
		t.Fatalf("%d requests never answered", len(h.parked))
	}
}

// FuzzGroup drives random request sequences, timer advances, held and
// failed writes, unloads and failovers through the machine; the harness
// checks the invariants after every step.
func FuzzGroup(f *testing.F) {
	f.Add([]byte{0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, 0, 12, 3, 2, 1, 0, 0, 12, 5})
	f.Add([]byte{1, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 12, 4, 2, 0, 0, 0, 0, 1, 14, 0, 3, 1, 1, 14, 1, 1})
	f.Add([]byte{4, 0, 5, 0, 0, 0, 2, 0, 0, 0, 1, 0, 12, 4, 2, 0, 0, 1, 1, 0, 1, 0, 5, 0, 0, 0, 2, 0, 0, 0, 1, 0, 16, 17, 0})
	f.Add([]byte{2, 7, 1, 0, 0, 0, 0, 9, 12, 9, 10, 1, 11, 17, 0, 12, 8})
	f.Add([]byte("the quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps over the lazy dog"))
	f.Fuzz(runFuzz)
}

// TestLazySessionsMatchEager: random walks answer, write and report the same
// things at the same moments whether heartbeats and commits re-arm the
// session timer every time or only move the session's end (sessions.go).
func TestLazySessionsMatchEager(t *testing.T) {
	next := walks(0x2545f4914f6cdd1d)
	for i := range 200 {
		data := next()
		var lazy, eager strings.Builder
		runFuzzLog(t, data, &lazy)
		eagerSessions = true
		runFuzzLog(t, data, &eager)
		eagerSessions = false
		// Within one moment the order may differ (the group walks maps), so
		// the lines are compared sorted; each carries its moment.
		l, e := strings.Split(lazy.String(), "\n"), strings.Split(eager.String(), "\n")
		slices.Sort(l)
		slices.Sort(e)
		for k := range min(len(l), len(e)) {
			if l[k] != e[k] {
				t.Fatalf("walk %d: lazy has %s\neager has %s", i, l[k], e[k])
			}
		}
		if len(l) != len(e) {
			t.Fatalf("walk %d: %d lines lazy, %d eager", i, len(l), len(e))
		}
		if strings.Count(lazy.String(), "answer") < 10 {
			t.Fatalf("walk %d answered almost nothing:\n%s", i, lazy.String())
		}
	}
}

// The seeds and the inputs the fuzzer found also run as plain tests; this
// one adds a deterministic pseudo-random walk so every run covers more.
func TestFuzzRandomWalks(t *testing.T) {
	next := walks(0x9e3779b97f4a7c15)
	for i := range 100 {
		data := next()
		t.Run(fmt.Sprint(i), func(t *testing.T) { runFuzz(t, data) })
	}
}

// walks returns a generator of deterministic pseudo-random fuzz inputs
// (xorshift from seed), 3,000 bytes each.
func walks(seed uint64) func() []byte {
	return func() []byte {
		data := make([]byte, 3000)
		for j := range data {
			seed ^= seed << 13
			seed ^= seed >> 7
			seed ^= seed << 17
			data[j] = byte(seed)
		}
		return data
	}
}
