package raftfsm

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/klauspost/compress/s2"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// commitBatch is the entry of n one-partition commits, as the Store encodes
// a batch of them.
func commitBatch(t testing.TB, n int) []byte {
	t.Helper()
	var ws []*raftpb.GroupWrite
	for i := range n {
		g := fmt.Sprintf("group-%04d", i%50)
		ws = append(ws, writeOf(g, nil, offsetRecord(g, "orders", int32(i%12), int64(1000+i))))
	}
	data, _, failed := encodeGroupWrites(ws)
	if failed != nil {
		t.Fatal(failed)
	}
	return data
}

func binaryUvarint(v uint64) []byte {
	var b []byte
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// A compressed entry is applied exactly as the entry it holds: same
// results, same state, same hash. Damaged, nested and oversized ones are
// refused as bytes that are no envelope are (every replica the same way),
// without halting.
func TestCompressedEntriesApplyAsPlain(t *testing.T) {
	data := commitBatch(t, 400)
	var buf []byte
	c := compressEntry(data, &buf)
	if c == nil || len(c) > len(data)/2 {
		t.Fatalf("400 commits: %d bytes compressed to %d", len(data), len(c))
	}
	t.Logf("400 commits: %d bytes, compressed %d", len(data), len(c))
	plain, packed := NewFSM(catalog.New(), quiet), NewFSM(catalog.New(), quiet)
	pr, cr := applyAt(plain, 1, data), applyAt(packed, 1, c)
	if pr.Err != nil || cr.Err != nil || len(pr.Errs) != 400 || len(cr.Errs) != 400 {
		t.Fatalf("plain %v (%d results), compressed %v (%d results)", pr.Err, len(pr.Errs), cr.Err, len(cr.Errs))
	}
	for i := range pr.Errs {
		if errString(pr.Errs[i]) != errString(cr.Errs[i]) {
			t.Fatalf("write %d: plain %v, compressed %v", i, pr.Errs[i], cr.Errs[i])
		}
	}
	if !bytes.Equal(encoded(t, plain), encoded(t, packed)) || plain.Hash() != packed.Hash() {
		t.Fatal("a compressed entry left another state than the plain one")
	}
	if _, offs, _ := packed.Load("group-0007"); len(offs) != 6 {
		t.Fatalf("group-0007 has %d offsets, want 6", len(offs))
	}

	if compressEntry(data[:compressMin-1], &buf) != nil {
		t.Fatal("a small entry was compressed")
	}
	noise := make([]byte, 4096)
	rand.Read(noise)
	if compressEntry(noise, &buf) != nil {
		t.Fatal("an entry that does not shrink was compressed")
	}

	wrap := func(payload []byte) []byte {
		return append(appendEnvelope(raftpb.CommandType_COMMAND_TYPE_COMPRESSED, len(payload)), payload...)
	}
	bad := map[string][]byte{
		"twice":     wrap(s2.Encode(nil, c)),
		"corrupt":   wrap(append(binaryUvarint(10), 0xff, 0xff)),
		"truncated": c[:len(c)-10],
		"oversized": wrap(append(binaryUvarint(maxDecompressed+1), 0, 0, 0)),
	}
	for name, entry := range bad {
		f := NewFSM(catalog.New(), quiet)
		res := applyAt(f, 1, entry)
		if !errors.Is(res.Err, ErrBadCommand) || errors.Is(res.Err, ErrHalted) || f.HaltErr() != nil {
			t.Fatalf("%s: %v (halted: %v)", name, res.Err, f.HaltErr())
		}
	}
}

// The cluster's log format only goes up, survives snapshots (and is absent
// from a format 1 snapshot, whose bytes stay as before), and a format this
// version does not know halts the FSM.
func TestLogFormatOnlyRises(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	before := encoded(t, f)
	if f.LogFormat() != LogFormatPlain {
		t.Fatalf("a new FSM's format %d", f.LogFormat())
	}
	format := func(v uint32) []byte {
		return mustCommand(t, raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT, &raftpb.LogFormat{Format: v})
	}
	if res := applyAt(f, 1, format(1)); res.Err != nil || f.LogFormat() != 1 || !bytes.Equal(encoded(t, f), before) {
		t.Fatalf("format 1: %v, format %d", res.Err, f.LogFormat())
	}
	if res := applyAt(f, 2, format(LogFormatCompressed)); res.Err != nil || f.LogFormat() != LogFormatCompressed {
		t.Fatalf("format 2: %v, format %d", res.Err, f.LogFormat())
	}
	if res := applyAt(f, 3, format(1)); res.Err != nil || f.LogFormat() != LogFormatCompressed {
		t.Fatalf("format 1 again: %v, format %d", res.Err, f.LogFormat())
	}
	snap := encoded(t, f)
	g := NewFSM(catalog.New(), quiet)
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil || g.LogFormat() != LogFormatCompressed || g.Hash() != f.Hash() {
		t.Fatalf("restored: %v, format %d", err, g.LogFormat())
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader(before))); err != nil || g.LogFormat() != LogFormatPlain {
		t.Fatalf("restored a format 1 snapshot: %v, format %d", err, g.LogFormat())
	}

	res := applyAt(f, 4, format(LogFormat+1))
	if !errors.Is(res.Err, ErrBadCommand) || !errors.Is(f.HaltErr(), ErrHalted) || f.LogFormat() != LogFormatCompressed {
		t.Fatalf("an unknown format: %v, halted %v", res.Err, f.HaltErr())
	}
	var sink memSink
	if err := encodeRecords(&sink, []snapRecord{{msg: &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_LogFormat{LogFormat: &raftpb.LogFormat{Format: LogFormat + 1}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := NewFSM(catalog.New(), quiet).Restore(io.NopCloser(bytes.NewReader(sink.buf))); err == nil {
		t.Fatal("restored a snapshot of a newer log format")
	}
}

// entryTypes lists the command types of n's log entries in order
// (COMPRESSED, or what a plain entry holds).
func entryTypes(t testing.TB, n *Node) []raftpb.CommandType {
	t.Helper()
	first, err := n.logs.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := n.logs.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	var out []raftpb.CommandType
	var l raft.Log
	for i := first; i <= last && i > 0; i++ {
		if err := n.logs.GetLog(i, &l); err != nil {
			t.Fatal(err)
		}
		if l.Type == raft.LogCommand {
			var env raftpb.Envelope
			if err := proto.Unmarshal(l.Data, &env); err != nil {
				t.Fatal(err)
			}
			out = append(out, env.GetType())
		}
	}
	return out
}

// Three nodes on real files: the leader compresses entries only once every
// voter has registered that it applies compressed ones; then every node
// applies them to the same state; and a node that does not is refused.
func TestLogFormatRaisedWhenEveryVoterApplies(t *testing.T) {
	all := threeSlowNodes(t)
	n1, n3 := all[0], all[2]
	ctx := context.Background()
	joinAs := func(n *Node, format uint32) error {
		var err error
		onLeader(t, "join "+n.ID(), all, func(l *Node) error {
			err = l.Join(ctx, &raftpb.NodeRegister{NodeId: n.ID(), RaftAddr: n.Addr(), LogFormat: format})
			if errors.Is(err, ErrNotLeader) {
				return err
			}
			return nil
		})
		return err
	}
	// Voters first: a cluster whose every voter applies the format (node1
	// alone) raises it at once.
	for _, n := range all[1:] {
		onLeader(t, "add "+n.ID(), all, func(l *Node) error { return l.AddVoter(n.ID(), n.Addr()) })
	}
	for _, n := range all {
		format := LogFormat
		if n == n3 {
			format = 0 // a version before log formats: applies format 1
		}
		if err := joinAs(n, format); err != nil {
			t.Fatalf("join %s: %v", n.ID(), err)
		}
	}
	write := func(prefix string) {
		var ws []write
		for i := range 200 {
			g := fmt.Sprintf("%s-%03d", prefix, i)
			ws = append(ws, write{group: g, recs: []*pb.Record{offsetRecord(g, "orders", int32(i%4), int64(i))}})
		}
		onLeader(t, "write "+prefix, all, func(l *Node) error {
			for _, err := range appendAll(t, l.Store, ws) {
				if err != nil {
					return err
				}
			}
			return nil
		})
		for _, n := range all {
			waitFor(t, n.ID()+" to apply the "+prefix+" writes", func() bool {
				_, offs, _ := n.FSM.Load(prefix + "-199")
				return len(offs) == 1
			})
		}
	}
	write("before")
	for _, n := range all {
		if types := entryTypes(t, n); n.FSM.LogFormat() != LogFormatPlain || slices.Contains(types, raftpb.CommandType_COMMAND_TYPE_COMPRESSED) {
			t.Fatalf("%s: format %d and entries %v while node3 applies format 1", n.ID(), n.FSM.LogFormat(), types)
		}
	}

	// node3 is upgraded: it registers again, and the format rises.
	if err := joinAs(n3, LogFormat); err != nil {
		t.Fatal(err)
	}
	for _, n := range all {
		waitFor(t, n.ID()+" to apply the new format", func() bool { return n.FSM.LogFormat() == LogFormat })
	}
	write("after")
	for _, n := range all {
		types := entryTypes(t, n)
		raised := slices.Index(types, raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT)
		if raised < 0 || slices.Contains(types[:raised], raftpb.CommandType_COMMAND_TYPE_COMPRESSED) || !slices.Contains(types[raised:], raftpb.CommandType_COMMAND_TYPE_COMPRESSED) {
			t.Fatalf("%s: entries %v: want compressed ones, and only after the format rose", n.ID(), types)
		}
	}
	for _, n := range all[1:] {
		waitFor(t, n.ID()+" to reach node1's state", func() bool { return n.FSM.Hash() == n1.FSM.Hash() })
	}

	// A node of an older version may no longer join.
	n4 := slowNode(t, "node4", false)
	err := joinAs(n4, LogFormatPlain)
	if !errors.Is(err, ErrIncompatibleNode) || !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("joining a format 1 node: %v", err)
	}
	if voters := n1.Voters(); len(voters) != 3 {
		t.Fatalf("voters %v after a refused join", voters)
	}
}

// A replica decodes every entry into the same reused arrays and inflates
// compressed ones into the same buffer: a long run of entries of every
// size, plain and compressed, leaves the state the leader's (which applies
// its own entries from the messages it encoded) has, entry after entry.
func TestDecodedEntriesReuseNothingTheyKeep(t *testing.T) {
	own, decoded := NewFSM(catalog.New(), quiet), NewFSM(catalog.New(), quiet)
	var buf []byte
	for i := range 60 {
		var ws []*raftpb.GroupWrite
		for j := range 1 + (i*37)%300 {
			g := fmt.Sprintf("g%03d", (i*7+j)%90)
			ws = append(ws, writeOf(g, nil, offsetRecord(g, fmt.Sprintf("topic-%d", j%3), int32(j%5), int64(i*1000+j))))
			if j%50 == 0 {
				ws = append(ws, writeOf(g, nil, groupRecord(g, int32(i+1), fmt.Sprintf("m%d", i), fmt.Sprintf("n%d", j))))
			}
		}
		data, msgs, failed := encodeGroupWrites(ws)
		if failed != nil {
			t.Fatal(failed)
		}
		if i%2 == 0 {
			if c := compressEntry(data, &buf); c != nil {
				data = c
			}
		}
		own.proposed(data, msgs)
		r1 := own.Apply(&raft.Log{Index: uint64(i + 1), Data: data}).(*ApplyResult)
		r2 := decoded.Apply(&raft.Log{Index: uint64(i + 1), Data: slices.Clone(data)}).(*ApplyResult)
		if r1.Err != nil || r2.Err != nil || len(r1.Errs) != len(r2.Errs) {
			t.Fatalf("entry %d: %v / %v", i, r1.Err, r2.Err)
		}
		if own.Hash() != decoded.Hash() {
			t.Fatalf("entry %d: the decoded state differs from the leader's", i)
		}
	}
}

// parseEnvelope reads what proto.Unmarshal reads, and refuses what it
// refuses.
func TestParseEnvelopeMatchesProto(t *testing.T) {
	for _, b := range envelopeSeeds(t) {
		sameEnvelope(t, b)
	}
}

func FuzzParseEnvelope(f *testing.F) {
	for _, b := range envelopeSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameEnvelope(t, b) })
}

func envelopeSeeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, e := range []*raftpb.Envelope{
		{},
		{Type: raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, Version: CommandVersion, Payload: []byte("payload")},
		{Type: raftpb.CommandType_COMMAND_TYPE_COMPRESSED, Version: 7, Ignorable: true},
		{Type: raftpb.CommandType(-3), Version: 1 << 31, Payload: []byte{}},
	} {
		b, err := proto.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	twice := append(slices.Clone(out[1]), out[2]...)                      // fields given twice: the last wins
	unknown := append(slices.Clone(out[1]), 0x2a, 0x01, 0x00, 0x30, 0x05) // field 5 (bytes), field 6 (varint)
	wrongType := append(slices.Clone(out[1]), 0x0a, 0x01, 0x07)           // field 1 as bytes: unknown
	group := append(slices.Clone(out[1]), 0x3b, 0x08, 0x01, 0x3c)         // a group, field 7
	return append(out, twice, unknown, wrongType, group, []byte{0x1a, 0x05, 0x01}, []byte{0x08}, []byte{0x00}, []byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
}

func sameEnvelope(t *testing.T, b []byte) {
	t.Helper()
	var want raftpb.Envelope
	wantErr := proto.Unmarshal(b, &want)
	got, err := parseEnvelope(b)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%x: parseEnvelope %v, proto.Unmarshal %v", b, err, wantErr)
	}
	if err != nil {
		return
	}
	if got.typ != want.GetType() || got.version != want.GetVersion() || got.ignorable != want.GetIgnorable() || !bytes.Equal(got.payload, want.GetPayload()) {
		t.Fatalf("%x: parseEnvelope %+v, proto.Unmarshal %v", b, got, &want)
	}
}

// slowNode opens a node on real files with slow timings.
func slowNode(t *testing.T, id string, bootstrap bool) *Node {
	t.Helper()
	cfg := testConfig(t.TempDir())
	cfg.NodeID, cfg.Bootstrap = id, bootstrap
	slowTimings(&cfg)
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// threeSlowNodes opens three slow nodes, node1 bootstrapped and leading;
// the others are not joined yet.
func threeSlowNodes(t *testing.T) []*Node {
	t.Helper()
	n1 := slowNode(t, "node1", true)
	waitFor(t, "node1 to lead", n1.IsLeader)
	return []*Node{n1, slowNode(t, "node2", false), slowNode(t, "node3", false)}
}
