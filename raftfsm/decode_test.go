package raftfsm

import (
	"fmt"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// payloads returns GROUP_WRITES payloads of every record kind, with and
// without fences.
func payloads(t testing.TB, seed uint64, n int) [][]byte {
	g := newEntryGen(t, seed)
	var out [][]byte
	for range n {
		var ws []*raftpb.GroupWrite
		for range 1 + g.r.IntN(5) {
			ws = append(ws, g.write())
		}
		b, err := proto.Marshal(&raftpb.GroupWrites{Writes: ws})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// sameAsProto checks decodeGroupWrites against proto.Unmarshal: both
// refuse b, or both give equal messages.
func sameAsProto(t *testing.T, b []byte) {
	t.Helper()
	var want raftpb.GroupWrites
	wantErr := proto.Unmarshal(b, &want)
	got, err := decodeGroupWrites(b)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("decode error %v, proto.Unmarshal %v (payload %x)", err, wantErr, b)
	}
	if err == nil && !proto.Equal(got, &want) {
		t.Fatalf("decoded %v\nproto.Unmarshal %v\n(payload %x)", got, &want, b)
	}
}

func TestDecodeGroupWritesMatchesProto(t *testing.T) {
	for seed := range uint64(20) {
		for _, b := range payloads(t, seed, 50) {
			sameAsProto(t, b)
		}
	}
	commit := writeOf("g", &pb.WriteFence{Generation: 3, MemberId: "m1"}, offsetRecord("g", "t", 2, 42))
	one, err := proto.Marshal(&raftpb.GroupWrites{Writes: []*raftpb.GroupWrite{commit, commit}})
	if err != nil {
		t.Fatal(err)
	}
	field := func(num protowire.Number, typ protowire.Type, v []byte) []byte {
		return append(protowire.AppendTag(nil, num, typ), v...)
	}
	write := func(fields ...[]byte) []byte {
		var w []byte
		for _, f := range fields {
			w = append(w, f...)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), w)
	}
	str := func(s string) []byte { return protowire.AppendString(nil, s) }
	fence := func(gen uint64, member string) []byte {
		return protowire.AppendBytes(nil, append(field(1, protowire.VarintType, protowire.AppendVarint(nil, gen)), field(2, protowire.BytesType, str(member))...))
	}
	offset := func(fields ...[]byte) []byte {
		var o []byte
		for _, f := range fields {
			o = append(o, f...)
		}
		return protowire.AppendBytes(nil, field(2, protowire.BytesType, protowire.AppendBytes(nil, o)))
	}
	cases := map[string][]byte{
		"commits":              one,
		"empty":                nil,
		"empty write":          write(),
		"empty record":         write(field(2, protowire.BytesType, protowire.AppendBytes(nil, nil))),
		"empty offset":         write(field(2, protowire.BytesType, offset())),
		"two fences merge":     write(field(3, protowire.BytesType, fence(3, "a")), field(3, protowire.BytesType, fence(4, ""))),
		"group id twice":       write(field(1, protowire.BytesType, str("a")), field(1, protowire.BytesType, str("b"))),
		"offset scalars twice": write(field(2, protowire.BytesType, offset(field(4, protowire.VarintType, protowire.AppendVarint(nil, 1)), field(4, protowire.VarintType, protowire.AppendVarint(nil, 2))))),
		"negative partition":   write(field(2, protowire.BytesType, offset(field(3, protowire.VarintType, protowire.AppendVarint(nil, uint64(1<<64-1)))))),
		"unknown write field":  write(field(9, protowire.VarintType, protowire.AppendVarint(nil, 1))),
		"unknown offset field": write(field(2, protowire.BytesType, offset(field(12, protowire.BytesType, str("x"))))),
		"wrong wire type":      write(field(1, protowire.VarintType, protowire.AppendVarint(nil, 7))),
		"offset wire type":     write(field(2, protowire.BytesType, offset(field(3, protowire.BytesType, str("x"))))),
		"invalid utf-8 group":  write(field(1, protowire.BytesType, str("\xff"))),
		"invalid utf-8 topic":  write(field(2, protowire.BytesType, offset(field(2, protowire.BytesType, str("\xc3("))))),
		"invalid utf-8 fence":  write(field(3, protowire.BytesType, fence(1, "\xff"))),
		"unknown top field":    field(2, protowire.BytesType, str("x")),
		"truncated":            one[:len(one)-3],
		"oneof twice":          write(field(2, protowire.BytesType, append(offset(field(2, protowire.BytesType, str("t"))), offset(field(3, protowire.VarintType, protowire.AppendVarint(nil, 5)))...))),
		"bad length":           {0x0a, 0x7f, 0x0a},
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) { sameAsProto(t, b) })
	}
	// The commits take the hand-written path, and so do the writes of
	// consumer records (their messages decoded by proto.Unmarshal).
	var d writeDecoder
	if _, ok := d.fast(one); !ok {
		t.Fatal("a batch of commits was not decoded by hand")
	}
	for i, b := range consumerPayloads(t, 2, 30) {
		sameAsProto(t, b)
		if _, ok := d.fast(b); !ok {
			t.Fatalf("consumer records' write %d was not decoded by hand", i)
		}
	}
}

