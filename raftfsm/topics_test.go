package raftfsm

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cohort-coord/cohort/catalog"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

func topicGrowCmd(t testing.TB, name string, id []byte, partitions int32) []byte {
	return mustCommand(t, raftpb.CommandType_COMMAND_TYPE_TOPIC_GROW, &raftpb.TopicGrow{Name: name, Id: id, Partitions: partitions})
}

// topicID is the id topicCreateCmd gives a topic.
func topicID(name string) []byte {
	id := make([]byte, 16)
	copy(id, name)
	id[15] = 1
	return id
}

// A TOPIC_GROW entry raises a topic's partition count from log format 5 on
// and keeps its id; every refusal (Kafka's rules, a topic recreated under
// another id, a format below 5) is the same on every replica and changes
// nothing. The grown count survives a snapshot and a replay.
func TestTopicGrowApplies(t *testing.T) {
	formatCmd := func(v uint32) []byte {
		return mustCommand(t, raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT, &raftpb.LogFormat{Format: v})
	}
	log := [][]byte{topicCreateCmd(t, "orders", 3)}
	// Below format 5 a grow is refused as the leader refuses to write it.
	for _, format := range []uint32{0, LogFormatCompressed, LogFormatConsumer} {
		f := NewFSM(catalog.New(), quiet)
		var entries [][]byte
		if format > 0 {
			entries = append(entries, formatCmd(format))
		}
		for i, e := range append(entries, log...) {
			if res := applyAt(f, uint64(i+1), e); res.Err != nil {
				t.Fatal(res.Err)
			}
		}
		before, version := f.Hash(), f.catalog.Version()
		res := applyAt(f, 10, topicGrowCmd(t, "orders", nil, 6))
		if !errors.Is(res.Err, ErrLogFormatTooLow) || !errors.Is(res.Err, catalog.ErrUnsupported) {
			t.Fatalf("format %d: grow applied as %v", format, res.Err)
		}
		if f.Hash() != before || f.catalog.Version() != version || f.HaltErr() != nil {
			t.Fatalf("format %d: a refused grow changed the state (halted: %v)", format, f.HaltErr())
		}
	}

	log = append([][]byte{formatCmd(LogFormatTopicGrow)}, log...)
	refusals := []struct {
		entry []byte
		want  error
	}{
		{topicGrowCmd(t, "orders", nil, 3), catalog.ErrInvalidPartitions},
		{topicGrowCmd(t, "orders", nil, 2), catalog.ErrInvalidPartitions},
		{topicGrowCmd(t, "orders", nil, catalog.MaxPartitions+1), catalog.ErrInvalidPartitions},
		{topicGrowCmd(t, "nope", nil, 4), catalog.ErrUnknownTopic},
		{topicGrowCmd(t, "orders", topicID("other"), 4), catalog.ErrUnknownTopic},
	}
	a, b := NewFSM(catalog.New(), quiet), NewFSM(catalog.New(), quiet)
	for i, e := range log {
		applyAt(a, uint64(i+1), e)
		applyAt(b, uint64(i+1), e)
	}
	idx := uint64(len(log))
	for i, r := range refusals {
		idx++
		before := a.Hash()
		ra, rb := applyAt(a, idx, r.entry), applyAt(b, idx, r.entry)
		if !errors.Is(ra.Err, r.want) || !sameResult(ra, rb) || a.Hash() != before {
			t.Fatalf("refusal %d: %v on one FSM, %v on the other (state changed: %v)", i, ra.Err, rb.Err, a.Hash() != before)
		}
	}
	bad := marshal(t, &raftpb.Envelope{Type: raftpb.CommandType_COMMAND_TYPE_TOPIC_GROW, Version: CommandVersion, Payload: []byte{0xff}})
	if res := applyAt(a, 100, bad); !errors.Is(res.Err, ErrBadCommand) || a.HaltErr() != nil {
		t.Fatalf("undecodable grow: %v", res.Err)
	}
	version := a.catalog.Version()
	grow := topicGrowCmd(t, "orders", topicID("orders"), 8)
	for _, f := range []*FSM{a, b} {
		if res := applyAt(f, 101, grow); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	got, ok := a.catalog.Get("orders")
	if !ok || got.Partitions != 8 || !bytes.Equal(got.ID[:], topicID("orders")) || a.catalog.Version() != version+1 {
		t.Fatalf("grown topic %+v, catalog version %d -> %d", got, version, a.catalog.Version())
	}
	requireSame(t, "two replicas", a, b)
	back := restored(t, encoded(t, a))
	requireSame(t, "restored", a, back)
	if r, _ := back.catalog.Get("orders"); r != got {
		t.Fatalf("restored %+v, want %+v", r, got)
	}
	replay := NewFSM(catalog.New(), quiet)
	for i, e := range append(append(log, refusals[0].entry), grow) {
		applyAt(replay, uint64(i+1), e)
	}
	requireSame(t, "replayed", a, replay)
}

// The leader writes no TOPIC_GROW entry while the cluster's format is
// below 5 (a node of the version before would halt on it): the grow is
// refused with catalog.ErrUnsupported. Once every voter applies format 5
// the format rises and the grow is applied.
func TestTopicGrowWaitsForTheFormat(t *testing.T) {
	cfg := testConfig(t.TempDir())
	n, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	waitFor(t, "node1 to lead", n.IsLeader)
	ctx := context.Background()
	// The version before raised the cluster to format 4.
	if err := n.apply(ctx, raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT, &raftpb.LogFormat{Format: LogFormatConsumer}); err != nil {
		t.Fatal(err)
	}
	if err := n.Register(ctx, &raftpb.NodeRegister{NodeId: "node1", RaftAddr: n.Addr(), LogFormat: LogFormatConsumer}); err != nil {
		t.Fatal(err)
	}
	id := catalog.NewTopicID()
	if err := n.ProposeTopic(ctx, catalog.CreateTopic{Name: "orders", ID: id, Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	err = n.ProposeTopic(ctx, catalog.GrowTopic{Name: "orders", ID: id, Partitions: 6})
	if !errors.Is(err, catalog.ErrUnsupported) || !errors.Is(err, ErrLogFormatTooLow) || n.FSM.LogFormat() != LogFormatConsumer {
		t.Fatalf("grow at format %d: %v", n.FSM.LogFormat(), err)
	}
	if slices.Contains(entryTypes(t, n), raftpb.CommandType_COMMAND_TYPE_TOPIC_GROW) {
		t.Fatal("a TOPIC_GROW entry was written at format 4")
	}
	if err := n.Register(ctx, &raftpb.NodeRegister{NodeId: "node1", RaftAddr: n.Addr(), LogFormat: LogFormat}); err != nil {
		t.Fatal(err)
	}
	if n.FSM.LogFormat() != LogFormatTopicGrow {
		t.Fatalf("format %d after every voter registered %d", n.FSM.LogFormat(), LogFormat)
	}
	if err := n.ProposeTopic(ctx, catalog.GrowTopic{Name: "orders", ID: id, Partitions: 6}); err != nil {
		t.Fatal(err)
	}
	if got, _ := n.Catalog.Get("orders"); got.Partitions != 6 || got.ID != id {
		t.Fatalf("grown topic %+v", got)
	}
	if err := n.ProposeTopic(ctx, catalog.GrowTopic{Name: "orders", ID: id, Partitions: 6}); !errors.Is(err, catalog.ErrInvalidPartitions) {
		t.Fatalf("growing to the same count: %v", err)
	}
}
