package raftfsm

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

func sessionsRecord(group string, members ...*pb.SilentMember) *pb.Record {
	return &pb.Record{Kind: &pb.Record_MemberSessions{MemberSessions: &pb.MemberSessions{GroupId: group, Members: members}}}
}

// A group's MemberSessions replaces the one before, an empty one clears it,
// it needs the group's record, goes with the group's tombstone, and lives
// through a snapshot.
func TestMemberSessionsApplied(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	var idx uint64
	apply := func(recs ...*pb.Record) {
		t.Helper()
		idx++
		if res := applyAt(f, idx, writesCmd(t, writeOf("g", nil, recs...))); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	a := &pb.SilentMember{MemberId: "m1", SessionEndMs: 1_700_000_000_000, GraceEndMs: 1_700_000_006_000}
	b := &pb.SilentMember{MemberId: "m2", SessionEndMs: 1_700_000_001_000}
	apply(sessionsRecord("g", a))
	if got := f.Sessions("g"); got != nil {
		t.Fatalf("sessions of a group without a record: %v", got)
	}
	apply(groupRecord("g", 1, "m1", "m2"), sessionsRecord("g", a))
	apply(sessionsRecord("g", a, b))
	want := &pb.MemberSessions{GroupId: "g", Members: []*pb.SilentMember{a, b}}
	if got := f.Sessions("g"); !proto.Equal(got, want) {
		t.Fatalf("sessions %v, want %v", got, want)
	}
	back := restored(t, encoded(t, f))
	if got := back.Sessions("g"); !proto.Equal(got, want) || back.Hash() != f.Hash() {
		t.Fatalf("restored sessions %v, want %v (hash equal: %v)", got, want, back.Hash() == f.Hash())
	}
	apply(sessionsRecord("g"))
	if got := f.Sessions("g"); got != nil {
		t.Fatalf("sessions after an empty record: %v", got)
	}
	apply(sessionsRecord("g", b))
	apply(groupTombstone("g"))
	if got := f.Sessions("g"); got != nil {
		t.Fatalf("sessions after the group's tombstone: %v", got)
	}
	apply(groupRecord("g", 2, "m1"))
	if got := f.Sessions("g"); got != nil {
		t.Fatalf("sessions of the group recreated: %v", got)
	}
}

// Below log format 3 the store drops a MemberSessions write (older nodes
// could not read it) and reports it done.
func TestStoreDropsSessionsBelowFormat(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	s := &Store{fsm: f}
	s.closed = true // anything queued would fail with ErrStoreNotLeader
	var got []error
	s.Append("g", []*pb.Record{sessionsRecord("g")}, nil, func(err error) { got = append(got, err) })
	if len(got) != 1 || got[0] != nil {
		t.Fatalf("sessions write below format 3: %v", got)
	}
	f.format.Store(LogFormatSessions)
	s.Append("g", []*pb.Record{sessionsRecord("g")}, nil, func(err error) { got = append(got, err) })
	if len(got) != 2 || got[1] == nil {
		t.Fatalf("sessions write at format 3 did not reach the log: %v", got)
	}
}
