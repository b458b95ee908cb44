package raftfsm

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/internal/tripwire"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// The tests below fill every field of the messages the hand-written codecs
// of this package handle, from the protobuf descriptors, so that a field
// added to the schema and not to a codec fails them, named.

// filledWrites returns GroupWrites with every field set, one per variant
// (Record's kind takes each case in one), and whether its records are all
// offset records, the ones written and decoded by hand.
func filledWrites() (ws []*raftpb.GroupWrites, offsets []bool) {
	for v := range tripwire.Variants((&raftpb.GroupWrites{}).ProtoReflect().Descriptor()) {
		w := &raftpb.GroupWrites{}
		tripwire.Fill(w, v)
		ws = append(ws, w)
		offsets = append(offsets, w.GetWrites()[0].GetRecords()[0].GetOffset() != nil)
	}
	return ws, offsets
}

// failDiff fails naming every field in which got differs from want.
func failDiff(t *testing.T, codec string, want, got proto.Message) {
	t.Helper()
	for _, d := range tripwire.Diff(want, got) {
		t.Errorf("%s does not keep %s: %s", codec, want.ProtoReflect().Descriptor().Name(), d)
	}
}

// decodeEntry decodes a group-writes entry with protobuf.
func decodeEntry(t *testing.T, data []byte) *raftpb.GroupWrites {
	t.Helper()
	var env raftpb.Envelope
	if err := proto.Unmarshal(data, &env); err != nil {
		t.Fatal(err)
	}
	var got raftpb.GroupWrites
	if err := proto.Unmarshal(env.GetPayload(), &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// encodeGroupWrites writes every field of a write, of its fence and of its
// offset records (and, through protobuf, of the other records).
func TestEncodeGroupWritesKeepsEveryField(t *testing.T) {
	ws, offsets := filledWrites()
	for i, want := range ws {
		data, _, failed := encodeGroupWrites(want.GetWrites())
		if failed != nil {
			t.Fatalf("variant %d: %v", i, failed)
		}
		failDiff(t, "encodeGroupWrites", want, decodeEntry(t, data))
		if !offsets[i] {
			continue
		}
		eachWriteLeaf(i, func(path string, w *raftpb.GroupWrite) {
			data, _, _ := encodeGroupWrites([]*raftpb.GroupWrite{w})
			if got := decodeEntry(t, data); !proto.Equal(got.GetWrites()[0], w) {
				t.Errorf("encodeGroupWrites drops GroupWrite.%s", path)
			}
		})
	}
}

// eachWriteLeaf calls f with every GroupWrite of variant that sets one leaf
// field (tripwire.Leaf), so that a field a codec leaves out is named even
// when another is left out too.
func eachWriteLeaf(variant int, f func(path string, w *raftpb.GroupWrite)) {
	for n := 0; ; n++ {
		w := &raftpb.GroupWrite{}
		path, ok := tripwire.Leaf(w, variant, n)
		if !ok {
			return
		}
		f(path, w)
	}
}

// The hand decoder decodes every field of a write, of its fence and of its
// offset records itself (a field it did not know would send every commit's
// entry to proto.Unmarshal), and the result is proto.Unmarshal's.
func TestDecodeGroupWritesKnowsEveryField(t *testing.T) {
	ws, offsets := filledWrites()
	for i, want := range ws {
		got, err := decodeGroupWrites(marshal(t, want))
		if err != nil {
			t.Fatal(err)
		}
		failDiff(t, "decodeGroupWrites", want, got)
		if !offsets[i] {
			continue
		}
		eachWriteLeaf(i, func(path string, w *raftpb.GroupWrite) {
			var d writeDecoder
			if got, ok := d.fast(marshal(t, &raftpb.GroupWrites{Writes: []*raftpb.GroupWrite{w}})); !ok {
				t.Errorf("the hand decoder does not know GroupWrite.%s (it leaves the entry to proto.Unmarshal)", path)
			} else if !proto.Equal(got.GetWrites()[0], w) {
				t.Errorf("the hand decoder drops GroupWrite.%s", path)
			}
		})
	}
}

// parseEnvelope reads every field of an Envelope.
func TestParseEnvelopeKnowsEveryField(t *testing.T) {
	want := &raftpb.Envelope{}
	tripwire.Fill(want, 0)
	e, err := parseEnvelope(marshal(t, want))
	if err != nil {
		t.Fatal(err)
	}
	failDiff(t, "parseEnvelope", want, &raftpb.Envelope{Type: e.typ, Version: e.version, Payload: e.payload, Ignorable: e.ignorable})
}

// A group record stored in its encoding, and the snapshot record written
// from that encoding, keep every field; the fence fields read from it are
// the record's.
func TestStoredGroupKeepsEveryField(t *testing.T) {
	rec := &pb.GroupRecord{}
	tripwire.Fill(rec, 0)
	sg := newStoredGroup(rec)
	failDiff(t, "the stored group", rec, sg.decode())
	var ids []string
	for _, m := range rec.GetMembers() {
		ids = append(ids, m.GetMemberId())
	}
	slices.Sort(ids)
	if sg.generation != rec.GetGeneration() || !slices.Equal(sg.members, ids) {
		t.Errorf("stored group: generation %d, members %q; want %d, %q", sg.generation, sg.members, rec.GetGeneration(), ids)
	}
	var buf bytes.Buffer
	if err := writeRecord(&buf, snapRecord{group: sg.data}); err != nil {
		t.Fatal(err)
	}
	got := snapshotRecords(t, buf.Bytes())
	if len(got) != 1 {
		t.Fatalf("%d snapshot records", len(got))
	}
	failDiff(t, "the stored group's snapshot record", &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_Group{Group: rec}}, got[0])
}

// Every record kind, applied to a State, loads and snapshots with every
// field it had.
func TestStateKeepsEveryField(t *testing.T) {
	group := &pb.GroupRecord{}
	tripwire.Fill(group, 0)
	offset := &pb.OffsetRecord{}
	tripwire.Fill(offset, 0)
	offset.GroupId = group.GetGroupId()
	s := NewState()
	w := &raftpb.GroupWrite{GroupId: group.GetGroupId(), Records: []*pb.Record{
		{Kind: &pb.Record_Group{Group: group}},
		{Kind: &pb.Record_Offset{Offset: offset}},
	}}
	if err := s.ApplyWrite(w); err != nil {
		t.Fatal(err)
	}
	rec, offs := s.Load(group.GetGroupId())
	failDiff(t, "the state", group, rec)
	if len(offs) != 1 {
		t.Fatalf("%d offsets", len(offs))
	}
	failDiff(t, "the state", offset, offs[0])
	var buf bytes.Buffer
	for _, r := range s.capture(nil) {
		if err := writeRecord(&buf, r); err != nil {
			t.Fatal(err)
		}
	}
	got := snapshotRecords(t, buf.Bytes())
	want := []*raftpb.SnapshotRecord{
		{Kind: &raftpb.SnapshotRecord_Group{Group: group}},
		{Kind: &raftpb.SnapshotRecord_Offset{Offset: offset}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d snapshot records, want %d", len(got), len(want))
	}
	for i := range want {
		failDiff(t, fmt.Sprintf("snapshot record %d", i), want[i], got[i])
	}
}
