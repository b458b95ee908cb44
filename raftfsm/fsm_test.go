package raftfsm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// badCommands are entries this version must refuse. Each would change the
// state if it were applied as a group write. Those of unknown types and
// versions are marked ignorable, so refusing them does not halt the FSM
// (halt_test.go covers entries without the flag).
func badCommands(t testing.TB) map[string][]byte {
	payload, err := proto.Marshal(&raftpb.GroupWrites{Writes: []*raftpb.GroupWrite{writeOf("x", nil, groupRecord("x", 1, "m1"))}})
	if err != nil {
		t.Fatal(err)
	}
	env := func(typ raftpb.CommandType, version uint32, payload []byte) []byte {
		b, err := proto.Marshal(&raftpb.Envelope{Type: typ, Version: version, Payload: payload, Ignorable: true})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return map[string][]byte{
		"not an envelope":        {0xff, 0xff, 0xff, 0xff},
		"empty entry":            {},
		"unspecified type":       env(raftpb.CommandType_COMMAND_TYPE_UNSPECIFIED, CommandVersion, payload),
		"unknown type":           env(raftpb.CommandType(99), CommandVersion, payload),
		"version 0":              env(raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, 0, payload),
		"newer version":          env(raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, CommandVersion+1, payload),
		"bad group writes":       env(raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, CommandVersion, []byte{0x0a, 0x05, 0x01}),
		"bad topic create":       env(raftpb.CommandType_COMMAND_TYPE_TOPIC_CREATE, CommandVersion, []byte{0xff}),
		"bad topic delete":       env(raftpb.CommandType_COMMAND_TYPE_TOPIC_DELETE, CommandVersion, []byte{0xff}),
		"bad topic grow":         env(raftpb.CommandType_COMMAND_TYPE_TOPIC_GROW, CommandVersion, []byte{0xff}),
		"bad node register":      env(raftpb.CommandType_COMMAND_TYPE_NODE_REGISTER, CommandVersion, []byte{0xff}),
		"node register, no id":   env(raftpb.CommandType_COMMAND_TYPE_NODE_REGISTER, CommandVersion, nil),
		"bad node remove":        env(raftpb.CommandType_COMMAND_TYPE_NODE_REMOVE, CommandVersion, []byte{0xff}),
		"group writes, version2": env(raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, 2, payload),
	}
}

// entryGen generates a stream of log entries over a small key space so
// that writes overwrite, tombstone and fence each other.
type entryGen struct {
	t    testing.TB
	r    *rand.Rand
	gens map[string]int32
}

func newEntryGen(t testing.TB, seed uint64) *entryGen {
	return &entryGen{t: t, r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), gens: map[string]int32{}}
}

func (g *entryGen) pick(prefix string, n int) string { return fmt.Sprintf("%s%d", prefix, g.r.IntN(n)) }

func (g *entryGen) write() *raftpb.GroupWrite {
	id := g.pick("g", 30)
	var fence *pb.WriteFence
	if g.r.IntN(3) == 0 {
		// Matches when m0 is still a member of the current generation.
		fence = &pb.WriteFence{Generation: g.gens[id] - int32(g.r.IntN(2)), MemberId: g.pick("m", 3)}
	}
	var recs []*pb.Record
	switch n := g.r.IntN(100); {
	case n < 30:
		g.gens[id]++
		var members []string
		for i := range g.r.IntN(4) {
			members = append(members, fmt.Sprintf("m%d", i))
		}
		recs = append(recs, groupRecord(id, g.gens[id], members...))
	case n < 75:
		for range 1 + g.r.IntN(4) {
			recs = append(recs, offsetRecord(id, g.pick("t", 3), int32(g.r.IntN(4)), g.r.Int64N(1<<40)))
		}
	case n < 80:
		ms := &pb.MemberSessions{GroupId: id}
		for i := range g.r.IntN(3) {
			ms.Members = append(ms.Members, &pb.SilentMember{MemberId: fmt.Sprintf("m%d", i), SessionEndMs: g.r.Int64N(1 << 40), GraceEndMs: g.r.Int64N(2) << 39})
		}
		recs = append(recs, &pb.Record{Kind: &pb.Record_MemberSessions{MemberSessions: ms}})
	case n < 85:
		recs = append(recs, groupTombstone(id))
	default:
		recs = append(recs, offsetTombstone(id, g.pick("t", 3), int32(g.r.IntN(4))))
	}
	return writeOf(id, fence, recs...)
}

