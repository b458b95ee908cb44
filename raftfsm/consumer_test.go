package raftfsm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/cohort-coord/cohort/assignor"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/internal/tripwire"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// consumerRecs returns the protobuf records of a consumer group with the
// given members, each with its three records.
func consumerRecs(group string, epoch int32, members ...string) []*pb.Record {
	recs := []coordinator.ConsumerRecord{coordinator.ConsumerGroupEpochRecord{Epoch: epoch}}
	for i, m := range members {
		recs = append(recs,
			coordinator.ConsumerMemberRecord{MemberID: m, ClientID: "c", SubscribedTopicNames: []string{"t"}},
			coordinator.ConsumerTargetRecord{MemberID: m, Partitions: tps("t", int32(i))},
			coordinator.ConsumerCurrentRecord{MemberID: m, MemberEpoch: epoch, Assigned: tps("t", int32(i))})
	}
	recs = append(recs, coordinator.ConsumerTargetEpochRecord{Epoch: epoch})
	return coordinator.ConsumerRecordsToProto(group, recs)
}

func tps(topic string, ps ...int32) []assignor.TopicPartitions {
	return []assignor.TopicPartitions{{Topic: topic, Partitions: ps}}
}

// tombstones returns a member's three tombstones, as the coordinator
// writes them.
func tombstones(group, member string) []*pb.Record {
	return coordinator.ConsumerRecordsToProto(group, []coordinator.ConsumerRecord{
		coordinator.ConsumerCurrentRecord{MemberID: member, Deleted: true},
		coordinator.ConsumerTargetRecord{MemberID: member, Deleted: true},
		coordinator.ConsumerMemberRecord{MemberID: member, Deleted: true},
	})
}

// memberIDs lists the members a group's records name, in order.
func memberIDs(recs []*pb.Record) []string {
	var ids []string
	for _, r := range recs {
		if m := r.GetConsumerMemberMetadata(); m != nil {
			ids = append(ids, m.GetMemberId())
		}
	}
	return ids
}

func mustApply(t *testing.T, s *State, group string, recs ...*pb.Record) {
	t.Helper()
	if err := s.ApplyWrite(writeOf(group, nil, recs...)); err != nil {
		t.Fatal(err)
	}
}

// A member's tombstone removes its record of that kind, and the member
// once it has none; a tombstone of an unknown member creates nothing. A
// group with consumer records only is listed, and a GroupTombstone removes
// it.
func TestConsumerTombstonesRemove(t *testing.T) {
	s := NewState()
	mustApply(t, s, "g", consumerRecs("g", 3, "m1", "m2")...)
	if got := memberIDs(s.ConsumerRecords("g")); !slices.Equal(got, []string{"m1", "m2"}) || !slices.Equal(s.Groups(), []string{"g"}) {
		t.Fatalf("members %v, groups %v", got, s.Groups())
	}
	if rec, offs := s.Load("g"); rec != nil || len(offs) != 0 {
		t.Fatalf("a consumer group loads as a classic one: %v %v", rec, offs)
	}
	// The target alone: the member keeps its other records.
	mustApply(t, s, "g", tombstones("g", "m1")[1])
	recs := s.ConsumerRecords("g")
	if len(recs) != 7 || slices.ContainsFunc(recs, func(r *pb.Record) bool { return r.GetConsumerTargetAssignment().GetMemberId() == "m1" }) {
		t.Fatalf("after m1's target tombstone: %v", recs)
	}
	mustApply(t, s, "g", tombstones("g", "m1")...)
	mustApply(t, s, "other", tombstones("other", "m9")...)
	recs = s.ConsumerRecords("g")
	if got := memberIDs(recs); !slices.Equal(got, []string{"m2"}) || len(recs) != 5 || !slices.Equal(s.Groups(), []string{"g"}) {
		t.Fatalf("after m1's tombstones: %d records, members %v, groups %v", len(recs), got, s.Groups())
	}
	g := coordinator.RestoreConsumerGroup("g", &coordinator.ConsumerConfig{}, nil, coordinator.ConsumerRecordsFromProto(recs))
	if g.Epoch() != 3 || g.AssignmentEpoch() != 3 || len(g.Members()) != 1 || g.Members()[0].MemberID != "m2" {
		t.Fatalf("rebuilt: epoch %d/%d, members %+v", g.Epoch(), g.AssignmentEpoch(), g.Members())
	}
	// The group metadata stays once every member is gone (an empty
	// group keeps its epoch).
	mustApply(t, s, "g", tombstones("g", "m2")...)
	if recs := s.ConsumerRecords("g"); len(recs) != 2 || recs[0].GetConsumerGroupMetadata().GetEpoch() != 3 {
		t.Fatalf("an empty group's records: %v", recs)
	}
	mustApply(t, s, "g", groupTombstone("g"))
	if recs := s.ConsumerRecords("g"); recs != nil || len(s.Groups()) != 0 {
		t.Fatalf("after the group's tombstone: %v, groups %v", recs, s.Groups())
	}
}

