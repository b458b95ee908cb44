package raftfsm

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// The records of consumer groups (KIP-848), next to the classic group
// record of the same group id. A group's consumer records are kept
// compacted, as Kafka's compacted log keeps them: the last record of each
// kind (group metadata, target assignment metadata) and of each kind per
// member (member metadata, target assignment, current assignment); a
// tombstone removes its record. A conversion to a classic group (or an
// empty consumer group taken by a JoinGroup) writes tombstones for every
// record of the group, members' and group's, so none is left and the
// group's classic record and offsets are all the state keeps of it. Read back in their fixed order
// (ConsumerRecords), they rebuild the group the records written so far
// rebuild (coordinator.RestoreConsumerGroup), because the coordinator
// removes a member's three records together.
//
// A group id has one type, and its owner decides which: the state keeps a
// group's classic record (and its MemberSessions) and its consumer records
// apart and never lets one change the other, so a group that has both (a
// conversion written in two writes) shows both to the owner that loads it.
// A GroupTombstone removes the group whatever its type: both. Offsets
// belong to the group id, whatever its type.

// ErrLogFormatTooLow: a write holds a record that the cluster's log format
// does not carry yet (some node could not apply it). The store's refusal
// of such a write wraps it and coordinator.ErrStoreUnavailable.
var ErrLogFormatTooLow = errors.New("the cluster's log format does not carry this record yet")

// consumerState is one group's consumer records.
type consumerState struct {
	group   *pb.ConsumerGroupMetadata                 // nil: none
	target  *pb.ConsumerGroupTargetAssignmentMetadata // nil: none
	members map[string]*consumerMember
}

// consumerMember is one member's records; a member with none is removed.
type consumerMember struct {
	meta    *pb.ConsumerGroupMemberMetadata
	target  *pb.ConsumerGroupTargetAssignmentMember
	current *pb.ConsumerGroupCurrentMemberAssignment
}

// isConsumerRecord reports whether r is one of a consumer group's records.
func isConsumerRecord(r *pb.Record) bool {
	switch r.GetKind().(type) {
	case *pb.Record_ConsumerGroupMetadata, *pb.Record_ConsumerMemberMetadata, *pb.Record_ConsumerTargetAssignment,
		*pb.Record_ConsumerTargetAssignmentMetadata, *pb.Record_ConsumerCurrentAssignment:
		return true
	}
	return false
}

// hasConsumerRecords reports whether recs hold a consumer group's record.
func hasConsumerRecords(recs []*pb.Record) bool {
	return slices.ContainsFunc(recs, isConsumerRecord)
}

// consumerFormatError is the error of a write that holds consumer records
// while the cluster's log format is below LogFormatConsumer.
func consumerFormatError(groupID string, format uint32) error {
	return fmt.Errorf("group %q: consumer group records need log format %d, the cluster's is %d: %w", groupID, LogFormatConsumer, format, ErrLogFormatTooLow)
}

// applyBelowConsumerFormat applies a write that holds consumer records
// while the cluster's log format (format) is below LogFormatConsumer, which
// the store never writes: as a node of an older version applies it, which
// ignores the records it does not know, so that every node keeps the same
// state. The write fails with ErrLogFormatTooLow when its fence held.
func (s *State) applyBelowConsumerFormat(w *raftpb.GroupWrite, format uint32) error {
	rest := &raftpb.GroupWrite{GroupId: w.GetGroupId(), Fence: w.GetFence()}
	for _, r := range w.GetRecords() {
		if !isConsumerRecord(r) {
			rest.Records = append(rest.Records, r)
		}
	}
	if err := s.ApplyWrite(rest); err != nil {
		return err
	}
	return consumerFormatError(w.GetGroupId(), format)
}

