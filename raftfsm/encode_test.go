package raftfsm

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// randomWrite is a write as the coordinator makes them, and some it does
// not: offset records with every kind of value, other records, fences, no
// records, unknown fields, and (bad) strings that are not valid UTF-8.
func randomWrite(r *rand.Rand, bad bool) *raftpb.GroupWrite {
	str := func() string {
		switch r.IntN(6) {
		case 0:
			return ""
		case 1:
			return string(bytes.Repeat([]byte("x"), 100+r.IntN(300))) // a length of two varint bytes
		case 2:
			return "grüße-✓"
		}
		return []string{"g", "topic", "m-1", "consumer-1-2b3c"}[r.IntN(4)]
	}
	i32 := func() int32 { return []int32{0, 1, -1, 127, 128, math.MaxInt32, math.MinInt32, r.Int32()}[r.IntN(8)] }
	i64 := func() int64 { return []int64{0, 1, -1, 1 << 40, math.MaxInt64, math.MinInt64, r.Int64()}[r.IntN(7)] }
	w := &raftpb.GroupWrite{GroupId: str()}
	for range r.IntN(4) {
		switch r.IntN(5) {
		case 0:
			w.Records = append(w.Records, groupRecord(str(), i32(), str(), str()))
		case 1:
			w.Records = append(w.Records, groupTombstone(str()))
		default:
			w.Records = append(w.Records, &pb.Record{Kind: &pb.Record_Offset{Offset: &pb.OffsetRecord{GroupId: str(), Topic: str(),
				Partition: i32(), Offset: i64(), LeaderEpoch: i32(), Metadata: str(), CommitTimestampMs: i64(), ExpireTimestampMs: i64()}}})
		}
	}
	if r.IntN(2) == 0 {
		w.Fence = &pb.WriteFence{Generation: i32(), MemberId: str()}
	}
	if r.IntN(20) == 0 {
		w.ProtoReflect().SetUnknown([]byte{0xa0, 0x06, 0x01}) // field 100, varint 1
	}
	if bad {
		switch n := len(w.Records); {
		case n > 0 && r.IntN(2) == 0:
			switch k := w.Records[r.IntN(n)].Kind.(type) {
			case *pb.Record_Offset:
				k.Offset.Metadata = "bad \xff"
			case *pb.Record_Group:
				k.Group.ProtocolType = "bad \xc3"
			case *pb.Record_GroupTombstone:
				k.GroupTombstone.GroupId = "\x80"
			}
		case w.Fence != nil && r.IntN(2) == 0:
			w.Fence.MemberId = "\xfe"
		default:
			w.GroupId = "bad \xff"
		}
	}
	return w
}

// The hand encoding of a batch is byte for byte protobuf's deterministic
// one, and a write that cannot be encoded fails alone: the entry is that of
// the other writes.
func TestEncodeGroupWritesMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		var writes, good []*raftpb.GroupWrite
		badAt := map[int]bool{}
		for j := range r.IntN(6) {
			bad := i%3 == 0 && r.IntN(3) == 0
			w := randomWrite(r, bad)
			writes = append(writes, w)
			if bad {
				badAt[j] = true
			} else {
				good = append(good, w)
			}
		}
		data, ws, failed := encodeGroupWrites(writes)
		want, err := encodeCommand(raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, &raftpb.GroupWrites{Writes: good})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(data, want) {
			t.Fatalf("batch %d: encoded\n%x\nproto\n%x", i, data, want)
		}
		if len(ws.Writes) != len(good) {
			t.Fatalf("batch %d: %d writes kept, want %d", i, len(ws.Writes), len(good))
		}
		for j := range writes {
			if got := failed != nil && failed[j] != nil; got != badAt[j] {
				t.Fatalf("batch %d write %d: failed %v, bad %v", i, j, got, badAt[j])
			}
			if badAt[j] {
				if _, err := deterministic.Marshal(writes[j]); err == nil {
					t.Fatalf("batch %d write %d: protobuf encodes the bad write", i, j)
				}
			}
		}
	}
}

// A commit whose metadata is not valid UTF-8 fails alone with
// ErrRecordInvalid; the commits batched with it are stored.
func TestStoreInvalidWriteFailsAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, l, s := newStoreCluster(t, 1, time.Second)
		var ws []write
		for i := range 50 {
			rec := offsetRecord("g", "t", int32(i), int64(i))
			if i == 25 {
				rec.GetOffset().Metadata = "\xff\xfe"
			}
			ws = append(ws, write{group: "g", recs: []*pb.Record{rec}})
		}
		for i, err := range appendAll(t, s, ws) {
			if bad := i == 25; bad != errors.Is(err, coordinator.ErrRecordInvalid) || (!bad && err != nil) {
				t.Fatalf("write %d: %v", i, err)
			}
		}
		_, offsets, _ := l.fsm.Load("g")
		if len(offsets) != 49 {
			t.Fatalf("%d offsets stored, want 49", len(offsets))
		}
		for _, o := range offsets {
			if o.GetPartition() == 25 {
				t.Fatalf("the invalid commit was stored: %v", o)
			}
		}
		if err := appendWait(t, s, "g", nil, proto.Clone(offsetRecord("g", "t", 25, 7)).(*pb.Record)); err != nil {
			t.Fatalf("a valid commit after the invalid one: %v", err)
		}
	})
}