// A group id's classic record and its consumer records are kept apart:
// writing one never changes the other, both load, and a GroupTombstone
// removes both (the offsets of the id stay, as they do for a classic one).
func TestClassicAndConsumerRecordsApart(t *testing.T) {
	s := NewState()
	mustApply(t, s, "g", groupRecord("g", 4, "classic-1"), offsetRecord("g", "t", 0, 10))
	mustApply(t, s, "g", consumerRecs("g", 2, "m1")...)
	mustApply(t, s, "g", groupRecord("g", 5, "classic-1"))
	rec, offs := s.Load("g")
	if rec.GetGeneration() != 5 || len(offs) != 1 || !slices.Equal(memberIDs(s.ConsumerRecords("g")), []string{"m1"}) {
		t.Fatalf("classic %v, offsets %v, consumer %v", rec, offs, s.ConsumerRecords("g"))
	}
	// A fence reads the classic record only.
	if err := s.ApplyWrite(writeOf("g", &pb.WriteFence{Generation: 5, MemberId: "m1"}, consumerRecs("g", 9)...)); !errors.Is(err, coordinator.ErrStoreFenced) {
		t.Fatalf("a fence on a consumer member: %v", err)
	}
	mustApply(t, s, "g", groupTombstone("g"))
	rec, offs = s.Load("g")
	if rec != nil || len(offs) != 1 || s.ConsumerRecords("g") != nil {
		t.Fatalf("after the tombstone: classic %v, offsets %v, consumer %v", rec, offs, s.ConsumerRecords("g"))
	}
}