// entry returns the bytes of one log entry.
func (g *entryGen) entry() []byte {
	switch n := g.r.IntN(100); {
	case n < 70:
		var ws []*raftpb.GroupWrite
		for range 1 + g.r.IntN(5) {
			ws = append(ws, g.write())
		}
		return writesCmd(g.t, ws...)
	case n < 78:
		return topicCreateCmd(g.t, g.pick("topic", 6), int32(g.r.IntN(5)))
	case n < 84:
		return topicDeleteCmd(g.t, g.pick("topic", 6))
	case n < 90:
		return nodeRegisterCmd(g.t, g.pick("node", 4))
	case n < 94:
		return nodeRemoveCmd(g.t, g.pick("node", 4))
	default:
		bad := badCommands(g.t)
		keys := make([]string, 0, len(bad))
		for k := range bad {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return bad[keys[g.r.IntN(len(keys))]]
	}
}

func (g *entryGen) entries(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = g.entry()
	}
	return out
}

func sameResult(a, b *ApplyResult) bool {
	if errString(a.Err) != errString(b.Err) || len(a.Errs) != len(b.Errs) {
		return false
	}
	for i := range a.Errs {
		if errString(a.Errs[i]) != errString(b.Errs[i]) {
			return false
		}
	}
	return true
}

func restored(t testing.TB, snap []byte) *FSM {
	t.Helper()
	f := NewFSM(catalog.New(), quiet)
	if err := f.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatalf("restore: %v", err)
	}
	return f
}

// requireSame compares two FSMs through their encoded bytes, hashes and
// read paths.
func requireSame(t testing.TB, what string, a, b *FSM) {
	t.Helper()
	ea, eb := encoded(t, a), encoded(t, b)
	if !bytes.Equal(ea, eb) {
		t.Fatalf("%s: encoded states differ (%d and %d bytes)", what, len(ea), len(eb))
	}
	if a.Hash() != b.Hash() {
		t.Fatalf("%s: hashes differ", what)
	}
	ga, _ := a.Groups()
	gb, _ := b.Groups()
	if !slices.Equal(ga, gb) {
		t.Fatalf("%s: groups %v and %v", what, ga, gb)
	}
	for _, id := range ga {
		ra, oa, _ := a.Load(id)
		rb, ob, _ := b.Load(id)
		if !proto.Equal(ra, rb) || !slices.EqualFunc(oa, ob, func(x, y *pb.OffsetRecord) bool { return proto.Equal(x, y) }) {
			t.Fatalf("%s: group %s differs", what, id)
		}
	}
	if !slices.Equal(a.catalog.List(), b.catalog.List()) {
		t.Fatalf("%s: topics %v and %v", what, a.catalog.List(), b.catalog.List())
	}
	if !slices.EqualFunc(a.Nodes(), b.Nodes(), func(x, y *raftpb.NodeRegister) bool { return proto.Equal(x, y) }) {
		t.Fatalf("%s: nodes differ", what)
	}
}

// snapshotRecords decodes a snapshot into its records.
func snapshotRecords(t testing.TB, snap []byte) []*raftpb.SnapshotRecord {
	t.Helper()
	var out []*raftpb.SnapshotRecord
	r := bytes.NewReader(snap)
	for r.Len() > 0 {
		var rec raftpb.SnapshotRecord
		if err := protodelim.UnmarshalFrom(r, &rec); err != nil {
			t.Fatal(err)
		}
		out = append(out, &rec)
	}
	return out
}

