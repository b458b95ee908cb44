package assignor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// ConsumerProtocol versions. Versions 0-3 of the subscription and assignment
// schemas are understood; a higher version is read through its version 3
// prefix and any trailing bytes are ignored, as Kafka's own readers do.
const (
	// MaxConsumerProtocolVersion is the highest schema version this package
	// knows field by field, and the version it writes.
	MaxConsumerProtocolVersion int16 = 3

	// DefaultGeneration is the generation of a member that has never been
	// assigned, and the value of a subscription's generation field when the
	// member did not send one (versions 0 and 1).
	DefaultGeneration int32 = -1
)

// Decoding errors. Every decoder error wraps ErrMalformed.
var (
	// ErrMalformed reports bytes that are not a valid encoding.
	ErrMalformed = errors.New("assignor: malformed consumer protocol data")
	// ErrNegativeVersion reports a negative schema version.
	ErrNegativeVersion = fmt.Errorf("%w: negative version", ErrMalformed)
	errShort           = fmt.Errorf("%w: not enough bytes", ErrMalformed)
	errNegativeLength  = fmt.Errorf("%w: negative length", ErrMalformed)
)

// TopicPartitions is a topic and a list of its partition numbers.
type TopicPartitions struct {
	Topic      string
	Partitions []int32
}

// Subscription is the ConsumerProtocol subscription a member sends as its
// JoinGroup protocol metadata.
type Subscription struct {
	// Version is the schema version read or to be written.
	Version int16
	// Topics are the topics the member subscribes to.
	Topics []string
	// UserData is assignor-specific (nil encodes as null).
	UserData []byte
	// OwnedPartitions are the partitions the member currently owns (v1+).
	OwnedPartitions []TopicPartitions
	// Generation is the generation the member last synced in (v2+);
	// DefaultGeneration when absent.
	Generation int32
	// Rack is the member's client.rack (v3+); empty when absent or null.
	Rack string
}

// Assignment is the ConsumerProtocol assignment the leader sends for each
// member in SyncGroup.
type Assignment struct {
	Version  int16
	Topics   []TopicPartitions
	UserData []byte
}

// AppendTo appends the encoding of s to dst. A zero Version is written as
// version 0; NewSubscription returns a value at MaxConsumerProtocolVersion.
// Versions above MaxConsumerProtocolVersion are written with the version 3
// body. Topics and owned partitions are written in the order given; use
// NewSubscription for Kafka's sorted order.
func (s *Subscription) AppendTo(dst []byte) []byte {
	v := s.Version
	dst = binary.BigEndian.AppendUint16(dst, uint16(v))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s.Topics)))
	for _, t := range s.Topics {
		dst = appendString(dst, t)
	}
	dst = appendBytes(dst, s.UserData)
	if v >= 1 {
		dst = appendTopicPartitions(dst, s.OwnedPartitions)
	}
	if v >= 2 {
		dst = binary.BigEndian.AppendUint32(dst, uint32(s.Generation))
	}
	if v >= 3 {
		if s.Rack == "" {
			dst = binary.BigEndian.AppendUint16(dst, math.MaxUint16) // null
		} else {
			dst = appendString(dst, s.Rack)
		}
	}
	return dst
}

// NewSubscription returns a version 3 subscription with topics sorted and
// deduplicated and owned partitions sorted by topic then partition, as
// Kafka's client writes them. The inputs are not modified.
func NewSubscription(topics []string, owned []TopicPartitions, generation int32, rack string, userData []byte) Subscription {
	ts := slices.Clone(topics)
	slices.Sort(ts)
	ts = slices.Compact(ts)
	var os []TopicPartitions
	if len(owned) > 0 {
		os = make([]TopicPartitions, 0, len(owned))
		for _, tp := range owned {
			ps := slices.Clone(tp.Partitions)
			slices.Sort(ps)
			os = append(os, TopicPartitions{Topic: tp.Topic, Partitions: ps})
		}
		slices.SortStableFunc(os, func(a, b TopicPartitions) int { return strings.Compare(a.Topic, b.Topic) })
	}
	return Subscription{
		Version:         MaxConsumerProtocolVersion,
		Topics:          ts,
		UserData:        userData,
		OwnedPartitions: os,
		Generation:      generation,
		Rack:            rack,
	}
}