// Every field of every consumer record, filled from the descriptors, is
// kept by the state, read back, written to a snapshot and restored.
func TestStateKeepsEveryConsumerField(t *testing.T) {
	var want []*pb.Record
	for v := range tripwire.Variants((&pb.Record{}).ProtoReflect().Descriptor()) {
		r := &pb.Record{}
		tripwire.Fill(r, v)
		if !isConsumerRecord(r) {
			continue
		}
		// One group and member, and no tombstone: the state keeps it.
		m := r.ProtoReflect()
		msg := m.Get(m.WhichOneof(m.Descriptor().Oneofs().ByName("kind"))).Message()
		fields := msg.Descriptor().Fields()
		msg.Set(fields.ByName("group_id"), protoreflect.ValueOfString("g"))
		if fd := fields.ByName("member_id"); fd != nil {
			msg.Set(fd, protoreflect.ValueOfString("m"))
		}
		msg.Clear(fields.ByName("deleted"))
		want = append(want, r)
	}
	if len(want) != 5 {
		t.Fatalf("%d consumer record kinds", len(want))
	}
	// The state's order: group, target metadata, then the member's records.
	order := func(r *pb.Record) int {
		switch r.GetKind().(type) {
		case *pb.Record_ConsumerGroupMetadata:
			return 0
		case *pb.Record_ConsumerTargetAssignmentMetadata:
			return 1
		case *pb.Record_ConsumerMemberMetadata:
			return 2
		case *pb.Record_ConsumerTargetAssignment:
			return 3
		}
		return 4
	}
	slices.SortFunc(want, func(a, b *pb.Record) int { return order(a) - order(b) })
	f, index := atConsumerFormat(t)
	applyAt(f, index, writesCmd(t, writeOf("g", nil, want...)))
	check := func(what string, got []*pb.Record) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d records, want %d", what, len(got), len(want))
		}
		for i := range want {
			failDiff(t, what, want[i], got[i])
		}
	}
	check("the state", f.ConsumerRecords("g"))
	snap := encoded(t, f)
	var snapWant []*raftpb.SnapshotRecord
	for _, r := range want {
		snapWant = append(snapWant, consumerSnapshotRecord(r))
	}
	snapGot := snapshotRecords(t, snap)
	snapGot = slices.DeleteFunc(snapGot, func(r *raftpb.SnapshotRecord) bool { return consumerFromSnapshot(r) == nil })
	if len(snapGot) != len(snapWant) {
		t.Fatalf("%d consumer snapshot records, want %d", len(snapGot), len(snapWant))
	}
	for i := range snapWant {
		failDiff(t, fmt.Sprintf("snapshot record %d", i), snapWant[i], snapGot[i])
	}
	g := NewFSM(catalog.New(), quiet)
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
	check("the restored state", g.ConsumerRecords("g"))
}

// Below log format 4 a write that holds consumer records applies as a node
// of an older version applies it, which does not know them: its other
// records apply, the consumer records change nothing, every node keeps the
// same state. The write reports ErrLogFormatTooLow (or the fence's error).
func TestConsumerRecordsInertBelowFormat(t *testing.T) {
	for _, format := range []uint32{0, LogFormatCompressed, LogFormatSessions} {
		newer, older := NewFSM(catalog.New(), quiet), NewFSM(catalog.New(), quiet)
		if format > 0 {
			for _, f := range []*FSM{newer, older} {
				applyAt(f, 1, mustCommand(t, raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT, &raftpb.LogFormat{Format: format}))
			}
		}
		mixed := append(consumerRecs("g", 1, "m1"), offsetRecord("g", "t", 0, 5))
		res := applyAt(newer, 2, writesCmd(t, writeOf("g", nil, mixed...), writeOf("h", nil, consumerRecs("h", 1)...)))
		// What an older node applies: the records it knows.
		applyAt(older, 2, writesCmd(t, writeOf("g", nil, offsetRecord("g", "t", 0, 5)), writeOf("h", nil)))
		if len(res.Errs) != 2 || !errors.Is(res.Errs[0], ErrLogFormatTooLow) || !errors.Is(res.Errs[1], ErrLogFormatTooLow) {
			t.Fatalf("format %d: %v", format, res.Errs)
		}
		if newer.Hash() != older.Hash() || newer.ConsumerRecords("g") != nil {
			t.Fatalf("format %d: consumer records changed the state", format)
		}
		if _, offs, _ := newer.Load("g"); len(offs) != 1 {
			t.Fatalf("format %d: the write's offset was not applied", format)
		}
		fenced := applyAt(newer, 3, writesCmd(t, writeOf("g", &pb.WriteFence{Generation: 1, MemberId: "m1"}, consumerRecs("g", 1, "m1")...)))
		if !errors.Is(fenced.Errs[0], coordinator.ErrStoreFenced) {
			t.Fatalf("format %d: a fenced write: %v", format, fenced.Errs)
		}
		// Once the format is raised, the same write applies.
		applyAt(newer, 4, mustCommand(t, raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT, &raftpb.LogFormat{Format: LogFormatConsumer}))
		if res := applyAt(newer, 5, writesCmd(t, writeOf("g", nil, mixed...))); res.Errs[0] != nil || !slices.Equal(memberIDs(newer.ConsumerRecords("g")), []string{"m1"}) {
			t.Fatalf("format 4: %v, records %v", res.Errs, newer.ConsumerRecords("g"))
		}
	}
}

