// Package raftfsm replicates cohort's durable state with hashicorp/raft:
// every group's metadata record and committed offsets, the topic catalog and
// the registry of nodes. Each log entry is one protobuf Envelope {type,
// version, payload} applied through a table of apply functions; snapshots
// are length-delimited typed records in a fixed order, so equal states give
// equal bytes (and equal hashes) on every node.
package raftfsm

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	"github.com/cohort-coord/cohort/security"
)

// CommandVersion is the envelope version this code writes and applies.
const CommandVersion = 1

// ErrBadCommand: an entry that this version cannot apply. Every replica
// refuses it the same way.
var ErrBadCommand = errors.New("raftfsm: bad command")

// ErrHalted: the FSM met an entry of a type or version it does not know and
// that is not marked ignorable (a newer node wrote it). It applies nothing
// after it and takes no snapshot, so its state never moves past an entry it
// skipped; the node must stop and be upgraded.
var ErrHalted = errors.New("raftfsm: halted on an entry this version cannot apply")

// ApplyResult is what FSM.Apply returns for an entry: Err for the whole
// entry, or one error per write of a GroupWrites entry.
type ApplyResult struct {
	Err  error
	Errs []error
}

// FSM is the replicated state machine.
type FSM struct {
	mu      sync.RWMutex
	state   *State
	nodes   map[string]*raftpb.NodeRegister
	catalog *catalog.Catalog
	// security holds SCRAM credentials and ACLs (security.go).
	security *security.Store
	log      *slog.Logger
	// halt is set once, on the apply goroutine; halted is closed then.
	halt   atomic.Pointer[error]
	halted chan struct{}
	// own holds the group writes this node proposed until their entry is
	// applied or fails: the leader applies the entries it wrote from the
	// messages it encoded them from instead of decoding its own bytes again.
	own proposals
	// applied is the index of the last entry Apply returned from (see
	// Node.Holds).
	applied atomic.Uint64
	// restores counts the snapshots restored (see Node.Holds).
	restores atomic.Uint64
	// format is the cluster's log format (LogFormat; 0 reads as 1),
	// changed under mu on the apply goroutine, read without it.
	format atomic.Uint32
	// shardMap is the cluster's shard map (shardmap.go), nil until
	// recorded; localShards is this node's data dir's shard count.
	shardMap    *raftpb.ShardMap
	localShards atomic.Int32
	// The apply goroutine's scratch (Apply is called from one goroutine,
	// raft's): the decoder of group writes and the buffer compressed
	// entries are inflated into, both reused from entry to entry.
	dec      writeDecoder
	inflated []byte
	// beforeApply, set by tests only, runs before each entry is applied.
	beforeApply atomic.Pointer[func()]
}

// NewFSM returns an empty FSM that applies topic commands to cat.
func NewFSM(cat *catalog.Catalog, log *slog.Logger) *FSM {
	if log == nil {
		log = slog.Default()
	}
	return &FSM{state: NewState(), nodes: map[string]*raftpb.NodeRegister{}, catalog: cat, security: security.NewStore(), log: log, halted: make(chan struct{})}
}

var applyTable = map[raftpb.CommandType]func(f *FSM, payload []byte) *ApplyResult{
	raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES:  (*FSM).applyGroupWrites,
	raftpb.CommandType_COMMAND_TYPE_TOPIC_CREATE:  (*FSM).applyTopicCreate,
	raftpb.CommandType_COMMAND_TYPE_TOPIC_DELETE:  (*FSM).applyTopicDelete,
	raftpb.CommandType_COMMAND_TYPE_NODE_REGISTER: (*FSM).applyNodeRegister,
	raftpb.CommandType_COMMAND_TYPE_NODE_REMOVE:   (*FSM).applyNodeRemove,
	raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT:    (*FSM).applyLogFormat,
	raftpb.CommandType_COMMAND_TYPE_SHARD_MAP:     (*FSM).applyShardMap,
	raftpb.CommandType_COMMAND_TYPE_TOPIC_GROW:    (*FSM).applyTopicGrow,
}

// Apply implements raft.FSM. An entry of an unknown type or version is
// refused and skipped when it is marked ignorable; otherwise a newer node
// wrote something this one cannot apply, and the FSM halts (Halted) rather
// than diverge from the replicas that applied it.
func (f *FSM) Apply(l *raft.Log) any {
	if h := f.beforeApply.Load(); h != nil {
		(*h)()
	}
	res := f.applyEntry(l)
	f.applied.Store(l.Index)
	return res
}

