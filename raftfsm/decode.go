package raftfsm

import (
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// decodeGroupWrites is proto.Unmarshal of a GROUP_WRITES payload. A replica
// decodes every entry the leader wrote, and most of them are batches of
// offset commits: their writes, records and fences are decoded here by
// hand, into a few arrays per entry rather than eleven allocations per
// commit. Only the committed offsets are allocated one by one (the state
// keeps them). The other record kinds are decoded by proto.Unmarshal, and
// anything this decoder does not expect (a field a newer writer added, a
// wire type that does not match, a message field given twice, which
// protobuf merges, or bytes proto.Unmarshal would refuse) sends the whole
// payload to proto.Unmarshal, so the result is always what it would give.
func decodeGroupWrites(b []byte) (*raftpb.GroupWrites, error) {
	var d writeDecoder
	return d.decode(b)
}

// decode is decodeGroupWrites into d's arrays, which the next decode
// reuses: the writes, records and fences it returns are valid until then
// (the committed offsets, allocated one by one, and every string are not
// d's). A replica's FSM decodes each entry with one decoder, so a batch of
// commits allocates its offsets and little else.
func (d *writeDecoder) decode(b []byte) (*raftpb.GroupWrites, error) {
	if ws, ok := d.fast(b); ok {
		return ws, nil
	}
	var ws raftpb.GroupWrites
	if err := proto.Unmarshal(b, &ws); err != nil {
		return nil, err
	}
	return &ws, nil
}

// writeDecoder carves the messages of one payload out of arrays sized by a
// first pass over it, and kept for the next payload.
type writeDecoder struct {
	writes    []raftpb.GroupWrite
	writePtrs []*raftpb.GroupWrite
	ptrs      []*pb.Record // nptrs of them filled
	records   []pb.Record
	kinds     []pb.Record_Offset
	fences    []pb.WriteFence
	// How many of ptrs, records, kinds and fences are taken.
	nptrs, nrecords, nkinds, nfences int
	// The last group id and topic decoded: the offsets of one write (and
	// of one topic, and of the next payload) share them instead of holding
	// copies.
	group, topic string
}

// reuse returns s emptied and of length n, in s's array when it is large
// enough.
func reuse[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func (d *writeDecoder) fast(b []byte) (*raftpb.GroupWrites, bool) {
	var nw, nr, nf int
	for rest := b; len(rest) > 0; {
		num, typ, _, w, ok := nextField(&rest)
		if !ok || num != 1 || typ != protowire.BytesType {
			return nil, false
		}
		nw++
		records, fences, ok := countWrite(w)
		if !ok {
			return nil, false
		}
		nr, nf = nr+records, nf+fences
	}
	d.writes, d.writePtrs, d.ptrs = reuse(d.writes, nw), reuse(d.writePtrs, nw), reuse(d.ptrs, nr)
	d.records, d.kinds, d.fences = reuse(d.records, nr), reuse(d.kinds, nr), reuse(d.fences, nf)
	d.nptrs, d.nrecords, d.nkinds, d.nfences = 0, 0, 0, 0
	ws := &raftpb.GroupWrites{Writes: d.writePtrs}
	for i := range nw {
		_, _, _, w, _ := nextField(&b)
		ws.Writes[i] = &d.writes[i]
		if !d.write(&d.writes[i], w) {
			return nil, false
		}
	}
	return ws, true
}

// countWrite returns how many records and fences a GroupWrite holds.
func countWrite(b []byte) (records, fences int, ok bool) {
	for len(b) > 0 {
		num, _, _, _, ok := nextField(&b)
		if !ok {
			return 0, 0, false
		}
		switch num {
		case 2:
			records++
		case 3:
			fences++
		}
	}
	return records, fences, fences <= 1
}

func (d *writeDecoder) write(w *raftpb.GroupWrite, b []byte) bool {
	// The write's records are the pointers it fills from here on.
	first := d.nptrs
	for len(b) > 0 {
		num, typ, _, v, ok := nextField(&b)
		if !ok || typ != protowire.BytesType {
			return false
		}
		switch num {
		case 1:
			if w.GroupId, ok = d.str(v, &d.group); !ok {
				return false
			}
		case 2:
			r := &d.records[d.nrecords]
			d.nrecords++
			if !d.record(r, v) {
				return false
			}
			d.ptrs[d.nptrs] = r
			d.nptrs++
		case 3:
			f := &d.fences[d.nfences]
			d.nfences++
			if !decodeFence(f, v) {
				return false
			}
			w.Fence = f
		default:
			return false
		}
	}
	if d.nptrs > first {
		w.Records = d.ptrs[first:d.nptrs:d.nptrs]
	}
	return true
}

// record decodes one Record: an offset by hand, any other kind with
// proto.Unmarshal. A Record of more than one field is left to
// proto.Unmarshal (a oneof given twice merges or replaces).
func (d *writeDecoder) record(r *pb.Record, b []byte) bool {
	if len(b) == 0 {
		return true
	}
	num, typ, _, v, ok := nextField(&b)
	if !ok || typ != protowire.BytesType || len(b) > 0 {
		return false
	}
	var msg proto.Message
	switch num {
	case 1:
		g := &pb.GroupRecord{}
		r.Kind, msg = &pb.Record_Group{Group: g}, g
	case 2:
		o := &pb.OffsetRecord{}
		if !d.offset(o, v) {
			return false
		}
		k := &d.kinds[d.nkinds]
		d.nkinds++
		k.Offset = o
		r.Kind = k
		return true
	case 3:
		t := &pb.GroupTombstone{}
		r.Kind, msg = &pb.Record_GroupTombstone{GroupTombstone: t}, t
	case 4:
		t := &pb.OffsetTombstone{}
		r.Kind, msg = &pb.Record_OffsetTombstone{OffsetTombstone: t}, t
	case 5:
		g := &pb.GenerationReserved{}
		r.Kind, msg = &pb.Record_GenerationReserved{GenerationReserved: g}, g
	case 6:
		ms := &pb.MemberSessions{}
		r.Kind, msg = &pb.Record_MemberSessions{MemberSessions: ms}, ms
	case 7:
		c := &pb.ConsumerGroupMetadata{}
		r.Kind, msg = &pb.Record_ConsumerGroupMetadata{ConsumerGroupMetadata: c}, c
	case 8:
		c := &pb.ConsumerGroupMemberMetadata{}
		r.Kind, msg = &pb.Record_ConsumerMemberMetadata{ConsumerMemberMetadata: c}, c
	case 9:
		c := &pb.ConsumerGroupTargetAssignmentMember{}
		r.Kind, msg = &pb.Record_ConsumerTargetAssignment{ConsumerTargetAssignment: c}, c
	case 10:
		c := &pb.ConsumerGroupTargetAssignmentMetadata{}
		r.Kind, msg = &pb.Record_ConsumerTargetAssignmentMetadata{ConsumerTargetAssignmentMetadata: c}, c
	case 11:
		c := &pb.ConsumerGroupCurrentMemberAssignment{}
		r.Kind, msg = &pb.Record_ConsumerCurrentAssignment{ConsumerCurrentAssignment: c}, c
	default:
		return false
	}
	return proto.Unmarshal(v, msg) == nil
}

// offset decodes an OffsetRecord; scalars given twice keep the last, as
// protobuf does.
func (d *writeDecoder) offset(o *pb.OffsetRecord, b []byte) bool {
	for len(b) > 0 {
		num, typ, v, val, ok := nextField(&b)
		if !ok {
			return false
		}
		switch num {
		case 1, 2, 6:
			if typ != protowire.BytesType {
				return false
			}
			switch num {
			case 1:
				o.GroupId, ok = d.str(val, &d.group)
			case 2:
				o.Topic, ok = d.str(val, &d.topic)
			default:
				o.Metadata, ok = validString(val)
			}
			if !ok {
				return false
			}
		case 3, 4, 5, 7, 8:
			if typ != protowire.VarintType {
				return false
			}
			switch num {
			case 3:
				o.Partition = int32(v)
			case 4:
				o.Offset = int64(v)
			case 5:
				o.LeaderEpoch = int32(v)
			case 7:
				o.CommitTimestampMs = int64(v)
			default:
				o.ExpireTimestampMs = int64(v)
			}
		default:
			return false
		}
	}
	return true
}

func decodeFence(f *pb.WriteFence, b []byte) bool {
	for len(b) > 0 {
		num, typ, v, val, ok := nextField(&b)
		switch {
		case !ok:
			return false
		case num == 1 && typ == protowire.VarintType:
			f.Generation = int32(v)
		case num == 2 && typ == protowire.BytesType:
			if f.MemberId, ok = validString(val); !ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// nextField consumes the next field of *b: its number, its wire type and
// its value (v for a varint, val for a length-delimited field). ok is false
// for malformed bytes and for the other wire types, which none of these
// messages uses.
func nextField(b *[]byte) (num protowire.Number, typ protowire.Type, v uint64, val []byte, ok bool) {
	num, typ, n := protowire.ConsumeTag(*b)
	if n < 0 {
		return 0, 0, 0, nil, false
	}
	rest := (*b)[n:]
	var m int
	switch typ {
	case protowire.VarintType:
		v, m = protowire.ConsumeVarint(rest)
	case protowire.BytesType:
		val, m = protowire.ConsumeBytes(rest)
	default:
		return 0, 0, 0, nil, false
	}
	if m < 0 {
		return 0, 0, 0, nil, false
	}
	*b = rest[m:]
	return num, typ, v, val, true
}

// str is validString that returns *last, and no copy, when b spells it,
// and makes the result the new *last otherwise.
func (d *writeDecoder) str(b []byte, last *string) (string, bool) {
	if string(b) == *last {
		return *last, true
	}
	s, ok := validString(b)
	*last = s
	return s, ok
}

// validString is a proto3 string field's value: valid UTF-8 or refused.
func validString(b []byte) (string, bool) {
	if !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}

// envelopeView is an Envelope's fields, the payload pointing into the bytes it
// was parsed from.
type envelopeView struct {
	typ       raftpb.CommandType
	version   uint32
	payload   []byte
	ignorable bool
}

// parseEnvelope is proto.Unmarshal of an Envelope without the copy of its
// payload (an entry's whole content): the same fields, the same errors.
// Fields it does not know, or of another wire type than their own, are
// skipped, as protobuf keeps them as unknown fields.
func parseEnvelope(b []byte) (envelopeView, error) {
	var e envelopeView
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return envelopeView{}, protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			return envelopeView{}, errors.New("field number out of range")
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && (num == 1 || num == 2 || num == 4):
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return envelopeView{}, protowire.ParseError(m)
			}
			b = b[m:]
			switch num {
			case 1:
				e.typ = raftpb.CommandType(int32(v))
			case 2:
				e.version = uint32(v)
			default:
				e.ignorable = protowire.DecodeBool(v)
			}
		case typ == protowire.BytesType && num == 3:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return envelopeView{}, protowire.ParseError(m)
			}
			b = b[m:]
			e.payload = v
		default:
			m := protowire.ConsumeFieldValue(num, typ, b)
			if m < 0 {
				return envelopeView{}, protowire.ParseError(m)
			}
			b = b[m:]
		}
	}
	return e, nil
}