// Below log format 4 the store refuses a write that holds consumer
// records, without proposing it: ErrStoreUnavailable, for the machine's
// owner, and ErrLogFormatTooLow.
func TestStoreRefusesConsumerRecordsBelowFormat(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	s := &Store{fsm: f}
	s.closed = true // anything queued would fail with ErrStoreNotLeader
	var got []error
	done := func(err error) { got = append(got, err) }
	f.format.Store(LogFormatSessions)
	s.Append("g", consumerRecs("g", 1, "m1"), nil, done)
	if len(got) != 1 || !errors.Is(got[0], coordinator.ErrStoreUnavailable) || !errors.Is(got[0], ErrLogFormatTooLow) {
		t.Fatalf("consumer records at format 3: %v", got)
	}
	s.Append("g", []*pb.Record{offsetRecord("g", "t", 0, 1)}, nil, done)
	if len(got) != 2 || !errors.Is(got[1], coordinator.ErrStoreNotLeader) {
		t.Fatalf("an offset at format 3 did not reach the log: %v", got)
	}
	f.format.Store(LogFormatConsumer)
	s.Append("g", consumerRecs("g", 1, "m1"), nil, done)
	if len(got) != 3 || !errors.Is(got[2], coordinator.ErrStoreNotLeader) {
		t.Fatalf("consumer records at format 4 did not reach the log: %v", got)
	}
}

// logEvents lists, in log order, the LOG_FORMAT entries (the format) and
// the group-writes entries that hold consumer records (0) of n's log,
// compressed ones included.
func logEvents(t *testing.T, n *Node) []uint32 {
	t.Helper()
	first, _ := n.logs.FirstIndex()
	last, _ := n.logs.LastIndex()
	var out []uint32
	var buf []byte
	for i := max(first, 1); i <= last; i++ {
		var l raft.Log
		if err := n.logs.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type != raft.LogCommand {
			continue
		}
		env, err := parseEnvelope(l.Data)
		if err == nil && env.typ == raftpb.CommandType_COMMAND_TYPE_COMPRESSED {
			var d []byte
			if d, err = decompressEntry(env.payload, &buf); err == nil {
				env, err = parseEnvelope(d)
			}
		}
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		switch env.typ {
		case raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT:
			var m raftpb.LogFormat
			if err := proto.Unmarshal(env.payload, &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m.GetFormat())
		case raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES:
			ws, err := decodeGroupWrites(env.payload)
			if err != nil {
				t.Fatal(err)
			}
			if slices.ContainsFunc(ws.GetWrites(), func(w *raftpb.GroupWrite) bool { return hasConsumerRecords(w.GetRecords()) }) {
				out = append(out, 0)
			}
		}
	}
	return out
}

// carriesConsumer reports whether a log event (logEvents) raises the log
// format to one that carries consumer records (4 or later: the format rises
// straight to the newest once every node applies it).
func carriesConsumer(ev uint32) bool { return ev >= LogFormatConsumer }

