package coordinator

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/cohort-coord/cohort/internal/tripwire"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// consumerGroupID is the group id a consumer record's message carries.
func consumerGroupID(r *pb.Record) string {
	m := r.ProtoReflect()
	kind := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind"))
	msg := m.Get(kind).Message()
	return msg.Get(msg.Descriptor().Fields().ByName("group_id")).String()
}

// consumerRoundTrip converts a protobuf consumer record to a ConsumerRecord and
// back.
func consumerRoundTrip(t *testing.T, r *pb.Record) *pb.Record {
	t.Helper()
	c, ok := ConsumerRecordFromProto(r)
	if !ok {
		t.Fatalf("%v is no consumer record", r)
	}
	return ConsumerRecordToProto(consumerGroupID(r), c)
}

// Every field of every consumer record's message, filled from the
// descriptor, survives the conversion to a ConsumerRecord and back: a field
// added to records.proto and not to the conversion fails here, named.
func TestConsumerRecordProtoKeepsEveryField(t *testing.T) {
	kinds := map[protoreflect.Name]bool{}
	for v := range tripwire.Variants((&pb.Record{}).ProtoReflect().Descriptor()) {
		want := &pb.Record{}
		tripwire.Fill(want, v)
		if _, ok := ConsumerRecordFromProto(want); !ok {
			continue
		}
		m := want.ProtoReflect()
		kind := m.WhichOneof(m.Descriptor().Oneofs().ByName("kind")).Name()
		kinds[kind] = true
		for _, d := range tripwire.Diff(want, consumerRoundTrip(t, want)) {
			t.Errorf("the consumer record conversion does not keep Record.%s: %s", kind, d)
		}
		// Each leaf alone, so a field left out is named even when another
		// one is left out too.
		for n := 0; ; n++ {
			leaf := &pb.Record{}
			path, ok := tripwire.Leaf(leaf, v, n)
			if !ok {
				break
			}
			if _, ok := ConsumerRecordFromProto(leaf); !ok {
				continue // the leaf is in no consumer record
			}
			if got := consumerRoundTrip(t, leaf); !proto.Equal(got, leaf) {
				t.Errorf("the consumer record conversion drops Record.%s", path)
			}
		}
	}
	if len(kinds) != 5 {
		t.Fatalf("consumer record kinds converted: %v, want 5", kinds)
	}
}

// Every field of every ConsumerRecord type survives the conversion to
// protobuf and back (Go reflection fills them, so a field added to a record
// type and not to the conversion fails here, named).
func TestConsumerRecordGoKeepsEveryField(t *testing.T) {
	for _, p := range []any{
		&ConsumerGroupEpochRecord{}, &ConsumerTargetEpochRecord{},
		&ConsumerMemberRecord{}, &ConsumerTargetRecord{}, &ConsumerCurrentRecord{},
	} {
		tripwire.FillStruct(p, 2)
		if m, ok := p.(*ConsumerMemberRecord); ok {
			// Kept in whole milliseconds, as requests give it.
			m.RebalanceTimeout = m.RebalanceTimeout * time.Millisecond
			m.Classic.SessionTimeout = m.Classic.SessionTimeout * time.Millisecond
		}
		want := reflect.ValueOf(p).Elem().Interface().(ConsumerRecord)
		got, ok := ConsumerRecordFromProto(ConsumerRecordToProto("g", want))
		if !ok {
			t.Fatalf("%T: not converted back", want)
		}
		gp := reflect.New(reflect.TypeOf(got))
		gp.Elem().Set(reflect.ValueOf(got))
		for _, d := range tripwire.DiffStruct(p, gp.Interface()) {
			t.Errorf("%T: the conversion does not keep %s", want, d)
		}
	}
	if _, ok := ConsumerRecordFromProto(&pb.Record{Kind: &pb.Record_Offset{Offset: &pb.OffsetRecord{}}}); ok {
		t.Fatal("an offset record converted to a consumer record")
	}
	recs := ConsumerRecordsFromProto([]*pb.Record{
		{Kind: &pb.Record_GroupTombstone{GroupTombstone: &pb.GroupTombstone{GroupId: "g"}}},
		ConsumerRecordToProto("g", ConsumerGroupEpochRecord{Epoch: 3}),
	})
	if !reflect.DeepEqual(recs, []ConsumerRecord{ConsumerGroupEpochRecord{Epoch: 3}}) {
		t.Fatalf("ConsumerRecordsFromProto kept %v", recs)
	}
}