// applyConsumer applies one consumer record (isConsumerRecord) to the state.
func (s *State) applyConsumer(r *pb.Record) {
	switch k := r.GetKind().(type) {
	case *pb.Record_ConsumerGroupMetadata:
		c := k.ConsumerGroupMetadata
		if cs := s.consumerGroup(c.GetGroupId(), c.GetDeleted()); cs != nil {
			cs.group = unlessDeleted(c, c.GetDeleted())
			s.tidyConsumer(c.GetGroupId(), "")
		}
	case *pb.Record_ConsumerTargetAssignmentMetadata:
		t := k.ConsumerTargetAssignmentMetadata
		if cs := s.consumerGroup(t.GetGroupId(), t.GetDeleted()); cs != nil {
			cs.target = unlessDeleted(t, t.GetDeleted())
			s.tidyConsumer(t.GetGroupId(), "")
		}
	case *pb.Record_ConsumerMemberMetadata:
		m := k.ConsumerMemberMetadata
		if cm := s.consumerMember(m.GetGroupId(), m.GetMemberId(), m.GetDeleted()); cm != nil {
			cm.meta = unlessDeleted(m, m.GetDeleted())
			s.tidyConsumer(m.GetGroupId(), m.GetMemberId())
		}
	case *pb.Record_ConsumerTargetAssignment:
		t := k.ConsumerTargetAssignment
		if cm := s.consumerMember(t.GetGroupId(), t.GetMemberId(), t.GetDeleted()); cm != nil {
			cm.target = unlessDeleted(t, t.GetDeleted())
			s.tidyConsumer(t.GetGroupId(), t.GetMemberId())
		}
	case *pb.Record_ConsumerCurrentAssignment:
		c := k.ConsumerCurrentAssignment
		if cm := s.consumerMember(c.GetGroupId(), c.GetMemberId(), c.GetDeleted()); cm != nil {
			cm.current = unlessDeleted(c, c.GetDeleted())
			s.tidyConsumer(c.GetGroupId(), c.GetMemberId())
		}
	}
}

// unlessDeleted is the record to store: nil for a tombstone.
func unlessDeleted[T any](rec *T, deleted bool) *T {
	if deleted {
		return nil
	}
	return rec
}

// consumer returns group id's consumer records, created empty if needed.
func (s *State) consumer(id string) *consumerState {
	g := s.entry(id)
	if g.consumer == nil {
		g.consumer = &consumerState{members: map[string]*consumerMember{}}
	}
	return g.consumer
}

// consumerGroup returns group id's consumer records: created if needed,
// except for a tombstone, for which nil says there is nothing to remove.
func (s *State) consumerGroup(id string, tombstone bool) *consumerState {
	if tombstone {
		if g := s.groups[id]; g != nil {
			return g.consumer
		}
		return nil
	}
	return s.consumer(id)
}

// consumerMember returns a member's records: created if needed, except for
// a tombstone, for which nil says there is nothing to remove.
func (s *State) consumerMember(groupID, memberID string, tombstone bool) *consumerMember {
	if tombstone {
		if g := s.groups[groupID]; g != nil && g.consumer != nil {
			return g.consumer.members[memberID]
		}
		return nil
	}
	cs := s.consumer(groupID)
	m := cs.members[memberID]
	if m == nil {
		m = &consumerMember{}
		cs.members[memberID] = m
	}
	return m
}

// tidyConsumer removes a member left without records, then the group's
// consumer records when none is left, then the group when nothing is.
func (s *State) tidyConsumer(groupID, memberID string) {
	g := s.groups[groupID]
	if m := g.consumer.members[memberID]; m != nil && m.meta == nil && m.target == nil && m.current == nil {
		delete(g.consumer.members, memberID)
	}
	if g.consumer.empty() {
		g.consumer = nil
		s.forgetIfEmpty(groupID)
	}
}

// empty reports whether c holds no record.
func (c *consumerState) empty() bool {
	return c == nil || c.group == nil && c.target == nil && len(c.members) == 0
}

// consumerRecords returns c's records in their fixed order: the group
// metadata, the target assignment metadata, then each member's (by id)
// member metadata, target and current assignment. The messages are the
// state's own.
func (c *consumerState) records() []*pb.Record {
	if c.empty() {
		return nil
	}
	var out []*pb.Record
	if c.group != nil {
		out = append(out, &pb.Record{Kind: &pb.Record_ConsumerGroupMetadata{ConsumerGroupMetadata: c.group}})
	}
	if c.target != nil {
		out = append(out, &pb.Record{Kind: &pb.Record_ConsumerTargetAssignmentMetadata{ConsumerTargetAssignmentMetadata: c.target}})
	}
	ids := make([]string, 0, len(c.members))
	for id := range c.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		m := c.members[id]
		if m.meta != nil {
			out = append(out, &pb.Record{Kind: &pb.Record_ConsumerMemberMetadata{ConsumerMemberMetadata: m.meta}})
		}
		if m.target != nil {
			out = append(out, &pb.Record{Kind: &pb.Record_ConsumerTargetAssignment{ConsumerTargetAssignment: m.target}})
		}
		if m.current != nil {
			out = append(out, &pb.Record{Kind: &pb.Record_ConsumerCurrentAssignment{ConsumerCurrentAssignment: m.current}})
		}
	}
	return out
}