// A state built by thousands of entries, snapshotted and restored into a
// fresh FSM, is byte for byte the live state, and stays so while both apply
// the same further entries. Replaying the whole log from empty gives the
// same bytes too.
func TestSnapshotRestoreExact(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			g := newEntryGen(t, seed)
			log := g.entries(3000)
			live := NewFSM(catalog.New(), quiet)
			var refused, fenced int
			for i, e := range log {
				res := applyAt(live, uint64(i+1), e)
				if res.Err != nil {
					refused++
				}
				for _, err := range res.Errs {
					if errors.Is(err, coordinator.ErrStoreFenced) {
						fenced++
					}
				}
			}
			groups, _ := live.Groups()
			if refused == 0 || fenced == 0 || len(groups) == 0 || len(live.catalog.List()) == 0 || len(live.Nodes()) == 0 {
				t.Fatalf("weak workload: %d refused, %d fenced, %d groups, %d topics, %d nodes",
					refused, fenced, len(groups), len(live.catalog.List()), len(live.Nodes()))
			}

			snap := encoded(t, live)
			// Compact: one record per live node, topic, group record and
			// offset; nothing for overwritten or tombstoned data.
			var want int
			want += len(live.Nodes()) + len(live.catalog.List())
			for _, id := range groups {
				rec, offsets, _ := live.Load(id)
				if rec != nil {
					want++
				}
				if live.Sessions(id) != nil {
					want++
				}
				want += len(offsets)
			}
			if got := len(snapshotRecords(t, snap)); got != want {
				t.Fatalf("snapshot holds %d records, the state %d", got, want)
			}

			back := restored(t, snap)
			requireSame(t, "restored", live, back)
			replay := NewFSM(catalog.New(), quiet)
			for i, e := range log {
				applyAt(replay, uint64(i+1), e)
			}
			requireSame(t, "replayed", live, replay)

			for i, e := range g.entries(1000) {
				idx := uint64(len(log) + i + 1)
				a, b := applyAt(live, idx, e), applyAt(back, idx, e)
				if !sameResult(a, b) {
					t.Fatalf("entry %d: live %v %v, restored %v %v", idx, a.Err, a.Errs, b.Err, b.Errs)
				}
				if i%100 == 99 {
					requireSame(t, fmt.Sprint("after entry ", idx), live, back)
				}
			}
			requireSame(t, "after the tail", live, back)
		})
	}
}

// Overwriting the same keys does not grow the snapshot, and deleting
// everything leaves it empty.
func TestSnapshotCompact(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	var idx uint64
	next := func(data []byte) *ApplyResult { idx++; return applyAt(f, idx, data) }
	for i := range 50 {
		g := fmt.Sprint("g", i)
		next(writesCmd(t, writeOf(g, nil, groupRecord(g, 1, "m1", "m2"), offsetRecord(g, "t", 0, 1000), offsetRecord(g, "t", 1, 1000))))
	}
	size := len(encoded(t, f))
	for round := range 100 {
		var ws []*raftpb.GroupWrite
		for i := range 50 {
			g := fmt.Sprint("g", i)
			// Same-size values: offsets 1000..1099 and generation 1.
			ws = append(ws, writeOf(g, &pb.WriteFence{Generation: 1, MemberId: "m2"}, groupRecord(g, 1, "m1", "m2"),
				offsetRecord(g, "t", 0, 1000+int64(round)), offsetRecord(g, "t", 1, 1000+int64(round))))
		}
		if res := next(writesCmd(t, ws...)); slices.ContainsFunc(res.Errs, func(e error) bool { return e != nil }) {
			t.Fatalf("round %d: %v", round, res.Errs)
		}
	}
	if got := len(encoded(t, f)); got != size {
		t.Fatalf("snapshot grew from %d to %d bytes after overwrites", size, got)
	}
	for i := range 50 {
		g := fmt.Sprint("g", i)
		next(writesCmd(t, writeOf(g, nil, groupTombstone(g), offsetTombstone(g, "t", 0), offsetTombstone(g, "t", 1))))
	}
	if got := encoded(t, f); len(got) != 0 {
		t.Fatalf("snapshot of an emptied state holds %d bytes", len(got))
	}
	if groups, _ := f.Groups(); len(groups) != 0 {
		t.Fatalf("groups left after tombstones: %v", groups)
	}
}

