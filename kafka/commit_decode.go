package kafka

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitStrings are the strings a connection's commits reuse while they
// repeat: a Kafka consumer commits for its one member, mostly to one topic,
// on one connection.
type commitStrings struct {
	member, instance, topic, metadata string
}

// commitParts are the request's topic and partition of a commit of one
// partition, held in the commit's slot.
type commitParts struct {
	topic [1]kmsg.OffsetCommitRequestTopic
	part  [1]kmsg.OffsetCommitRequestTopicPartition
	meta  string // the partition's metadata, which the request points to
}

// decodeCommit decodes the usual OffsetCommit body, one topic with one
// partition and no tagged fields, into req and parts without copying the
// frame: strings are copied one by one, or reused (the group id from ids when
// the group is held there, the others from last when they repeat). It reports
// false, leaving req for kmsg to decode, for anything else: more topics or
// partitions, a negative or long length, a tagged field, bytes after the
// body. Where it reports true, req holds what kmsg's ReadFrom decodes from
// the same bytes.
func decodeCommit(body []byte, version int16, req *kmsg.OffsetCommitRequest, parts *commitParts, ids GroupIDs, last *commitStrings) bool {
	if version < 0 || version > 9 {
		return false
	}
	flexible := version >= 8
	group, rest, ok := wireString(body, flexible)
	if !ok {
		return false
	}
	gen := int32(-1)
	var member, instance []byte
	hasInstance := false
	if version >= 1 {
		if gen, member, instance, hasInstance, rest, ok = wireMember(rest, flexible, version >= 7); !ok {
			return false
		}
	}
	retention := int64(-1)
	if version >= 2 && version <= 4 {
		if len(rest) < 8 {
			return false
		}
		retention, rest = int64(binary.BigEndian.Uint64(rest)), rest[8:]
	}
	if rest, ok = wireOne(rest, flexible); !ok {
		return false
	}
	topic, rest, ok := wireString(rest, flexible)
	if !ok {
		return false
	}
	if rest, ok = wireOne(rest, flexible); !ok {
		return false
	}
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	extra := 0 // after the partition and offset: the timestamp in v1, the leader epoch from v6
	switch {
	case version == 1:
		extra = 8
	case version >= 6:
		extra = 4
	}
	if len(rest) < 12+extra {
		return false
	}
	p.Partition, p.Offset = int32(binary.BigEndian.Uint32(rest)), int64(binary.BigEndian.Uint64(rest[4:]))
	switch extra {
	case 8:
		p.Timestamp = int64(binary.BigEndian.Uint64(rest[12:]))
	case 4:
		p.LeaderEpoch = int32(binary.BigEndian.Uint32(rest[12:]))
	}
	rest = rest[12+extra:]
	meta, rest, hasMeta, ok := wireNullable(rest, flexible)
	if !ok {
		return false
	}
	if flexible { // the partition's, the topic's and the request's tags: none
		if len(rest) < 3 || rest[0] != 0 || rest[1] != 0 || rest[2] != 0 {
			return false
		}
		rest = rest[3:]
	}
	if len(rest) != 0 {
		return false
	}
	*req = kmsg.OffsetCommitRequest{Version: version, Group: groupID(ids, group), Generation: gen, RetentionTimeMillis: retention}
	if version >= 1 {
		req.MemberID = reuse(&last.member, member)
	}
	if hasInstance {
		s := reuse(&last.instance, instance)
		req.InstanceID = &s
	}
	if hasMeta {
		parts.meta = reuse(&last.metadata, meta)
		p.Metadata = &parts.meta
	}
	parts.part[0] = p
	parts.topic[0] = kmsg.OffsetCommitRequestTopic{Topic: reuse(&last.topic, topic), Partitions: parts.part[:]}
	req.Topics = parts.topic[:]
	return true
}

// wireOne reads an array length that must be one: an int32, or for flexible
// versions the unsigned varint of length+1.
func wireOne(b []byte, flexible bool) ([]byte, bool) {
	if flexible {
		return b[min(1, len(b)):], len(b) >= 1 && b[0] == 2
	}
	return b[min(4, len(b)):], len(b) >= 4 && binary.BigEndian.Uint32(b) == 1
}
