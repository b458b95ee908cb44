package raftfsm

import (
	"errors"
	"fmt"

	"github.com/klauspost/compress/s2"
	"google.golang.org/protobuf/proto"

	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// Log formats. The cluster's format (FSM.LogFormat) says what entries may
// use; it starts at 1 and only goes up, by a LOG_FORMAT entry the leader
// writes once every voter has registered a format at least as high (see
// Node.RaiseLogFormat). A node that applies only a lower format may then no
// longer join, and a node restarted with an older version stops at the
// first entry it cannot apply (the FSM halts) rather than diverge.
const (
	// LogFormatPlain: every entry is a plain Envelope.
	LogFormatPlain uint32 = 1
	// LogFormatCompressed: an entry may be an Envelope compressed with S2
	// (COMMAND_TYPE_COMPRESSED). Batches of group writes are: a commit's
	// group id, member id and topic repeat across a batch, and compressing
	// halves what every node writes to its log (bolt rewrites a leaf of
	// several entries on every append) and sends to its followers.
	LogFormatCompressed uint32 = 2
	// LogFormatSessions: a group write may hold a MemberSessions record,
	// which carries members' sessions over a change of coordinator. Below
	// this format the store drops such writes: older nodes cannot read them.
	LogFormatSessions uint32 = 3
	// LogFormatConsumer: a group write may hold a consumer group's
	// (KIP-848) records (consumer.go). Below this format the store refuses
	// such writes (ErrLogFormatTooLow), and the FSM applies one as an older
	// node does, which ignores records it does not know: without them.
	LogFormatConsumer uint32 = 4
	// LogFormatTopicGrow: the meta group's log may hold TOPIC_GROW
	// entries (a topic's partition count raised, topics.go). A new entry
	// type needs a new format: a node of an older version halts on an
	// entry whose type it does not know (it is not ignorable: skipping it
	// would leave that node's catalog smaller than the others'). Below
	// this format the leader refuses to write one (catalog.ErrUnsupported,
	// ErrLogFormatTooLow), and the FSM refuses one as a no-op.
	LogFormatTopicGrow uint32 = 5
	// LogFormat is the highest format this version applies and writes.
	LogFormat = LogFormatTopicGrow
)

const (
	// compressMin is the smallest entry worth compressing.
	compressMin = 512
	// maxDecompressed bounds a compressed entry's decoded size; the leader
	// does not compress a larger one.
	maxDecompressed = 64 << 20
)

// ErrIncompatibleNode: a node that applies only a lower log format than the
// cluster's asked to join.
var ErrIncompatibleNode = errors.New("node applies an older log format than the cluster writes")

// registeredFormat is the log format a registration says its node applies.
func registeredFormat(r *raftpb.NodeRegister) uint32 {
	return max(r.GetLogFormat(), LogFormatPlain)
}

// LogFormat returns the cluster's log format as of the entries applied.
func (f *FSM) LogFormat() uint32 { return max(f.format.Load(), LogFormatPlain) }

func (f *FSM) applyLogFormat(payload []byte) *ApplyResult {
	var m raftpb.LogFormat
	if err := proto.Unmarshal(payload, &m); err != nil {
		return &ApplyResult{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	if m.GetFormat() > LogFormat {
		// Entries after this one may be of a kind this version cannot read.
		return &ApplyResult{Err: fmt.Errorf("%w: %w", ErrBadCommand, f.haltOn(fmt.Sprintf("log format %d (this version applies up to %d)", m.GetFormat(), LogFormat)))}
	}
	f.mu.Lock()
	if m.GetFormat() > f.format.Load() {
		f.format.Store(m.GetFormat())
	}
	f.mu.Unlock()
	return &ApplyResult{}
}

// compressEntry returns the COMPRESSED entry holding data (an Envelope's
// encoding), or nil when compressing does not pay: data is small, too
// large, or does not shrink by an eighth. buf is scratch the caller keeps.
func compressEntry(data []byte, buf *[]byte) []byte {
	if len(data) < compressMin || len(data) > maxDecompressed {
		return nil
	}
	if n := s2.MaxEncodedLen(len(data)); cap(*buf) < n {
		*buf = make([]byte, n)
	}
	c := s2.Encode((*buf)[:cap(*buf)], data)
	if len(c) > len(data)-len(data)/8 {
		return nil
	}
	out := appendEnvelope(raftpb.CommandType_COMMAND_TYPE_COMPRESSED, len(c))
	return append(out, c...)
}

// decompressEntry returns the Envelope encoding a COMPRESSED entry's
// payload holds, in *buf (grown as needed, valid until the next call).
func decompressEntry(payload []byte, buf *[]byte) ([]byte, error) {
	n, err := s2.DecodedLen(payload)
	if err != nil {
		return nil, err
	}
	if n > maxDecompressed {
		return nil, fmt.Errorf("decompresses to %d bytes (at most %d)", n, maxDecompressed)
	}
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	return s2.Decode((*buf)[:n], payload)
}