func (f *FSM) applyEntry(l *raft.Log) *ApplyResult {
	if err := f.halt.Load(); err != nil {
		return &ApplyResult{Err: fmt.Errorf("%w: entry %d not applied: %w", ErrBadCommand, l.Index, *err)}
	}
	if len(l.Data) > 0 {
		if ws := f.own.take(l.Data); ws != nil {
			return f.applyWrites(ws)
		}
	}
	return f.applyEnvelope(l.Index, l.Data, false)
}

// applyEnvelope applies one Envelope's encoding: an entry's data, or what a
// COMPRESSED entry holds (inner: which is never compressed again).
func (f *FSM) applyEnvelope(index uint64, data []byte, inner bool) *ApplyResult {
	env, err := parseEnvelope(data)
	if err != nil {
		return &ApplyResult{Err: fmt.Errorf("%w: entry %d: %v", ErrBadCommand, index, err)}
	}
	if env.typ == raftpb.CommandType_COMMAND_TYPE_COMPRESSED && env.version == CommandVersion {
		if inner {
			return &ApplyResult{Err: fmt.Errorf("%w: entry %d: compressed twice", ErrBadCommand, index)}
		}
		// Into the apply goroutine's buffer: no apply function keeps any
		// of its payload's bytes (strings and protobuf's bytes are copies).
		d, err := decompressEntry(env.payload, &f.inflated)
		if err != nil {
			return &ApplyResult{Err: fmt.Errorf("%w: entry %d: compressed: %v", ErrBadCommand, index, err)}
		}
		return f.applyEnvelope(index, d, true)
	}
	apply, ok := applyTable[env.typ]
	if !ok || env.version != CommandVersion {
		err := fmt.Errorf("%w: entry %d: type %v version %d", ErrBadCommand, index, env.typ, env.version)
		if env.ignorable || env.typ == raftpb.CommandType_COMMAND_TYPE_UNSPECIFIED {
			// No version writes an entry without a type: it is garbage, not
			// a newer command, and refused like bytes that are no envelope.
			f.log.Warn("skipping an ignorable entry this version cannot apply", "index", index, "type", env.typ, "version", env.version)
			return &ApplyResult{Err: err}
		}
		return &ApplyResult{Err: fmt.Errorf("%w: %w", err, f.haltOn(fmt.Sprintf("entry %d: type %v version %d", index, env.typ, env.version)))}
	}
	return apply(f, env.payload)
}

// haltOn stops the FSM at an entry this version cannot apply and may not
// skip, and returns why (wrapping ErrHalted).
func (f *FSM) haltOn(what string) error {
	f.log.Error("halting: an entry this version cannot apply and may not skip", "entry", what)
	return f.haltWith(errors.New(what))
}

// haltWith halts the FSM for cause (wrapped with ErrHalted); halting again
// keeps the first cause.
func (f *FSM) haltWith(cause error) error {
	halt := fmt.Errorf("%w: %w", ErrHalted, cause)
	if !f.halt.CompareAndSwap(nil, &halt) {
		return *f.halt.Load()
	}
	close(f.halted)
	return halt
}

// Halted is closed when the FSM halts; HaltErr then says why.
func (f *FSM) Halted() <-chan struct{} { return f.halted }

// HaltErr returns why the FSM halted (wrapping ErrHalted), nil while it
// applies entries.
func (f *FSM) HaltErr() error {
	if err := f.halt.Load(); err != nil {
		return *err
	}
	return nil
}

// proposed registers the writes an entry of this node holds (data is the
// entry's bytes, as given to raft.Apply) and returns the proposal's sequence
// number, which forget takes once the entry is applied or failed.
func (f *FSM) proposed(data []byte, ws *raftpb.GroupWrites) uint64 {
	return f.own.add(data, ws)
}

func (f *FSM) forget(seq uint64) { f.own.remove(seq) }

// proposals are the group writes this node proposed whose entries are not
// yet applied or failed, oldest first, each under a sequence number. An
// entry is applied from a proposal's messages when its bytes are that
// proposal's: equal bytes decode to equal messages, so the shortcut never
// depends on how raft hands the entry over (hashicorp/raft gives the
// leader's FSM the very bytes it was given, and comparing them stops at
// their address).
type proposals struct {
	mu   sync.Mutex
	next uint64
	list []proposal // a few: one per entry in flight
}

type proposal struct {
	seq  uint64
	data []byte
	ws   *raftpb.GroupWrites
}

func (p *proposals) add(data []byte, ws *raftpb.GroupWrites) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	p.list = append(p.list, proposal{seq: p.next, data: data, ws: ws})
	return p.next
}

func (p *proposals) remove(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = slices.DeleteFunc(p.list, func(q proposal) bool { return q.seq == seq })
}