// A rolling upgrade on three nodes: while one node registers format 3 (the
// version before consumer records), the leader writes none to the log;
// once it registers the newest format the format rises, and every node
// applies the consumer records to the same state, from which the group is
// rebuilt.
func TestConsumerRecordsWaitForEveryNode(t *testing.T) {
	all := threeSlowNodes(t)
	n1, n2, n3 := all[0], all[1], all[2]
	ctx := context.Background()
	register := func(n *Node, format uint32) {
		onLeader(t, "register "+n.ID(), all, func(l *Node) error {
			return l.Join(ctx, &raftpb.NodeRegister{NodeId: n.ID(), RaftAddr: n.Addr(), LogFormat: format})
		})
	}
	for _, n := range all[1:] {
		onLeader(t, "add "+n.ID(), all, func(l *Node) error { return l.AddVoter(n.ID(), n.Addr()) })
	}
	register(n1, LogFormat)
	register(n2, LogFormat)
	register(n3, LogFormatSessions)
	d := newCGDriver("g", 1)
	var pending []*pb.Record
	for len(pending) < 20 {
		pending = append(pending, coordinator.ConsumerRecordsToProto("g", d.step())...)
	}
	var err error
	onLeader(t, "write while node3 is at format 3", all, func(l *Node) error {
		if err = appendWait(t, l.Store, "g", nil, pending...); errors.Is(err, coordinator.ErrStoreNotLeader) {
			return err
		}
		return nil
	})
	if !errors.Is(err, ErrLogFormatTooLow) || !errors.Is(err, coordinator.ErrStoreUnavailable) {
		t.Fatalf("consumer records at format %d: %v", n1.FSM.LogFormat(), err)
	}
	for _, n := range all {
		if ev := logEvents(t, n); slices.Contains(ev, 0) || slices.ContainsFunc(ev, carriesConsumer) {
			t.Fatalf("%s: log events %v while node3 applies format 3", n.ID(), ev)
		}
	}

	register(n3, LogFormat) // node3 is upgraded
	for _, n := range all {
		waitFor(t, n.ID()+" to apply the newest format", func() bool { return n.FSM.LogFormat() == LogFormat })
	}
	onLeader(t, "write at the newest format", all, func(l *Node) error { return appendWait(t, l.Store, "g", nil, pending...) })
	for range 200 {
		if recs := d.step(); len(recs) > 0 {
			onLeader(t, "write", all, func(l *Node) error {
				return appendWait(t, l.Store, "g", nil, coordinator.ConsumerRecordsToProto("g", recs)...)
			})
		}
	}
	for _, n := range all {
		waitFor(t, n.ID()+" to reach node1's state", func() bool { return n.FSM.Hash() == n1.FSM.Hash() })
		sameGroup(t, n.ID(), d, n.FSM)
		ev := logEvents(t, n)
		if raised := slices.IndexFunc(ev, carriesConsumer); raised < 0 || slices.Contains(ev[:raised], 0) || !slices.Contains(ev[raised:], 0) {
			t.Fatalf("%s: log events %v: want consumer records only after format 4", n.ID(), ev)
		}
	}
	if d.g.Epoch() < 5 {
		t.Fatalf("the run reached epoch %d only", d.g.Epoch())
	}
}

// Three in-memory replicas: a follower cut off while the leader writes a
// consumer group's records and compacts its log catches up by installing
// a snapshot, and then by the log; from its state, as from every node's,
// the live group is rebuilt.
func TestClusterConsumerGroupCatchUpBySnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, func(conf *raft.Config) {
			conf.SnapshotThreshold = 16
			conf.SnapshotInterval = 200 * time.Millisecond
			conf.TrailingLogs = 4
		})
		defer c.shutdown()
		l := c.leader()
		if res, _ := apply(t, l, mustCommand(t, raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT, &raftpb.LogFormat{Format: LogFormatConsumer})); res.Err != nil {
			t.Fatal(res.Err)
		}
		s := NewStore(l.r, l.fsm.FSM, time.Second)
		defer s.Close()
		d := newCGDriver("g", 5)
		run := func(steps int) {
			for range steps {
				if recs := d.step(); len(recs) > 0 {
					if err := appendWait(t, s, "g", nil, coordinator.ConsumerRecordsToProto("g", recs)...); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		run(20)
		c.converge(l, c.nodes...)
		f := c.nodes[0]
		if f == l {
			f = c.nodes[1]
		}
		c.isolate(f)
		behind := f.r.LastIndex()
		run(150)
		if err := l.r.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			t.Fatalf("leader snapshot: %v", err)
		}
		if first, _ := l.logs.FirstIndex(); first <= behind+1 {
			t.Fatalf("leader log starts at %d: the follower's next entry %d was not compacted", first, behind+1)
		}
		c.heal(f)
		c.converge(l, c.nodes...)
		if f.fsm.restoreCount() == 0 {
			t.Fatal("the follower caught up without installing a snapshot")
		}
		sameGroup(t, "the follower, from the snapshot", d, f.fsm.FSM)
		run(30)
		c.converge(l, c.nodes...)
		for _, nd := range c.nodes {
			sameGroup(t, string(nd.id), d, nd.fsm.FSM)
		}
	})
}