// Tombstones remove a group only once both its record and its offsets are
// gone; a group with offsets only has no record.
func TestTombstones(t *testing.T) {
	s := NewState()
	must := func(w *raftpb.GroupWrite) {
		t.Helper()
		if err := s.ApplyWrite(w); err != nil {
			t.Fatal(err)
		}
	}
	must(writeOf("g", nil, groupRecord("g", 1, "m1"), offsetRecord("g", "t", 0, 5)))
	must(writeOf("g", nil, groupTombstone("g")))
	rec, offsets := s.Load("g")
	if rec != nil || len(offsets) != 1 || !slices.Equal(s.Groups(), []string{"g"}) {
		t.Fatalf("after group tombstone: %v %v %v", rec, offsets, s.Groups())
	}
	must(writeOf("g", nil, offsetTombstone("g", "t", 0)))
	if len(s.Groups()) != 0 {
		t.Fatalf("after offset tombstone: %v", s.Groups())
	}
	// Tombstones of unknown groups and offsets are no-ops.
	must(writeOf("h", nil, groupTombstone("h"), offsetTombstone("h", "t", 0)))
	if len(s.Groups()) != 0 {
		t.Fatalf("tombstones created a group: %v", s.Groups())
	}
	// A fenced group record write is refused as a whole.
	must(writeOf("g", nil, groupRecord("g", 3, "m1")))
	err := s.ApplyWrite(writeOf("g", &pb.WriteFence{Generation: 2, MemberId: "m1"}, offsetRecord("g", "t", 0, 9), groupTombstone("g")))
	if !errors.Is(err, coordinator.ErrStoreFenced) {
		t.Fatalf("stale fence: %v", err)
	}
	if rec, offsets := s.Load("g"); rec.GetGeneration() != 3 || len(offsets) != 0 {
		t.Fatalf("a fenced write was partly applied: %v %v", rec, offsets)
	}
}

// Entries this version cannot apply are refused with ErrBadCommand, with
// the same error on every FSM, and leave the state as it was.
func TestApplyRefusesBadCommands(t *testing.T) {
	a, b := NewFSM(catalog.New(), quiet), NewFSM(catalog.New(), quiet)
	for i, e := range newEntryGen(t, 7).entries(200) {
		applyAt(a, uint64(i+1), e)
		applyAt(b, uint64(i+1), e)
	}
	before := a.Hash()
	idx := uint64(1000)
	for name, data := range badCommands(t) {
		idx++
		ra, rb := applyAt(a, idx, data), applyAt(b, idx, data)
		if !errors.Is(ra.Err, ErrBadCommand) || len(ra.Errs) != 0 {
			t.Errorf("%s: %v %v, want ErrBadCommand", name, ra.Err, ra.Errs)
		}
		if !sameResult(ra, rb) {
			t.Errorf("%s: %v on one FSM, %v on the other", name, ra.Err, rb.Err)
		}
		if a.Hash() != before || b.Hash() != before {
			t.Errorf("%s changed the state", name)
		}
	}
	if rec, _, _ := a.Load("x"); rec != nil {
		t.Fatal("a refused entry wrote group x")
	}
}

// A snapshot that cannot be decoded is refused with an error naming the
// restore, and the FSM keeps its state.
func TestRestoreCorruptSnapshot(t *testing.T) {
	src := NewFSM(catalog.New(), quiet)
	for i, e := range newEntryGen(t, 3).entries(300) {
		applyAt(src, uint64(i+1), e)
	}
	good := encoded(t, src)
	if len(good) < 100 {
		t.Fatalf("snapshot of %d bytes is too small to corrupt", len(good))
	}
	unknownKind := protowire.AppendTag(nil, 9, protowire.BytesType)
	unknownKind = protowire.AppendBytes(unknownKind, []byte("future"))
	cases := map[string][]byte{
		"truncated record":   good[:len(good)-3],
		"garbage":            bytes.Repeat([]byte{0xff}, 16),
		"huge length":        protowire.AppendVarint(nil, 1<<62),
		"record of no kind":  protowire.AppendBytes(nil, nil),
		"unknown kind":       append(slices.Clone(good), protowire.AppendBytes(nil, unknownKind)...),
		"bad record payload": append(slices.Clone(good), protowire.AppendBytes(nil, []byte{0x0a, 0x7f})...),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			f := NewFSM(catalog.New(), quiet)
			applyAt(f, 1, writesCmd(t, writeOf("keep", nil, groupRecord("keep", 1, "m1"))))
			applyAt(f, 2, topicCreateCmd(t, "kept", 1))
			before := f.Hash()
			err := f.Restore(io.NopCloser(bytes.NewReader(data)))
			if err == nil {
				t.Fatal("restore accepted a corrupt snapshot")
			}
			if !strings.Contains(err.Error(), "raftfsm: restore") {
				t.Fatalf("restore error %q does not say what failed", err)
			}
			if f.Hash() != before {
				t.Fatal("a failed restore changed the state")
			}
		})
	}
}

