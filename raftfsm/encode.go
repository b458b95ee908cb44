package raftfsm

import (
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// The group-writes command is most of what the log carries: one entry holds
// the writes of a batch, most of them one offset record each. Its encoding
// is written here, without protobuf's reflection, for the messages a commit
// writes (the write, its fence, offset records); any other record, and any
// message with unknown fields, is encoded by protobuf. The bytes are the
// ones deterministic.Marshal writes (encode_test.go checks it), strings
// included: an invalid UTF-8 string fails its write, as Marshal refuses it.

// encodedWrite is one write of a batch: its body's size, or its body when
// protobuf encoded it.
type encodedWrite struct {
	size int
	body []byte // nil: written by appendWrite
}

// sizeWrite sizes w's body (without its own tag and length), or encodes it
// with protobuf when it holds messages written by protobuf only. It fails
// when a string is not valid UTF-8.
func sizeWrite(w *raftpb.GroupWrite) (encodedWrite, error) {
	if !handWritable(w) {
		body, err := deterministic.Marshal(w)
		return encodedWrite{size: len(body), body: body}, err
	}
	if !utf8.ValidString(w.GetGroupId()) {
		return encodedWrite{}, fmt.Errorf("group id %q is not valid UTF-8", w.GetGroupId())
	}
	n := sizeString(w.GetGroupId())
	for _, r := range w.GetRecords() {
		o := r.GetOffset()
		if !utf8.ValidString(o.GetGroupId()) || !utf8.ValidString(o.GetTopic()) || !utf8.ValidString(o.GetMetadata()) {
			return encodedWrite{}, fmt.Errorf("offset record of group %q, topic %q: a string is not valid UTF-8", o.GetGroupId(), o.GetTopic())
		}
		n += sizeMessage(sizeMessage(sizeOffset(o))) // GroupWrite.records, Record.offset
	}
	if f := w.GetFence(); f != nil {
		if !utf8.ValidString(f.GetMemberId()) {
			return encodedWrite{}, fmt.Errorf("fence member id %q is not valid UTF-8", f.GetMemberId())
		}
		n += sizeMessage(sizeFence(f))
	}
	return encodedWrite{size: n}, nil
}

// handWritable reports whether appendWrite writes w: every record an offset
// record, and no message with unknown fields.
func handWritable(w *raftpb.GroupWrite) bool {
	if len(w.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	if f := w.GetFence(); f != nil && len(f.ProtoReflect().GetUnknown()) > 0 {
		return false
	}
	for _, r := range w.GetRecords() {
		o := r.GetOffset()
		if o == nil || len(r.ProtoReflect().GetUnknown()) > 0 || len(o.ProtoReflect().GetUnknown()) > 0 {
			return false
		}
	}
	return true
}

// appendWrite appends w as field 1 of GroupWrites.
func appendWrite(b []byte, w *raftpb.GroupWrite, e encodedWrite) []byte {
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(e.size))
	if e.body != nil {
		return append(b, e.body...)
	}
	b = appendString(b, 1, w.GetGroupId())
	for _, r := range w.GetRecords() {
		o := r.GetOffset()
		size := sizeOffset(o)
		b = protowire.AppendTag(b, 2, protowire.BytesType) // GroupWrite.records
		b = protowire.AppendVarint(b, uint64(sizeMessage(size)))
		b = protowire.AppendTag(b, 2, protowire.BytesType) // Record.offset
		b = protowire.AppendVarint(b, uint64(size))
		b = appendOffset(b, o)
	}
	if f := w.GetFence(); f != nil {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeFence(f)))
		b = appendVarint(b, 1, uint64(int64(f.GetGeneration())))
		b = appendString(b, 2, f.GetMemberId())
	}
	return b
}

func appendOffset(b []byte, o *pb.OffsetRecord) []byte {
	b = appendString(b, 1, o.GetGroupId())
	b = appendString(b, 2, o.GetTopic())
	b = appendVarint(b, 3, uint64(int64(o.GetPartition())))
	b = appendVarint(b, 4, uint64(o.GetOffset()))
	b = appendVarint(b, 5, uint64(int64(o.GetLeaderEpoch())))
	b = appendString(b, 6, o.GetMetadata())
	b = appendVarint(b, 7, uint64(o.GetCommitTimestampMs()))
	return appendVarint(b, 8, uint64(o.GetExpireTimestampMs()))
}

// sizeOffset is an OffsetRecord's size; the record sits in a Record (its
// oneof field 2), which sits in GroupWrite.records: sizeMessage twice.
func sizeOffset(o *pb.OffsetRecord) int {
	return sizeString(o.GetGroupId()) + sizeString(o.GetTopic()) + sizeVarint(uint64(int64(o.GetPartition()))) +
		sizeVarint(uint64(o.GetOffset())) + sizeVarint(uint64(int64(o.GetLeaderEpoch()))) + sizeString(o.GetMetadata()) +
		sizeVarint(uint64(o.GetCommitTimestampMs())) + sizeVarint(uint64(o.GetExpireTimestampMs()))
}

func sizeFence(f *pb.WriteFence) int {
	return sizeVarint(uint64(int64(f.GetGeneration()))) + sizeString(f.GetMemberId())
}

// The helpers below are for fields 1-15 (one-byte tags) with proto3's
// implicit presence: a zero value is not written.

func sizeMessage(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

func sizeString(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeVarint(uint64(len(s))) + len(s)
}

func sizeVarint(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// encodeGroupWrites encodes the writes of a batch as one group-writes
// command (in appendEnvelope's envelope, as encodeCommand writes it). A
// write that cannot be encoded is left out, with its error in failed
// (indexed like writes, nil for the others); ws holds the writes encoded, in
// order.
func encodeGroupWrites(writes []*raftpb.GroupWrite) (data []byte, ws *raftpb.GroupWrites, failed []error) {
	enc := make([]encodedWrite, len(writes))
	payload, kept := 0, 0
	for i, w := range writes {
		e, err := sizeWrite(w)
		if err != nil {
			if failed == nil {
				failed = make([]error, len(writes))
			}
			failed[i] = err
			continue
		}
		enc[i] = e
		payload += sizeMessage(e.size)
		kept++
	}
	ws = &raftpb.GroupWrites{Writes: make([]*raftpb.GroupWrite, 0, kept)}
	data = appendEnvelope(raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, payload)
	for i, w := range writes {
		if failed != nil && failed[i] != nil {
			continue
		}
		data = appendWrite(data, w, enc[i])
		ws.Writes = append(ws.Writes, w)
	}
	return data, ws, failed
}