// AppendTo appends the encoding of a to dst (the layout is identical in
// versions 0-3).
func (a *Assignment) AppendTo(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(a.Version))
	dst = appendTopicPartitions(dst, a.Topics)
	return appendBytes(dst, a.UserData)
}

// EncodedSize returns the number of bytes AppendTo writes.
func (a *Assignment) EncodedSize() int {
	n := 2 + 4 + 4 + len(a.UserData)
	for i := range a.Topics {
		n += 2 + len(a.Topics[i].Topic) + 4 + 4*len(a.Topics[i].Partitions)
	}
	return n
}

// Decoder decodes ConsumerProtocol data. It interns topic names, so that
// decoding many subscriptions of one group allocates each distinct topic
// name once and identical names share memory. The zero value is ready to use;
// a Decoder is not safe for concurrent use.
type Decoder struct {
	names map[string]string
	// The topic lists of the previous subscription, tried first: members of
	// one group usually send identical lists, and comparing bytes with the
	// previous name at the same position is cheaper than a map lookup.
	topicHint, ownedHint []string
}

func (d *Decoder) internAt(b []byte, hint []string, i int) string {
	if i < len(hint) && hint[i] == string(b) {
		return hint[i]
	}
	return d.intern(b)
}

func (d *Decoder) intern(b []byte) string {
	if d.names == nil {
		d.names = make(map[string]string)
	}
	if s, ok := d.names[string(b)]; ok {
		return s
	}
	s := string(b)
	d.names[s] = s
	return s
}

// DecodeSubscription decodes a subscription of any version into s.
// Subscriptions decoded by one Decoder may share their Topics slice and
// topic-name memory; treat decoded values as read-only.
//
// Versions above 3 are read through their version 3 prefix. As a workaround
// for clients that claim version 1 but omit the owned partitions, a version 1
// subscription that fails to decode is retried as version 0. Slices in s do
// not alias b except UserData.
func (d *Decoder) DecodeSubscription(b []byte, s *Subscription) error {
	err := d.decodeSubscription(b, s, false)
	if err != nil && len(b) >= 2 && b[0] == 0 && b[1] == 1 {
		if err2 := d.decodeSubscription(b, s, true); err2 == nil {
			return nil
		}
	}
	return err
}

func (d *Decoder) decodeSubscription(b []byte, s *Subscription, asV0 bool) error {
	r := reader{b: b}
	v := r.int16()
	if r.err == nil && v < 0 {
		return ErrNegativeVersion
	}
	*s = Subscription{Version: v, Generation: DefaultGeneration}
	if asV0 {
		v = 0
	}
	n := r.arrayLen(2)
	// A topic list identical to the previous subscription's shares its
	// slice; otherwise it gets its own.
	same := n == len(d.topicHint)
	for i := 0; i < n && r.err == nil; i++ {
		b := r.stringBytes()
		if same && d.topicHint[i] == string(b) {
			continue
		}
		if same {
			s.Topics = make([]string, i, n)
			copy(s.Topics, d.topicHint[:i])
			same = false
		}
		s.Topics = append(s.Topics, d.internAt(b, d.topicHint, i))
	}
	if r.err != nil {
		s.Topics = nil
	} else if same && n > 0 {
		s.Topics = d.topicHint
	} else if n > 0 {
		d.topicHint = s.Topics
	}
	s.UserData = r.nullableBytes()
	if v >= 1 {
		s.OwnedPartitions = d.readTopicPartitions(&r, &d.ownedHint)
	}
	if v >= 2 {
		s.Generation = r.int32()
	}
	if v >= 3 {
		if rb, ok := r.nullableStringBytes(); ok {
			s.Rack = string(rb)
		}
	}
	return r.err
}

// DecodeAssignment decodes an assignment of any version into a.
func (d *Decoder) DecodeAssignment(b []byte, a *Assignment) error {
	r := reader{b: b}
	v := r.int16()
	if r.err == nil && v < 0 {
		return ErrNegativeVersion
	}
	*a = Assignment{Version: v}
	a.Topics = d.readTopicPartitions(&r, nil)
	a.UserData = r.nullableBytes()
	return r.err
}

