package raftfsm

import (
	"bytes"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// marshal is proto.Marshal that fails the test.
func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An unknown entry marked ignorable is skipped: the FSM refuses it and goes
// on applying what follows.
func TestApplySkipsIgnorableUnknownEntry(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	for i, env := range []*raftpb.Envelope{
		{Type: raftpb.CommandType(99), Version: CommandVersion, Payload: []byte{1}, Ignorable: true},
		{Type: raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, Version: CommandVersion + 1, Ignorable: true},
	} {
		if res := applyAt(f, uint64(i+1), marshal(t, env)); !errors.Is(res.Err, ErrBadCommand) || errors.Is(res.Err, ErrHalted) {
			t.Fatalf("entry %d: %v, want ErrBadCommand without halting", i+1, res.Err)
		}
	}
	if res := applyAt(f, 3, writesCmd(t, writeOf("g", nil, groupRecord("g", 4, "m1")))); res.Err != nil || res.Errs[0] != nil {
		t.Fatalf("write after a skipped entry: %v %v", res.Err, res.Errs)
	}
	if rec, _, _ := f.Load("g"); rec.GetGeneration() != 4 {
		t.Fatalf("generation %d, want 4", rec.GetGeneration())
	}
	if f.HaltErr() != nil {
		t.Fatalf("halted: %v", f.HaltErr())
	}
}

// An unknown entry without the flag halts the FSM: Halted is closed, no
// later entry is applied and no snapshot is taken.
func TestApplyHaltsOnUnknownEntry(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	if res := applyAt(f, 1, writesCmd(t, writeOf("g", nil, groupRecord("g", 1, "m1")))); res.Err != nil {
		t.Fatal(res.Err)
	}
	before := f.Hash()
	res := applyAt(f, 2, marshal(t, &raftpb.Envelope{Type: raftpb.CommandType(99), Version: CommandVersion}))
	if !errors.Is(res.Err, ErrHalted) || !errors.Is(res.Err, ErrBadCommand) {
		t.Fatalf("unknown entry: %v, want ErrHalted and ErrBadCommand", res.Err)
	}
	select {
	case <-f.Halted():
	default:
		t.Fatal("Halted is not closed")
	}
	if !errors.Is(f.HaltErr(), ErrHalted) {
		t.Fatalf("HaltErr %v", f.HaltErr())
	}
	if res := applyAt(f, 3, writesCmd(t, writeOf("g", nil, groupRecord("g", 2, "m1")))); !errors.Is(res.Err, ErrHalted) {
		t.Fatalf("entry after the halt: %v, want ErrHalted", res.Err)
	}
	if rec, _, _ := f.Load("g"); rec.GetGeneration() != 1 || f.Hash() != before {
		t.Fatalf("halted FSM changed: generation %d", rec.GetGeneration())
	}
	if _, err := f.Snapshot(); !errors.Is(err, ErrHalted) {
		t.Fatalf("snapshot of a halted FSM: %v, want ErrHalted", err)
	}
}

// A snapshot holds the state at Snapshot, even when entries applied before
// Persist change the same groups (including a generation reservation on a
// stored record).
func TestSnapshotIsTheStateAtCapture(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	for i, e := range newEntryGen(t, 11).entries(300) {
		applyAt(f, uint64(i+1), e)
	}
	applyAt(f, 301, writesCmd(t, writeOf("g", nil, groupRecord("g", 3, "m1"), offsetRecord("g", "t", 0, 5))))
	want := encoded(t, f)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	reserve := &pb.Record{Kind: &pb.Record_GenerationReserved{GenerationReserved: &pb.GenerationReserved{GroupId: "g", Generation: 9}}}
	applyAt(f, 302, writesCmd(t, writeOf("g", nil, reserve, offsetRecord("g", "t", 0, 6))))
	for i, e := range newEntryGen(t, 12).entries(100) {
		applyAt(f, uint64(303+i), e)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sink.Bytes(), want) {
		t.Fatal("the snapshot holds changes applied after it was taken")
	}
	if rec, _, _ := f.Load("g"); rec.GetGenerationFloor() != 9 {
		t.Fatalf("generation floor %d, want 9", rec.GetGenerationFloor())
	}
}
