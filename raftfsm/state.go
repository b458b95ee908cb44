package raftfsm

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sync"
	"unsafe"

	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/internal/seededbug"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// State is the durable state of every group: its latest group record and
// its committed offsets, and a consumer group's records (consumer.go).
// Applying writes to it is deterministic: no clock, no randomness, and no
// map iteration decides anything.
type State struct {
	groups map[string]*groupEntry
}

type groupEntry struct {
	rec     *storedGroup // nil: none
	offsets map[offsetKey]*pb.OffsetRecord
	// sessions is the group's last MemberSessions (nil: none); it goes with
	// the group record.
	sessions *pb.MemberSessions
	// consumer is the group's consumer (KIP-848) records (nil: none),
	// apart from rec: see consumer.go.
	consumer *consumerState
}

// storedGroup is a stored group record, kept in its deterministic encoding
// (a decoded record costs several times its encoded size, and a node holds
// one per group it stores) with what fence checks read decoded: the
// generation and the member ids, sorted. The ids point into data, which is
// never changed once stored.
type storedGroup struct {
	data       []byte
	generation int32
	members    []string
}

// newStoredGroup encodes rec for the state.
func newStoredGroup(rec *pb.GroupRecord) *storedGroup {
	data, err := deterministic.Marshal(rec)
	if err != nil {
		// Only an invalid UTF-8 string fails, and a record that decoded
		// from a log entry or snapshot has none.
		panic("raftfsm: encode group record: " + err.Error())
	}
	return parseStoredGroup(data)
}

// parseStoredGroup reads the fence fields of an encoded GroupRecord.
func parseStoredGroup(data []byte) *storedGroup {
	r := &storedGroup{data: data}
	// The member ids are counted first: the list is kept as long as the
	// record, one entry per member, so it is allocated at its length.
	n := 0
	walkFields(data, func(num protowire.Number, _ uint64, _ []byte) {
		if num == 7 {
			n++
		}
	})
	if n > 0 {
		r.members = make([]string, 0, n)
	}
	walkFields(data, func(num protowire.Number, v uint64, b []byte) {
		switch num {
		case 3: // generation
			r.generation = int32(v)
		case 7: // members
			id := ""
			walkFields(b, func(num protowire.Number, _ uint64, b []byte) {
				if num == 1 && len(b) > 0 { // member_id
					id = unsafe.String(&b[0], len(b))
				}
			})
			r.members = append(r.members, id)
		}
	})
	slices.Sort(r.members)
	return r
}

// walkFields calls f for every field of an encoded message: v for varint
// fields, b for length-delimited ones. The state encodes every record it
// parses, so the bytes are well formed; it stops at anything else.
func walkFields(data []byte, f func(num protowire.Number, v uint64, b []byte)) {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return
		}
		data = data[n:]
		switch typ {
		case protowire.VarintType:
			v, n := protowire.ConsumeVarint(data)
			if n < 0 {
				return
			}
			f(num, v, nil)
			data = data[n:]
		case protowire.BytesType:
			b, n := protowire.ConsumeBytes(data)
			if n < 0 {
				return
			}
			f(num, 0, b)
			data = data[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return
			}
			data = data[n:]
		}
	}
}

// decode returns the record as a new message.
func (r *storedGroup) decode() *pb.GroupRecord {
	rec := &pb.GroupRecord{}
	if err := proto.Unmarshal(r.data, rec); err != nil {
		panic("raftfsm: decode stored group record: " + err.Error())
	}
	return rec
}