// DecodeSubscription decodes a subscription; see Decoder.DecodeSubscription.
func DecodeSubscription(b []byte) (Subscription, error) {
	var d Decoder
	var s Subscription
	err := d.DecodeSubscription(b, &s)
	return s, err
}

// DecodeAssignment decodes an assignment; see Decoder.DecodeAssignment.
func DecodeAssignment(b []byte) (Assignment, error) {
	var d Decoder
	var a Assignment
	err := d.DecodeAssignment(b, &a)
	return a, err
}

func (d *Decoder) readTopicPartitions(r *reader, hint *[]string) []TopicPartitions {
	n := r.arrayLen(6)
	if n <= 0 {
		return nil
	}
	// Count partitions first so that all of them share one backing array.
	save := *r
	total := 0
	for i := 0; i < n && r.err == nil; i++ {
		r.stringBytes()
		k := r.arrayLen(4)
		total += k
		r.skip(4 * k)
	}
	if r.err != nil {
		return nil
	}
	*r = save
	out := make([]TopicPartitions, n)
	parts := make([]int32, total)
	var h []string
	if hint != nil {
		h = *hint
		if cap(h) < n {
			h = make([]string, 0, n)
		}
		h = h[:0]
		// The previous list stays readable while the new one is written
		// over it: entry i is read before it is overwritten.
	}
	for i := 0; i < n; i++ {
		b := r.stringBytes()
		if hint != nil {
			old := ""
			if i < len(*hint) {
				old = (*hint)[i]
			}
			if old != "" && old == string(b) {
				out[i].Topic = old
			} else {
				out[i].Topic = d.intern(b)
			}
			h = append(h, out[i].Topic)
		} else {
			out[i].Topic = d.intern(b)
		}
		k := r.arrayLen(4)
		ps := parts[:k:k]
		parts = parts[k:]
		for j := range ps {
			ps[j] = r.int32()
		}
		out[i].Partitions = ps
	}
	if hint != nil {
		*hint = h
	}
	return out
}

// reader is a bounds-checked big-endian reader; the first failure sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) need(n int) bool {
	if r.err != nil {
		return false
	}
	if n < 0 || len(r.b) < n {
		r.err = errShort
		r.b = nil
		return false
	}
	return true
}

func (r *reader) skip(n int) {
	if r.need(n) {
		r.b = r.b[n:]
	}
}

func (r *reader) int16() int16 {
	if !r.need(2) {
		return 0
	}
	v := int16(binary.BigEndian.Uint16(r.b))
	r.b = r.b[2:]
	return v
}

