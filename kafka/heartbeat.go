package kafka

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// heartbeatStrings are the strings an inline heartbeat reuses: the last
// member id and instance id seen on the connection (a Kafka consumer sends
// every heartbeat of its member on one connection).
type heartbeatStrings struct {
	member   string
	instance string
}

// decodeHeartbeat decodes a well-formed Heartbeat request body into hb,
// reusing strings: the group id from ids when the group is held there, the
// member and instance ids from last when they repeat. It reports false,
// leaving hb for kmsg to decode, for anything else: a negative or overlong
// length, a tagged field, bytes after the body. Where it reports true, hb
// holds what kmsg's ReadFrom decodes from the same bytes. It knows versions 0
// to 4; a later one, which may add fields, is left to kmsg.
func decodeHeartbeat(body []byte, version int16, hb *kmsg.HeartbeatRequest, ids GroupIDs, last *heartbeatStrings) bool {
	if version < 0 || version > 4 {
		return false
	}
	flexible := version >= 4
	group, rest, ok := wireString(body, flexible)
	if !ok {
		return false
	}
	gen, member, instance, hasInstance, rest, ok := wireMember(rest, flexible, version >= 3)
	if !ok {
		return false
	}
	if flexible {
		if len(rest) == 0 || rest[0] != 0 { // tagged fields: kmsg keeps them
			return false
		}
		rest = rest[1:]
	}
	if len(rest) != 0 {
		return false
	}
	*hb = kmsg.HeartbeatRequest{Version: version, Group: groupID(ids, group), Generation: gen, MemberID: reuse(&last.member, member)}
	if hasInstance {
		s := reuse(&last.instance, instance)
		hb.InstanceID = &s
	}
	return true
}

// groupID returns b as a string: the held group's id when ids holds it, else
// a copy.
func groupID(ids GroupIDs, b []byte) string {
	if ids != nil {
		if id, held := ids.GroupID(b); held {
			return id
		}
	}
	return string(b)
}

// wireMember reads the generation, the member id and, when withInstance, the
// nullable instance id that follow a group id in Heartbeat and OffsetCommit.
func wireMember(b []byte, flexible, withInstance bool) (gen int32, member, instance []byte, hasInstance bool, rest []byte, ok bool) {
	if len(b) < 4 {
		return 0, nil, nil, false, nil, false
	}
	gen = int32(binary.BigEndian.Uint32(b))
	if member, rest, ok = wireString(b[4:], flexible); !ok || !withInstance {
		return gen, member, nil, false, rest, ok
	}
	instance, rest, hasInstance, ok = wireNullable(rest, flexible)
	return gen, member, instance, hasInstance, rest, ok
}

// reuse returns b as a string: *last when equal, else a new one kept there.
func reuse(last *string, b []byte) string {
	if string(b) != *last {
		*last = string(b)
	}
	return *last
}

// wireString reads a non-null string: int16 length, or for flexible
// versions an unsigned varint of length+1 that fits one byte.
func wireString(b []byte, flexible bool) (s, rest []byte, ok bool) {
	s, rest, present, ok := wireNullable(b, flexible)
	return s, rest, ok && present
}

// wireNullable reads a nullable string; present is false for null.
func wireNullable(b []byte, flexible bool) (s, rest []byte, present, ok bool) {
	var n int
	if flexible {
		if len(b) < 1 || b[0] >= 0x80 { // long strings take kmsg's path
			return nil, nil, false, false
		}
		n, b = int(b[0])-1, b[1:]
	} else {
		if len(b) < 2 {
			return nil, nil, false, false
		}
		n, b = int(int16(binary.BigEndian.Uint16(b))), b[2:]
	}
	if n == -1 {
		return nil, b, false, true
	}
	if n < 0 || n > len(b) {
		return nil, nil, false, false
	}
	return b[:n], b[n:], true, true
}