// Restore closes the reader raft hands it, whether it succeeds or fails.
func TestRestoreClosesReader(t *testing.T) {
	for _, data := range [][]byte{nil, {0xff}} {
		rc := &closeCounter{Reader: bytes.NewReader(data)}
		_ = NewFSM(catalog.New(), quiet).Restore(rc)
		if rc.closed != 1 {
			t.Fatalf("reader closed %d times", rc.closed)
		}
	}
}

type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }

// A group record bigger than a protobuf default message limit, accepted in
// the log, must also survive a snapshot.
func TestSnapshotLargeGroupRecord(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	rec := groupRecord("big", 1)
	for i := range 600 {
		m := member(fmt.Sprint("member-", i))
		m.Assignment = bytes.Repeat([]byte{byte(i)}, 8<<10)
		rec.GetGroup().Members = append(rec.GetGroup().Members, m)
	}
	if res := applyAt(f, 1, writesCmd(t, writeOf("big", nil, rec))); res.Err != nil || res.Errs[0] != nil {
		t.Fatal(res.Err, res.Errs)
	}
	snap := encoded(t, f)
	if len(snap) <= 4<<20 {
		t.Fatalf("snapshot of %d bytes does not exceed 4 MiB", len(snap))
	}
	requireSame(t, "restored", f, restored(t, snap))
}

// Persist writes the snapshot to the sink and closes it.
func TestSnapshotPersist(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	applyAt(f, 1, writesCmd(t, writeOf("g", nil, groupRecord("g", 1, "m1"))))
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Later entries do not leak into a snapshot already taken.
	applyAt(f, 2, writesCmd(t, writeOf("h", nil, groupRecord("h", 1, "m1"))))
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	if !sink.closed || sink.canceled {
		t.Fatalf("sink closed %v canceled %v", sink.closed, sink.canceled)
	}
	back := restored(t, sink.Bytes())
	if groups, _ := back.Groups(); !slices.Equal(groups, []string{"g"}) {
		t.Fatalf("snapshot holds groups %v, want [g]", groups)
	}
	var _ raft.FSMSnapshot = snap
}

