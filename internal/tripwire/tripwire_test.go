package tripwire

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// Fill sets every field, every oneof case is reached by some variant, and
// Diff names a field that is dropped.
func TestFillAndDiff(t *testing.T) {
	d := (&raftpb.GroupWrite{}).ProtoReflect().Descriptor()
	if n, want := Variants(d), (&pb.Record{}).ProtoReflect().Descriptor().Oneofs().ByName("kind").Fields().Len(); n != want { // Record's kind
		t.Fatalf("%d variants, want %d", n, want)
	}
	var kinds []string
	for v := range Variants(d) {
		w := &raftpb.GroupWrite{}
		Fill(w, v)
		if len(w.GetRecords()) != 2 || w.GetFence().GetMemberId() == "" || w.GetGroupId() == "" {
			t.Fatalf("variant %d: %v", v, w)
		}
		kinds = append(kinds, string(w.GetRecords()[0].ProtoReflect().WhichOneof(d.Fields().ByName("records").Message().Oneofs().Get(0)).Name()))
		if v == 1 {
			o := w.GetRecords()[1].GetOffset()
			if o.GetExpireTimestampMs() == 0 || o.GetLeaderEpoch() == 0 || o.GetMetadata() == "" {
				t.Fatalf("offset record %v", o)
			}
			dropped := proto.CloneOf(w)
			dropped.GetRecords()[1].GetOffset().ExpireTimestampMs = 0
			if got := Diff(w, dropped); len(got) != 1 || !strings.HasPrefix(got[0], "records[1].offset.expire_timestamp_ms:") {
				t.Fatalf("diff %q", got)
			}
		}
	}
	slices.Sort(kinds)
	want := []string{"consumer_current_assignment", "consumer_group_metadata", "consumer_member_metadata", "consumer_target_assignment",
		"consumer_target_assignment_metadata", "generation_reserved", "group", "group_tombstone", "member_sessions", "offset", "offset_tombstone"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds %q, want %q", kinds, want)
	}
}

// Leaf sets one field at a time, each once, to Fill's value.
func TestLeaf(t *testing.T) {
	full := &pb.OffsetRecord{}
	Fill(full, 0)
	var paths []string
	for n := 0; ; n++ {
		o := &pb.OffsetRecord{}
		path, ok := Leaf(o, 0, n)
		if !ok {
			break
		}
		paths = append(paths, path)
		if got := Diff(full, o); len(got) != 7 {
			t.Fatalf("leaf %s: %d fields differ from the full message, want 7", path, len(got))
		}
	}
	if want := []string{"group_id", "topic", "partition", "offset", "leader_epoch", "metadata", "commit_timestamp_ms", "expire_timestamp_ms"}; !slices.Equal(paths, want) {
		t.Fatalf("leaves %q, want %q", paths, want)
	}
}

type inner struct {
	N    int32
	S    *string
	List []int16
}

type outer struct {
	Name   string
	Inners []inner
	hidden int
}

func TestFillStructAndDiff(t *testing.T) {
	var a outer
	FillStruct(&a, 2)
	if a.Name == "" || len(a.Inners) != 2 || a.Inners[1].S == nil || len(a.Inners[1].List) != 2 || a.Inners[1].List[1] == 0 || a.hidden != 0 {
		t.Fatalf("filled %+v", a)
	}
	b := a
	b.Inners = slices.Clone(a.Inners)
	b.Inners[1].N = 0
	if got := DiffStruct(&a, &b); len(got) != 1 || !strings.HasPrefix(got[0], "Inners[1].N:") {
		t.Fatalf("diff %q", got)
	}
	var c outer
	FillStruct(&c, 1, "Name")
	if c.Name != "" || len(c.Inners) != 1 {
		t.Fatalf("filled %+v", c)
	}
}
