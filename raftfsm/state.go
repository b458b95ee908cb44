package actors

import (
	"cmp"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Store keeps the durable records of every group.
type Store interface {
	// Append writes recs, in order, for one group and then calls done exactly
	// once, from any goroutine, with nil or an error wrapping one of the
	// coordinator's store sentinel errors. Appends of one group are applied in
	// call order.
	Append(groupID string, recs []*pb.Record, done func(error))
	// Load returns a group's durable state. A nil record and no offsets mean
	// the store knows nothing of the group.
	Load(groupID string) (*pb.GroupRecord, []*pb.OffsetRecord, error)
	// Groups lists every group the store knows, sorted.
	Groups() ([]string, error)
}

// MemoryStore is a Store in memory. Records are cloned on the way in and out.
type MemoryStore struct {
	mu     sync.Mutex
	groups map[string]*memGroup
}

type memGroup struct {
	rec     *pb.GroupRecord
	offsets map[offsetKey]*pb.OffsetRecord
}

type offsetKey struct {
	topic     string
	partition int32
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{groups: map[string]*memGroup{}}
}

// Append applies recs and calls done(nil) before returning.
func (s *MemoryStore) Append(groupID string, recs []*pb.Record, done func(error)) {
	s.mu.Lock()
	for _, r := range recs {
		s.apply(r)
	}
	s.mu.Unlock()
	done(nil)
}

func (s *MemoryStore) group(id string) *memGroup {
	g := s.groups[id]
	if g == nil {
		g = &memGroup{offsets: map[offsetKey]*pb.OffsetRecord{}}
		s.groups[id] = g
	}
	return g
}

func (s *MemoryStore) apply(r *pb.Record) {
	switch k := r.GetKind().(type) {
	case *pb.Record_Group:
		s.group(k.Group.GetGroupId()).rec = proto.CloneOf(k.Group)
	case *pb.Record_Offset:
		o := k.Offset
		s.group(o.GetGroupId()).offsets[offsetKey{o.GetTopic(), o.GetPartition()}] = proto.CloneOf(o)
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

func (s *MemoryStore) forgetIfEmpty(id string) {
	if g := s.groups[id]; g != nil && g.rec == nil && len(g.offsets) == 0 {
		delete(s.groups, id)
	}
}

// Load implements Store.
func (s *MemoryStore) Load(groupID string) (*pb.GroupRecord, []*pb.OffsetRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.groups[groupID]
	if g == nil {
		return nil, nil, nil
	}
	offsets := make([]*pb.OffsetRecord, 0, len(g.offsets))
	for _, o := range g.offsets {
		offsets = append(offsets, proto.CloneOf(o))
	}
	slices.SortFunc(offsets, func(a, b *pb.OffsetRecord) int {
		return cmp.Or(cmp.Compare(a.GetTopic(), b.GetTopic()), cmp.Compare(a.GetPartition(), b.GetPartition()))
	})
	var rec *pb.GroupRecord
	if g.rec != nil {
		rec = proto.CloneOf(g.rec)
	}
	return rec, offsets, nil
}

// Groups implements Store.
func (s *MemoryStore) Groups() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.groups))
	for id := range s.groups {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}