// A conversion's write: an upgrade replaces the classic members by an
// empty classic record (and no silent members) next to the consumer
// records; a downgrade removes every consumer record with tombstones
// (members', then the group's two epoch records) and writes the classic
// group. Offsets stay throughout, and a snapshot keeps the same state.
func TestConversionWritesReplaceTheGroupsType(t *testing.T) {
	f, index := atConsumerFormat(t)
	write := func(recs ...*pb.Record) {
		t.Helper()
		res := applyAt(f, index, writesCmd(t, writeOf("g", nil, recs...)))
		index++
		for _, err := range res.Errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	write(groupRecord("g", 4, "c1", "c2"), offsetRecord("g", "t", 0, 10),
		&pb.Record{Kind: &pb.Record_MemberSessions{MemberSessions: &pb.MemberSessions{GroupId: "g", Members: []*pb.SilentMember{{MemberId: "c1", SessionEndMs: 5}}}}})
	if f.state.groups["g"].sessions == nil {
		t.Fatal("the silent members were not kept")
	}
	// The upgrade, as Group.Upgrade writes it.
	upgrade := []*pb.Record{
		{Kind: &pb.Record_Group{Group: &pb.GroupRecord{GroupId: "g", ProtocolType: "consumer", Generation: 4}}},
		{Kind: &pb.Record_MemberSessions{MemberSessions: &pb.MemberSessions{GroupId: "g"}}},
	}
	write(append(upgrade, consumerRecs("g", 4, "c1", "c2")...)...)
	check := func(what string, classicMembers int, consumerMembers []string) {
		t.Helper()
		for _, s := range []*State{f.state, restoredState(t, f)} {
			rec, offs := s.Load("g")
			if len(rec.GetMembers()) != classicMembers || len(offs) != 1 || s.groups["g"].sessions != nil {
				t.Fatalf("%s: classic %v, offsets %v, sessions %v", what, rec, offs, s.groups["g"].sessions)
			}
			recs := s.ConsumerRecords("g")
			if got := memberIDs(recs); !slices.Equal(got, consumerMembers) || len(consumerMembers) == 0 && recs != nil {
				t.Fatalf("%s: consumer records %v", what, recs)
			}
		}
	}
	check("after the upgrade", 0, []string{"c1", "c2"})
	// The downgrade, as Group.Downgrade writes it.
	var downgrade []*pb.Record
	for _, m := range []string{"c1", "c2"} {
		downgrade = append(downgrade, tombstones("g", m)...)
	}
	downgrade = append(downgrade, coordinator.ConsumerRecordsToProto("g", []coordinator.ConsumerRecord{
		coordinator.ConsumerTargetEpochRecord{Deleted: true}, coordinator.ConsumerGroupEpochRecord{Deleted: true},
	})...)
	write(append(downgrade, groupRecord("g", 5, "c1", "c2"))...)
	check("after the downgrade", 2, nil)
	// Group-level tombstones of a group without consumer records create
	// nothing.
	write(coordinator.ConsumerRecordsToProto("h", []coordinator.ConsumerRecord{coordinator.ConsumerGroupEpochRecord{Deleted: true}})...)
	if f.state.groups["h"] != nil {
		t.Fatal("a tombstone created a group")
	}
}

// restoredState is f's state written to a snapshot and read back.
func restoredState(t *testing.T, f *FSM) *State {
	t.Helper()
	g := NewFSM(catalog.New(), quiet)
	if err := g.Restore(io.NopCloser(bytes.NewReader(encoded(t, f)))); err != nil {
		t.Fatal(err)
	}
	return g.state
}