func (r *storedGroup) hasMember(id string) bool {
	_, ok := slices.BinarySearch(r.members, id)
	return ok
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
		if g == nil || g.rec == nil || g.rec.generation != f.GetGeneration() && !seededbug.On("no-generation-check") ||
			!g.rec.hasMember(f.GetMemberId()) {
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
		s.entry(k.Group.GetGroupId()).rec = newStoredGroup(k.Group)
	case *pb.Record_Offset:
		o := k.Offset
		s.entry(o.GetGroupId()).offsets[offsetKey{o.GetTopic(), o.GetPartition()}] = o
	case *pb.Record_GenerationReserved:
		r := k.GenerationReserved
		g := s.entry(r.GetGroupId())
		// A stored record is never changed in place: snapshots may hold it.
		rec := &pb.GroupRecord{GroupId: r.GetGroupId()}
		if g.rec != nil {
			rec = g.rec.decode()
		}
		rec.GenerationFloor = max(rec.GetGenerationFloor(), r.GetGeneration())
		g.rec = newStoredGroup(rec)
	case *pb.Record_MemberSessions:
		ms := k.MemberSessions
		if g := s.groups[ms.GetGroupId()]; g != nil && g.rec != nil {
			if len(ms.GetMembers()) == 0 {
				g.sessions = nil
			} else {
				g.sessions = ms
			}
		}
	case *pb.Record_GroupTombstone:
		// The group is gone, whatever its type.
		if g := s.groups[k.GroupTombstone.GetGroupId()]; g != nil {
			g.rec, g.sessions, g.consumer = nil, nil, nil
			s.forgetIfEmpty(k.GroupTombstone.GetGroupId())
		}
	case *pb.Record_OffsetTombstone:
		t := k.OffsetTombstone
		if g := s.groups[t.GetGroupId()]; g != nil {
			delete(g.offsets, offsetKey{t.GetTopic(), t.GetPartition()})
			s.forgetIfEmpty(t.GetGroupId())
		}
	case *pb.Record_ConsumerGroupMetadata, *pb.Record_ConsumerMemberMetadata, *pb.Record_ConsumerTargetAssignment,
		*pb.Record_ConsumerTargetAssignmentMetadata, *pb.Record_ConsumerCurrentAssignment:
		s.applyConsumer(r)
	}
}

func (s *State) forgetIfEmpty(id string) {
	if g := s.groups[id]; g != nil && g.rec == nil && len(g.offsets) == 0 && g.consumer == nil {
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
		rec = g.rec.decode()
	}
	return rec, offsets
}

// Sessions returns a copy of a group's last MemberSessions, nil when none.
func (s *State) Sessions(groupID string) *pb.MemberSessions {
	if g := s.groups[groupID]; g != nil && g.sessions != nil {
		return proto.CloneOf(g.sessions)
	}
	return nil
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
// each group's record, then its MemberSessions, then its consumer records
// (consumerState.records), then its offsets in (topic, partition) order.
func (s *State) capture(out []snapRecord) []snapRecord {
	for _, id := range s.Groups() {
		g := s.groups[id]
		if g.rec != nil {
			out = append(out, snapRecord{group: g.rec.data})
		}
		if g.sessions != nil {
			out = append(out, snapRecord{msg: &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_MemberSessions{MemberSessions: g.sessions}}})
		}
		out = captureConsumer(out, g.consumer)
		for _, o := range g.sortedOffsets() {
			out = append(out, snapRecord{msg: &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_Offset{Offset: o}}})
		}
	}
	return out
}

// snapRecord is one record of a snapshot: msg, or, for a group record, the
// record's encoding (group), which is written as the SnapshotRecord that
// holds it without decoding it first.
type snapRecord struct {
	msg   *raftpb.SnapshotRecord
	group []byte
}

var deterministic = proto.MarshalOptions{Deterministic: true}

// snapshotGroupTag is the tag of SnapshotRecord's group field.
var snapshotGroupTag = protowire.AppendTag(nil, 1, protowire.BytesType)

// writeRecord writes a length-delimited SnapshotRecord. A group record's
// bytes are exactly what encoding SnapshotRecord{group: record} gives.
func writeRecord(w io.Writer, r snapRecord) error {
	if r.msg != nil {
		_, err := protodelim.MarshalOptions{MarshalOptions: deterministic}.MarshalTo(w, r.msg)
		return err
	}
	body := len(snapshotGroupTag) + protowire.SizeBytes(len(r.group))
	buf := protowire.AppendVarint(make([]byte, 0, protowire.SizeVarint(uint64(body))+body-len(r.group)), uint64(body))
	buf = append(buf, snapshotGroupTag...)
	buf = protowire.AppendVarint(buf, uint64(len(r.group)))
	if _, err := w.Write(buf); err != nil {
		return err
	}
	_, err := w.Write(r.group)
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

// Sessions implements actors.SessionStore.
func (s *MemoryStore) Sessions(groupID string) *pb.MemberSessions {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Sessions(groupID)
}

// Groups implements actors.Store.
func (s *MemoryStore) Groups() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Groups(), nil
}