// Decoding a batch of commits by hand shares the strings of a write and
// allocates far less than proto.Unmarshal.
func TestDecodeGroupWritesAllocations(t *testing.T) {
	var ws []*raftpb.GroupWrite
	for i := range 100 {
		ws = append(ws, writeOf("group", &pb.WriteFence{Generation: 3, MemberId: "m1"}, offsetRecord("group", "topic", int32(i%8), int64(i))))
	}
	b, err := proto.Marshal(&raftpb.GroupWrites{Writes: ws})
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeGroupWrites(b)
	if err != nil {
		t.Fatal(err)
	}
	o := got.GetWrites()[1].GetRecords()[0].GetOffset()
	if o.GetOffset() != 1 || o.GetPartition() != 1 || o.GetTopic() != "topic" || got.GetWrites()[1].GetFence().GetMemberId() != "m1" {
		t.Fatalf("decoded %v", got.GetWrites()[1])
	}
	if unsafe.StringData(o.GroupId) != unsafe.StringData(got.GetWrites()[1].GetGroupId()) {
		t.Fatal("the offset's group id is a copy of its write's")
	}
	hand := testing.AllocsPerRun(20, func() { decodeGroupWrites(b) })
	generic := testing.AllocsPerRun(20, func() { proto.Unmarshal(b, &raftpb.GroupWrites{}) })
	t.Logf("%v allocations by hand, %v by proto.Unmarshal", hand, generic)
	// Per commit: the offset and its member id; the arrays are per entry.
	if hand > 2*100+10 || hand*4 > generic {
		t.Fatalf("%v allocations by hand, %v by proto.Unmarshal", hand, generic)
	}
}

func FuzzDecodeGroupWrites(f *testing.F) {
	for seed := range uint64(4) {
		for _, b := range payloads(f, seed, 5) {
			f.Add(b)
		}
	}
	for _, b := range consumerPayloads(f, 1, 8) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsProto(t, b) })
}

// BenchmarkDecodeGroupWrites decodes an entry of 100 one-partition
// commits by hand and with proto.Unmarshal.
func BenchmarkDecodeGroupWrites(b *testing.B) {
	var ws []*raftpb.GroupWrite
	for i := range 100 {
		ws = append(ws, writeOf(fmt.Sprint("group-", i), &pb.WriteFence{Generation: 3, MemberId: fmt.Sprint("member-", i)}, offsetRecord(fmt.Sprint("group-", i), "topic", int32(i%8), int64(i))))
	}
	payload, err := proto.Marshal(&raftpb.GroupWrites{Writes: ws})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodeGroupWrites(payload); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := proto.Unmarshal(payload, &raftpb.GroupWrites{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// encodeCommand writes the bytes deterministic.Marshal writes for the
// envelope, whatever the payload and type.
func TestEncodeCommandMatchesMarshal(t *testing.T) {
	msgs := []proto.Message{&raftpb.GroupWrites{}, &raftpb.TopicCreate{Name: "t", Partitions: 3}, &raftpb.NodeRegister{}}
	for _, b := range payloads(t, 7, 30) {
		var ws raftpb.GroupWrites
		if err := proto.Unmarshal(b, &ws); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, &ws)
	}
	for _, typ := range []raftpb.CommandType{0, raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, raftpb.CommandType_COMMAND_TYPE_TOPIC_CREATE} {
		for _, m := range msgs {
			p, err := deterministic.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			want, err := deterministic.Marshal(&raftpb.Envelope{Type: typ, Version: CommandVersion, Payload: p})
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeCommand(typ, m)
			if err != nil || string(got) != string(want) {
				t.Fatalf("type %v %v: encoded %x (%v), want %x", typ, m, got, err, want)
			}
		}
	}
}