// take returns, and forgets, the writes of the proposal whose bytes data
// are; nil when no proposal's are.
func (p *proposals) take(data []byte) *raftpb.GroupWrites {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, q := range p.list {
		if bytes.Equal(q.data, data) {
			p.list = slices.Delete(p.list, i, i+1)
			return q.ws
		}
	}
	return nil
}

// pending is how many proposals wait for their entry.
func (p *proposals) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.list)
}

func (f *FSM) applyGroupWrites(payload []byte) *ApplyResult {
	ws, err := f.dec.decode(payload)
	if err != nil {
		return &ApplyResult{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	return f.applyWrites(ws)
}

func (f *FSM) applyWrites(ws *raftpb.GroupWrites) *ApplyResult {
	res := &ApplyResult{Errs: make([]error, len(ws.GetWrites()))}
	f.mu.Lock()
	defer f.mu.Unlock()
	format := f.format.Load()
	for i, w := range ws.GetWrites() {
		if format < LogFormatConsumer && hasConsumerRecords(w.GetRecords()) {
			res.Errs[i] = f.state.applyBelowConsumerFormat(w, max(format, LogFormatPlain))
			continue
		}
		res.Errs[i] = f.state.ApplyWrite(w)
	}
	return res
}

func (f *FSM) applyNodeRegister(payload []byte) *ApplyResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &ApplyResult{Err: registerNode(f.nodes, payload)}
}

func (f *FSM) applyNodeRemove(payload []byte) *ApplyResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &ApplyResult{Err: removeNode(f.nodes, payload)}
}

// registerNode applies a NODE_REGISTER payload to a node registry (the
// FSM's, or the one a node reads from its own log when it opens).
func registerNode(nodes map[string]*raftpb.NodeRegister, payload []byte) error {
	var n raftpb.NodeRegister
	if err := proto.Unmarshal(payload, &n); err != nil || n.GetNodeId() == "" {
		return fmt.Errorf("%w: node register %v", ErrBadCommand, err)
	}
	nodes[n.GetNodeId()] = &n
	return nil
}

// removeNode applies a NODE_REMOVE payload to a node registry.
func removeNode(nodes map[string]*raftpb.NodeRegister, payload []byte) error {
	var n raftpb.NodeRemove
	if err := proto.Unmarshal(payload, &n); err != nil {
		return fmt.Errorf("%w: %v", ErrBadCommand, err)
	}
	delete(nodes, n.GetNodeId())
	return nil
}

// Node returns a registered node.
func (f *FSM) Node(id string) (*raftpb.NodeRegister, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.nodes[id]
	return n, ok
}

// HasNodeAt reports whether a registered node's native API address is
// remote (no copy of the registry is made).
func (f *FSM) HasNodeAt(remote string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, n := range f.nodes {
		if n.GetRemoteAddr() == remote {
			return true
		}
	}
	return false
}

// Nodes returns every registered node, sorted by id.
func (f *FSM) Nodes() []*raftpb.NodeRegister {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return sortedNodes(f.nodes)
}

// sortedNodes returns the registrations of nodes, sorted by node id.
func sortedNodes(nodes map[string]*raftpb.NodeRegister) []*raftpb.NodeRegister {
	out := make([]*raftpb.NodeRegister, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b *raftpb.NodeRegister) int { return cmp.Compare(a.GetNodeId(), b.GetNodeId()) })
	return out
}

// Load returns a group's durable state (actors.Store).
func (f *FSM) Load(groupID string) (*pb.GroupRecord, []*pb.OffsetRecord, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	rec, offsets := f.state.Load(groupID)
	return rec, offsets, nil
}

// Sessions returns a group's last MemberSessions, nil when none
// (actors.SessionStore).
func (f *FSM) Sessions(groupID string) *pb.MemberSessions {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Sessions(groupID)
}

// Groups lists every stored group (actors.Store).
func (f *FSM) Groups() ([]string, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Groups(), nil
}

// capture returns the snapshot records of the whole state, in their fixed
// order (nodes, topics, security, then groups), without encoding them. Applied
// records are never changed in place (an apply replaces the pointer), so the
// records stay as captured after the lock is released. Caller holds f.mu.
func (f *FSM) capture() []snapRecord {
	var out []snapRecord
	if v := f.format.Load(); v > LogFormatPlain {
		out = append(out, snapRecord{msg: &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_LogFormat{LogFormat: &raftpb.LogFormat{Format: v}}}})
	}
	if f.shardMap != nil {
		out = append(out, snapRecord{msg: &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_ShardMap{ShardMap: f.shardMap}}})
	}
	for _, n := range sortedNodes(f.nodes) {
		out = append(out, snapRecord{msg: &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_Node{Node: n}}})
	}
	for _, t := range f.catalog.Snapshot() {
		tc := &raftpb.TopicCreate{Name: t.Name, Id: t.ID[:], Partitions: t.Partitions}
		out = append(out, snapRecord{msg: &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_Topic{Topic: tc}}})
	}
	out = f.captureSecurity(out)
	return f.state.capture(out)
}

