package raftfsm

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sync"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/internal/seededbug"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// State is the durable state of every group: its latest group record and
// its committed offsets. Applying writes to it is deterministic: no clock, no
// randomness, and no map iteration decides anything.
type State struct {
	groups map[string]*groupEntry
}

type groupEntry struct {
	rec     *pb.GroupRecord
	offsets map[offsetKey]*pb.OffsetRecord
}

type offsetKey struct {
	topic     string
	partition int32
}

// NewState returns an empty State.
func NewState() *State { return &State{groups: map[string]*groupEntry{}} }

func (s *State) entry(id string) *groupEntry {
	g := s.groups[id]
	if g == nil {
		g = &groupEntry{offsets: map[offsetKey]*pb.OffsetRecord{}}
		s.groups[id] = g
	}
	return g
}

// ApplyWrite applies one group write, or refuses all of it with an error
// wrapping coordinator.ErrStoreFenced when its fence does not match.
func (s *State) ApplyWrite(w *raftpb.GroupWrite) error {
	if f := w.GetFence(); f != nil {
		g := s.groups[w.GetGroupId()]
		if g == nil || g.rec == nil || g.rec.GetGeneration() != f.GetGeneration() && !seededbug.On("no-generation-check") ||
			!slices.ContainsFunc(g.rec.GetMembers(), func(m *pb.MemberRecord) bool { return m.GetMemberId() == f.GetMemberId() }) {
			return fmt.Errorf("group %q generation %d member %q: %w", w.GetGroupId(), f.GetGeneration(), f.GetMemberId(), coordinator.ErrStoreFenced)
		}
	}
	for _, r := range w.GetRecords() {
		s.applyRecord(r)
	}
	return nil
}

func (s *State) applyRecord(r *pb.Record) {
	switch k := r.GetKind().(type) {
	case *pb.Record_Group:
		s.entry(k.Group.GetGroupId()).rec = k.Group
	case *pb.Record_Offset:
		o := k.Offset
		s.entry(o.GetGroupId()).offsets[offsetKey{o.GetTopic(), o.GetPartition()}] = o
	case *pb.Record_GenerationReserved:
		r := k.GenerationReserved
		g := s.entry(r.GetGroupId())
		// A stored record is never changed in place: snapshots and loads
		// may hold it.
		rec := &pb.GroupRecord{GroupId: r.GetGroupId()}
		if g.rec != nil {
			rec = proto.CloneOf(g.rec)
		}
		rec.GenerationFloor = max(rec.GetGenerationFloor(), r.GetGeneration())
		g.rec = rec
	case *pb.Record_GroupTombstone:
		if g := s.groups[k.GroupTombstone.GetGroupId()]; g != nil {
			g.rec = nil
			s.forgetIfEmpty(k.GroupTombstone.GetGroupId())
		}
	case *pb.Record_OffsetTombstone:
		t := k.OffsetTombstone
		if g := s.groups[t.GetGroupId()]; g != nil {
			delete(g.offsets, offsetKey{t.GetTopic(), t.GetPartition()})
			s.forgetIfEmpty(t.GetGroupId())
		}
	}
}

func (s *State) forgetIfEmpty(id string) {
	if g := s.groups[id]; g != nil && g.rec == nil && len(g.offsets) == 0 {
		delete(s.groups, id)
	}
}

// Load returns copies of a group's record and offsets (sorted); nil and none
// when the group is unknown.
func (s *State) Load(groupID string) (*pb.GroupRecord, []*pb.OffsetRecord) {
	g := s.groups[groupID]
	if g == nil {
		return nil, nil
	}
	offsets := make([]*pb.OffsetRecord, 0, len(g.offsets))
	for _, o := range g.sortedOffsets() {
		offsets = append(offsets, proto.CloneOf(o))
	}
	var rec *pb.GroupRecord
	if g.rec != nil {
		rec = proto.CloneOf(g.rec)
	}
	return rec, offsets
}

func (g *groupEntry) sortedOffsets() []*pb.OffsetRecord {
	out := make([]*pb.OffsetRecord, 0, len(g.offsets))
	for _, o := range g.offsets {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b *pb.OffsetRecord) int {
		return cmp.Or(cmp.Compare(a.GetTopic(), b.GetTopic()), cmp.Compare(a.GetPartition(), b.GetPartition()))
	})
	return out
}

// Groups lists every known group id, sorted.
func (s *State) Groups() []string {
	ids := make([]string, 0, len(s.groups))
	for id := range s.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// capture appends the state's snapshot records to out: groups in id order,
// each group's record before its offsets in (topic, partition) order.
func (s *State) capture(out []*raftpb.SnapshotRecord) []*raftpb.SnapshotRecord {
	for _, id := range s.Groups() {
		g := s.groups[id]
		if g.rec != nil {
			out = append(out, &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_Group{Group: g.rec}})
		}
		for _, o := range g.sortedOffsets() {
			out = append(out, &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_Offset{Offset: o}})
		}
	}
	return out
}

var deterministic = proto.MarshalOptions{Deterministic: true}

func writeRecord(w io.Writer, r *raftpb.SnapshotRecord) error {
	_, err := protodelim.MarshalOptions{MarshalOptions: deterministic}.MarshalTo(w, r)
	return err
}

// MemoryStore keeps a State in memory behind the actors.Store interface: the
// store of tests and of benchmarks that leave replication out.
type MemoryStore struct {
	mu    sync.Mutex
	state *State
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{state: NewState()} }

// Append applies the write and calls done before returning.
func (s *MemoryStore) Append(groupID string, recs []*pb.Record, fence *pb.WriteFence, done func(error)) {
	w := &raftpb.GroupWrite{GroupId: groupID, Fence: fence}
	for _, r := range recs {
		w.Records = append(w.Records, proto.CloneOf(r))
	}
	s.mu.Lock()
	err := s.state.ApplyWrite(w)
	s.mu.Unlock()
	done(err)
}

// Load implements actors.Store.
func (s *MemoryStore) Load(groupID string) (*pb.GroupRecord, []*pb.OffsetRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, offsets := s.state.Load(groupID)
	return rec, offsets, nil
}

// Groups implements actors.Store.
func (s *MemoryStore) Groups() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Groups(), nil
}
