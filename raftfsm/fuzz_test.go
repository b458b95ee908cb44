package raftfsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// Fuzz input for FuzzApply: a sequence of entries, each a uvarint length,
// a mode byte and a body. Mode < 0x80: the body is the raw entry. Otherwise
// the body is the payload of an envelope of type mode&7 and version 1, or
// version mode>>4 when mode&8 is set, so the fuzzer reaches every apply
// function without having to build envelopes itself.

func splitEntries(data []byte) [][]byte {
	var out [][]byte
	for len(data) > 0 {
		n, k := binary.Uvarint(data)
		if k <= 0 || n >= uint64(len(data)-k) {
			out = append(out, data)
			break
		}
		data = data[k:]
		mode, body := data[0], data[1:1+n]
		data = data[1+n:]
		if mode < 0x80 {
			out = append(out, body)
			continue
		}
		version := uint32(CommandVersion)
		if mode&8 != 0 {
			version = uint32(mode >> 4)
		}
		e, err := proto.Marshal(&raftpb.Envelope{Type: raftpb.CommandType(mode & 7), Version: version, Payload: body})
		if err != nil {
			panic(err)
		}
		out = append(out, e)
	}
	return out
}

func joinEntries(entries [][]byte, wrap bool) []byte {
	var out []byte
	for _, e := range entries {
		mode := byte(0)
		if wrap {
			var env raftpb.Envelope
			if proto.Unmarshal(e, &env) == nil && env.GetVersion() == CommandVersion {
				mode, e = 0x80|byte(env.GetType()&7), env.GetPayload()
			}
		}
		out = binary.AppendUvarint(out, uint64(len(e)))
		out = append(out, mode)
		out = append(out, e...)
	}
	return out
}

// Applying any sequence of entries never panics, gives the same results
// and the same state on two FSMs, and that state survives a snapshot and
// restore byte for byte.
func FuzzApply(f *testing.F) {
	for seed := range uint64(6) {
		g := newEntryGen(f, seed)
		entries := g.entries(12)
		f.Add(joinEntries(entries, seed%2 == 1))
	}
	var bad [][]byte
	for _, e := range badCommands(f) {
		bad = append(bad, e)
	}
	f.Add(joinEntries(bad, false))
	// A raised log format and a compressed batch, whole and wrapped.
	var buf []byte
	compressed := [][]byte{mustCommand(f, raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT, &raftpb.LogFormat{Format: LogFormat}), compressEntry(commitBatch(f, 40), &buf)}
	f.Add(joinEntries(compressed, false))
	f.Add(joinEntries(compressed, true))
	// Topics grown once the format allows it, refused before.
	grown := [][]byte{topicCreateCmd(f, "t", 2), topicGrowCmd(f, "t", nil, 3),
		mustCommand(f, raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT, &raftpb.LogFormat{Format: LogFormatTopicGrow}),
		topicGrowCmd(f, "t", topicID("t"), 5), topicGrowCmd(f, "t", nil, 4), topicDeleteCmd(f, "t"), topicGrowCmd(f, "t", nil, 6)}
	f.Add(joinEntries(grown, false))
	// A consumer group's records, once the format allows them.
	f.Add(joinEntries(consumerEntries(f, 1, 12), false))
	f.Add(joinEntries(consumerEntries(f, 2, 12), true))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := NewFSM(catalog.New(), quiet), NewFSM(catalog.New(), quiet)
		for i, e := range splitEntries(data) {
			ra, rb := applyAt(a, uint64(i+1), e), applyAt(b, uint64(i+1), e)
			if !sameResult(ra, rb) {
				t.Fatalf("entry %d: %v %v on one FSM, %v %v on the other", i+1, ra.Err, ra.Errs, rb.Err, rb.Errs)
			}
		}
		if a.Hash() != b.Hash() {
			t.Fatal("same entries, different hashes")
		}
		if (a.HaltErr() == nil) != (b.HaltErr() == nil) {
			t.Fatalf("one FSM halted (%v), the other not (%v)", a.HaltErr(), b.HaltErr())
		}
		if a.HaltErr() != nil {
			if _, err := a.Snapshot(); !errors.Is(err, ErrHalted) {
				t.Fatalf("a halted FSM took a snapshot: %v", err)
			}
			return
		}
		requireSame(t, "restored", a, restored(t, encoded(t, a)))
	})
}

// Restoring arbitrary bytes never panics; when it succeeds, the state it
// gives encodes to a snapshot that restores to the same bytes.
func FuzzRestore(f *testing.F) {
	for seed := range uint64(3) {
		src := NewFSM(catalog.New(), quiet)
		for i, e := range newEntryGen(f, seed).entries(40) {
			applyAt(src, uint64(i+1), e)
		}
		f.Add(encoded(f, src))
	}
	consumer := NewFSM(catalog.New(), quiet)
	for i, e := range consumerEntries(f, 3, 30) {
		applyAt(consumer, uint64(i+1), e)
	}
	f.Add(encoded(f, consumer))
	f.Add([]byte{0x00})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, data []byte) {
		fsm := NewFSM(catalog.New(), quiet)
		if err := fsm.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			return
		}
		snap := encoded(t, fsm)
		back := restored(t, snap)
		requireSame(t, "restored again", fsm, back)
		if again := encoded(t, back); !bytes.Equal(again, snap) {
			t.Fatal("snapshot of a restored snapshot differs")
		}
	})
}