// ConsumerRecords returns copies of a consumer group's records, compacted
// and in their fixed order (see consumerState.records); none when the
// group has none. coordinator.ConsumerRecordsFromProto and
// coordinator.RestoreConsumerGroup rebuild the group from them.
func (s *State) ConsumerRecords(groupID string) []*pb.Record {
	g := s.groups[groupID]
	if g == nil {
		return nil
	}
	recs := g.consumer.records()
	for i, r := range recs {
		recs[i] = proto.CloneOf(r)
	}
	return recs
}

// captureConsumer appends a group's consumer records to a snapshot.
func captureConsumer(out []snapRecord, c *consumerState) []snapRecord {
	for _, r := range c.records() {
		out = append(out, snapRecord{msg: consumerSnapshotRecord(r)})
	}
	return out
}

// consumerSnapshotRecord is the SnapshotRecord of a consumer record.
func consumerSnapshotRecord(r *pb.Record) *raftpb.SnapshotRecord {
	switch k := r.GetKind().(type) {
	case *pb.Record_ConsumerGroupMetadata:
		return &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_ConsumerGroupMetadata{ConsumerGroupMetadata: k.ConsumerGroupMetadata}}
	case *pb.Record_ConsumerTargetAssignmentMetadata:
		return &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_ConsumerTargetAssignmentMetadata{ConsumerTargetAssignmentMetadata: k.ConsumerTargetAssignmentMetadata}}
	case *pb.Record_ConsumerMemberMetadata:
		return &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_ConsumerMemberMetadata{ConsumerMemberMetadata: k.ConsumerMemberMetadata}}
	case *pb.Record_ConsumerTargetAssignment:
		return &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_ConsumerTargetAssignment{ConsumerTargetAssignment: k.ConsumerTargetAssignment}}
	case *pb.Record_ConsumerCurrentAssignment:
		return &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_ConsumerCurrentAssignment{ConsumerCurrentAssignment: k.ConsumerCurrentAssignment}}
	}
	panic("raftfsm: not a consumer record")
}

// consumerFromSnapshot is the Record a consumer SnapshotRecord holds; nil
// when rec holds another kind.
func consumerFromSnapshot(rec *raftpb.SnapshotRecord) *pb.Record {
	switch k := rec.GetKind().(type) {
	case *raftpb.SnapshotRecord_ConsumerGroupMetadata:
		return &pb.Record{Kind: &pb.Record_ConsumerGroupMetadata{ConsumerGroupMetadata: k.ConsumerGroupMetadata}}
	case *raftpb.SnapshotRecord_ConsumerTargetAssignmentMetadata:
		return &pb.Record{Kind: &pb.Record_ConsumerTargetAssignmentMetadata{ConsumerTargetAssignmentMetadata: k.ConsumerTargetAssignmentMetadata}}
	case *raftpb.SnapshotRecord_ConsumerMemberMetadata:
		return &pb.Record{Kind: &pb.Record_ConsumerMemberMetadata{ConsumerMemberMetadata: k.ConsumerMemberMetadata}}
	case *raftpb.SnapshotRecord_ConsumerTargetAssignment:
		return &pb.Record{Kind: &pb.Record_ConsumerTargetAssignment{ConsumerTargetAssignment: k.ConsumerTargetAssignment}}
	case *raftpb.SnapshotRecord_ConsumerCurrentAssignment:
		return &pb.Record{Kind: &pb.Record_ConsumerCurrentAssignment{ConsumerCurrentAssignment: k.ConsumerCurrentAssignment}}
	}
	return nil
}

// ConsumerRecords returns a consumer group's records (State.ConsumerRecords).
func (f *FSM) ConsumerRecords(groupID string) []*pb.Record {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.ConsumerRecords(groupID)
}

// ConsumerRecords returns a consumer group's records as this node applied
// them (State.ConsumerRecords).
func (s *Store) ConsumerRecords(groupID string) []*pb.Record { return s.fsm.ConsumerRecords(groupID) }

// ConsumerRecords returns a consumer group's records (State.ConsumerRecords).
func (s *MemoryStore) ConsumerRecords(groupID string) []*pb.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.ConsumerRecords(groupID)
}

// refuseConsumerBelowFormat fails, without queuing it, a write that holds
// consumer records while the cluster's log format does not carry them; it
// reports whether it did.
func (s *Store) refuseConsumerBelowFormat(groupID string, recs []*pb.Record, done func(error)) bool {
	if format := s.fsm.LogFormat(); format < LogFormatConsumer && hasConsumerRecords(recs) {
		done(fmt.Errorf("%w: %w", coordinator.ErrStoreUnavailable, consumerFormatError(groupID, format)))
		return true
	}
	return false
}