func encodeRecords(w io.Writer, recs []snapRecord) error {
	for _, r := range recs {
		if err := writeRecord(w, r); err != nil {
			return err
		}
	}
	return nil
}

// Hash returns a hex SHA-256 of the encoded state: equal on every node that
// applied the same entries.
func (f *FSM) Hash() string {
	f.mu.RLock()
	recs := f.capture()
	f.mu.RUnlock()
	h := sha256.New()
	if err := encodeRecords(h, recs); err != nil {
		return "error: " + err.Error()
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Snapshot implements raft.FSM: it captures the records under the read
// lock, which blocks Apply only for that copy of pointers; Persist encodes
// them. A halted FSM takes no snapshot: its state would claim entries it
// never applied.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.HaltErr(); err != nil {
		return nil, err
	}
	f.mu.RLock()
	recs := f.capture()
	f.mu.RUnlock()
	return &snapshot{recs: recs}, nil
}

// Restore implements raft.FSM: it replaces the whole state.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	state, nodes := NewState(), map[string]*raftpb.NodeRegister{}
	var format uint32
	var shardMap *raftpb.ShardMap
	var topics []catalog.Topic
	var sec securityRecords
	r := bufio.NewReader(rc)
	for {
		var rec raftpb.SnapshotRecord
		err := readRecord(r, &rec)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("raftfsm: restore: %w", err)
		}
		switch k := rec.GetKind().(type) {
		case *raftpb.SnapshotRecord_LogFormat:
			format = k.LogFormat.GetFormat()
		case *raftpb.SnapshotRecord_ShardMap:
			shardMap = k.ShardMap
		case *raftpb.SnapshotRecord_Node:
			nodes[k.Node.GetNodeId()] = k.Node
		case *raftpb.SnapshotRecord_Topic:
			t := catalog.Topic{Name: k.Topic.GetName(), Partitions: k.Topic.GetPartitions()}
			copy(t.ID[:], k.Topic.GetId())
			topics = append(topics, t)
		case *raftpb.SnapshotRecord_Group:
			state.entry(k.Group.GetGroupId()).rec = newStoredGroup(k.Group)
		case *raftpb.SnapshotRecord_Offset:
			o := k.Offset
			state.entry(o.GetGroupId()).offsets[offsetKey{o.GetTopic(), o.GetPartition()}] = o
		case *raftpb.SnapshotRecord_MemberSessions:
			state.entry(k.MemberSessions.GetGroupId()).sessions = k.MemberSessions
		case *raftpb.SnapshotRecord_Scram, *raftpb.SnapshotRecord_Acl:
			sec.add(&rec)
		default:
			c := consumerFromSnapshot(&rec)
			if c == nil {
				return fmt.Errorf("raftfsm: restore: unknown record %T", k)
			}
			state.applyConsumer(c)
		}
	}
	if format > LogFormat {
		return fmt.Errorf("raftfsm: restore: log format %d (this version applies up to %d)", format, LogFormat)
	}
	f.mu.Lock()
	f.state, f.nodes, f.shardMap = state, nodes, shardMap
	f.format.Store(format)
	f.catalog.Restore(topics)
	f.security.Restore(sec.creds, sec.acls)
	f.mu.Unlock()
	f.restores.Add(1)
	if shardMap != nil {
		if err := f.checkShardMap(shardMap); err != nil {
			return fmt.Errorf("raftfsm: restore: %w", err)
		}
	}
	return nil
}

// readRecord reads one length-delimited record. A record is as large as
// the log entry that wrote it, so no size limit applies (protodelim's
// default of 4 MiB would make such a snapshot impossible to restore); the
// body is read as it arrives, so a corrupt length ends in an error at the
// end of the stream, not in one huge allocation.
func readRecord(r *bufio.Reader, rec *raftpb.SnapshotRecord) error {
	size, err := binary.ReadUvarint(r)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(io.LimitReader(r, int64(min(size, math.MaxInt64))))
	if err != nil {
		return err
	}
	if uint64(len(body)) != size {
		return fmt.Errorf("record of %d bytes cut at %d: %w", size, len(body), io.ErrUnexpectedEOF)
	}
	return proto.Unmarshal(body, rec)
}

type snapshot struct{ recs []snapRecord }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriterSize(sink, 64<<10)
	if err := encodeRecords(w, s.recs); err != nil {
		sink.Cancel()
		return err
	}
	if err := w.Flush(); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *snapshot) Release() {}