func (r *reader) int32() int32 {
	if !r.need(4) {
		return 0
	}
	v := int32(binary.BigEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v
}

// arrayLen reads an array count and checks that the remaining bytes can hold
// that many elements of at least minSize bytes, so that a hostile count
// cannot trigger a huge allocation. A null array (-1) reads as 0.
func (r *reader) arrayLen(minSize int) int {
	n := r.int32()
	if r.err != nil {
		return 0
	}
	if n == -1 {
		return 0
	}
	if n < 0 {
		r.err = errNegativeLength
		r.b = nil
		return 0
	}
	if int64(n)*int64(minSize) > int64(len(r.b)) {
		r.err = errShort
		r.b = nil
		return 0
	}
	return int(n)
}

func (r *reader) stringBytes() []byte {
	n := r.int16()
	if r.err != nil {
		return nil
	}
	if n < 0 {
		r.err = errNegativeLength
		r.b = nil
		return nil
	}
	if !r.need(int(n)) {
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

func (r *reader) nullableStringBytes() ([]byte, bool) {
	n := r.int16()
	if r.err != nil || n == -1 {
		return nil, false
	}
	if n < 0 {
		r.err = errNegativeLength
		r.b = nil
		return nil, false
	}
	if !r.need(int(n)) {
		return nil, false
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s, true
}

func (r *reader) nullableBytes() []byte {
	n := r.int32()
	if r.err != nil || n == -1 {
		return nil
	}
	if n < 0 {
		r.err = errNegativeLength
		r.b = nil
		return nil
	}
	if !r.need(int(n)) {
		return nil
	}
	s := r.b[:n:n]
	r.b = r.b[n:]
	return s
}

func appendString(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

func appendBytes(dst, b []byte) []byte {
	if b == nil {
		return binary.BigEndian.AppendUint32(dst, math.MaxUint32) // null
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

func appendTopicPartitions(dst []byte, tps []TopicPartitions) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(tps)))
	for i := range tps {
		dst = appendString(dst, tps[i].Topic)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(tps[i].Partitions)))
		for _, p := range tps[i].Partitions {
			dst = binary.BigEndian.AppendUint32(dst, uint32(p))
		}
	}
	return dst
}

// StickyUserData is the userData of the eager "sticky" assignor
// (StickyAssignorUserData): the member's previous assignment and, in schema
// V1, its generation. It carries no version prefix.
type StickyUserData struct {
	Owned []TopicPartitions
	// Generation is DefaultGeneration when the V0 schema was read.
	Generation int32
}

// AppendTo appends the V1 encoding of u.
func (u *StickyUserData) AppendTo(dst []byte) []byte {
	dst = appendTopicPartitions(dst, u.Owned)
	return binary.BigEndian.AppendUint32(dst, uint32(u.Generation))
}

// DecodeStickyUserData reads sticky userData, trying schema V1 (with the
// generation) first and then V0, as Kafka's reader does. Trailing bytes after
// a V1 body are ignored.
func (d *Decoder) DecodeStickyUserData(b []byte) (StickyUserData, error) {
	r := reader{b: b}
	owned := d.readTopicPartitions(&r, &d.ownedHint)
	if r.err != nil {
		return StickyUserData{Generation: DefaultGeneration}, r.err
	}
	u := StickyUserData{Owned: owned, Generation: DefaultGeneration}
	if len(r.b) >= 4 {
		u.Generation = r.int32()
	}
	return u, nil
}

// AppendCooperativeUserData appends the userData of "cooperative-sticky": the
// member's generation as a bare int32.
func AppendCooperativeUserData(dst []byte, generation int32) []byte {
	return binary.BigEndian.AppendUint32(dst, uint32(generation))
}

// DecodeCooperativeUserData reads the generation from cooperative-sticky
// userData; ok is false if b is too short.
func DecodeCooperativeUserData(b []byte) (generation int32, ok bool) {
	if len(b) < 4 {
		return DefaultGeneration, false
	}
	return int32(binary.BigEndian.Uint32(b)), true
}

// AssignedPartitions walks the partitions of an encoded consumer-protocol
// assignment without decoding it into an Assignment: no allocation, and
// topic names that point into the encoding. Use NewAssignedPartitions, then
// Next until it returns false, then Err.
type AssignedPartitions struct {
	r                     reader
	started, done         bool
	topicsLeft, partsLeft int
	topic                 []byte
	partition             int32
}

// NewAssignedPartitions returns a walk over the partitions assigned in b.
func NewAssignedPartitions(b []byte) AssignedPartitions {
	return AssignedPartitions{r: reader{b: b}}
}

// Next moves to the next assigned partition; false at the end or at the
// first malformed byte.
func (w *AssignedPartitions) Next() bool {
	if !w.started {
		w.started = true
		if v := w.r.int16(); w.r.err == nil && v < 0 {
			w.r.err = ErrNegativeVersion
			return false
		}
		w.topicsLeft = w.r.arrayLen(6)
	}
	for w.partsLeft == 0 {
		if w.topicsLeft == 0 || w.r.err != nil {
			return false
		}
		w.topicsLeft--
		w.topic = w.r.stringBytes()
		w.partsLeft = w.r.arrayLen(4)
	}
	w.partsLeft--
	w.partition = w.r.int32()
	return w.r.err == nil
}

// Topic is the current partition's topic (it points into the encoding).
func (w *AssignedPartitions) Topic() []byte { return w.topic }

// Partition is the current partition.
func (w *AssignedPartitions) Partition() int32 { return w.partition }

// Err is the error DecodeAssignment returns for the same bytes: nil when
// they decode, user data included. It walks whatever Next has not. The
// partitions seen before a malformed byte are not an assignment.
func (w *AssignedPartitions) Err() error {
	for w.Next() {
	}
	if w.r.err == nil && !w.done {
		w.done = true
		w.r.nullableBytes()
	}
	return w.r.err
}