// Raft failures map to the coordinator's store errors; a lost leadership
// or a timeout is never a success.
func TestStoreError(t *testing.T) {
	cases := []struct {
		err  error
		want error
	}{
		{raft.ErrNotLeader, coordinator.ErrStoreNotLeader},
		{raft.ErrLeadershipTransferInProgress, coordinator.ErrStoreNotLeader},
		{raft.ErrRaftShutdown, coordinator.ErrStoreNotLeader},
		{raft.ErrLeadershipLost, coordinator.ErrStoreTimeout},
		{raft.ErrEnqueueTimeout, coordinator.ErrStoreTimeout},
		{fmt.Errorf("%w: x", ErrBadCommand), coordinator.ErrStoreUnavailable},
		{errors.New("disk full"), coordinator.ErrStoreUnavailable},
	}
	for _, tc := range cases {
		if got := storeError(tc.err); !errors.Is(got, tc.want) {
			t.Errorf("storeError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A stored group record is written to snapshots as the bytes encoding the
// SnapshotRecord that holds it would give, so hashes and snapshots match
// those of a state that keeps decoded records.
func TestStoredGroupSnapshotEncoding(t *testing.T) {
	rec := groupRecord("g", 3, "m2", "m1", "").GetGroup()
	rec.Members = append(rec.Members, &pb.MemberRecord{MemberId: strings.Repeat("x", 300), Assignment: make([]byte, 200)})
	sg := newStoredGroup(rec)
	if sg.generation != 3 || !sg.hasMember("m1") || !sg.hasMember("m2") || !sg.hasMember("") || sg.hasMember("m3") || !sg.hasMember(strings.Repeat("x", 300)) {
		t.Fatalf("stored group: generation %d members %q", sg.generation, sg.members)
	}
	var got, want bytes.Buffer
	if err := writeRecord(&got, snapRecord{group: sg.data}); err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(&want, snapRecord{msg: &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_Group{Group: rec}}}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("snapshot record\n got %x\nwant %x", got.Bytes(), want.Bytes())
	}
	if back := sg.decode(); !proto.Equal(back, rec) {
		t.Fatalf("decoded %v, want %v", back, rec)
	}
}

// The leader applies its own entries from the messages it encoded them
// from; the state is the one decoding the entry gives (what followers do),
// and the registration is gone once applied.
func TestOwnEntriesApplyAsDecoded(t *testing.T) {
	ws := &raftpb.GroupWrites{Writes: []*raftpb.GroupWrite{
		writeOf("g", nil, groupRecord("g", 2, "m1", "m2")),
		writeOf("g", &pb.WriteFence{Generation: 2, MemberId: "m1"}, offsetRecord("g", "t", 0, 7)),
		writeOf("g", &pb.WriteFence{Generation: 1, MemberId: "m1"}, offsetRecord("g", "t", 1, 9)),
	}}
	data, err := encodeCommand(raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, ws)
	if err != nil {
		t.Fatal(err)
	}
	own, decoded := NewFSM(catalog.New(), quiet), NewFSM(catalog.New(), quiet)
	own.proposed(data, ws)
	r1 := own.Apply(&raft.Log{Index: 1, Data: data}).(*ApplyResult)
	r2 := decoded.Apply(&raft.Log{Index: 1, Data: slices.Clone(data)}).(*ApplyResult)
	if own.Hash() != decoded.Hash() {
		t.Fatal("own entry applied to another state than its decoding")
	}
	if len(r1.Errs) != 3 || r1.Errs[0] != nil || r1.Errs[1] != nil || !errors.Is(r1.Errs[2], coordinator.ErrStoreFenced) || !errors.Is(r2.Errs[2], coordinator.ErrStoreFenced) {
		t.Fatalf("results %v and %v", r1.Errs, r2.Errs)
	}
	if own.own.pending() != 0 {
		t.Fatal("applied entry still registered")
	}
	if rec, offs, _ := own.Load("g"); rec.GetGeneration() != 2 || len(offs) != 1 || offs[0].GetOffset() != 7 {
		t.Fatalf("loaded %v %v", rec, offs)
	}
}

// An entry is applied from the proposal whose bytes it holds, wherever
// those bytes are, and from no proposal once that was forgotten.
func TestOwnEntriesByTheirBytes(t *testing.T) {
	entry := func(offset int64) ([]byte, *raftpb.GroupWrites) {
		ws := &raftpb.GroupWrites{Writes: []*raftpb.GroupWrite{writeOf("g", nil, offsetRecord("g", "t", int32(offset), offset))}}
		data, err := encodeCommand(raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, ws)
		if err != nil {
			t.Fatal(err)
		}
		return data, ws
	}
	f := NewFSM(catalog.New(), quiet)
	data1, ws1 := entry(1)
	data2, ws2 := entry(2)
	seq1 := f.proposed(data1, ws1)
	f.proposed(data2, ws2)
	f.forget(seq1)
	f.Apply(&raft.Log{Index: 1, Data: slices.Clone(data1)})
	f.Apply(&raft.Log{Index: 2, Data: slices.Clone(data2)})
	// The state keeps the applied offset records themselves.
	offsets := f.state.groups["g"].offsets
	if offsets[offsetKey{"t", 1}] == ws1.GetWrites()[0].GetRecords()[0].GetOffset() {
		t.Error("an entry was applied from a forgotten proposal")
	}
	if offsets[offsetKey{"t", 2}] != ws2.GetWrites()[0].GetRecords()[0].GetOffset() {
		t.Error("an entry holding a proposal's bytes was decoded again")
	}
	if n := f.own.pending(); n != 0 {
		t.Errorf("%d proposals left", n)
	}
}
