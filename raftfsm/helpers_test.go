package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

var quiet = slog.New(slog.DiscardHandler)

// Record builders.

func member(id string) *pb.MemberRecord {
	return &pb.MemberRecord{MemberId: id, ClientId: "client-" + id, ClientHost: "/10.0.0.1", RebalanceTimeoutMs: 60000, SessionTimeoutMs: 45000,
		Subscription: []byte("sub-" + id), Assignment: []byte("asg-" + id)}
}

func groupRecord(id string, gen int32, members ...string) *pb.Record {
	g := &pb.GroupRecord{GroupId: id, ProtocolType: "consumer", Generation: gen, ProtocolName: proto.String("range"), StateTimestampMs: 1000 + int64(gen)}
	for _, m := range members {
		g.Members = append(g.Members, member(m))
	}
	if len(members) > 0 {
		g.Leader = proto.String(members[0])
	}
	return &pb.Record{Kind: &pb.Record_Group{Group: g}}
}

func offsetRecord(group, topic string, partition int32, offset int64) *pb.Record {
	return &pb.Record{Kind: &pb.Record_Offset{Offset: &pb.OffsetRecord{GroupId: group, Topic: topic, Partition: partition, Offset: offset,
		LeaderEpoch: 3, Metadata: "m", CommitTimestampMs: 2000 + offset, ExpireTimestampMs: -1}}}
}

func groupTombstone(group string) *pb.Record {
	return &pb.Record{Kind: &pb.Record_GroupTombstone{GroupTombstone: &pb.GroupTombstone{GroupId: group}}}
}

func offsetTombstone(group, topic string, partition int32) *pb.Record {
	return &pb.Record{Kind: &pb.Record_OffsetTombstone{OffsetTombstone: &pb.OffsetTombstone{GroupId: group, Topic: topic, Partition: partition}}}
}

// Command builders: the bytes of one log entry.

func mustCommand(t testing.TB, typ raftpb.CommandType, payload proto.Message) []byte {
	t.Helper()
	b, err := encodeCommand(typ, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writesCmd(t testing.TB, ws ...*raftpb.GroupWrite) []byte {
	return mustCommand(t, raftpb.CommandType_COMMAND_TYPE_GROUP_WRITES, &raftpb.GroupWrites{Writes: ws})
}

func writeOf(group string, fence *pb.WriteFence, recs ...*pb.Record) *raftpb.GroupWrite {
	return &raftpb.GroupWrite{GroupId: group, Records: recs, Fence: fence}
}

func topicCreateCmd(t testing.TB, name string, partitions int32) []byte {
	id := make([]byte, 16)
	copy(id, name)
	id[15] = 1
	return mustCommand(t, raftpb.CommandType_COMMAND_TYPE_TOPIC_CREATE, &raftpb.TopicCreate{Name: name, Id: id, Partitions: partitions})
}

func topicDeleteCmd(t testing.TB, name string) []byte {
	return mustCommand(t, raftpb.CommandType_COMMAND_TYPE_TOPIC_DELETE, &raftpb.TopicDelete{Name: name})
}

func nodeRegisterCmd(t testing.TB, id string) []byte {
	return mustCommand(t, raftpb.CommandType_COMMAND_TYPE_NODE_REGISTER, &raftpb.NodeRegister{NodeId: id, RaftAddr: id + ":7946", RemoteAddr: id + ":8090", KafkaAddr: id + ":9092"})
}

func nodeRemoveCmd(t testing.TB, id string) []byte {
	return mustCommand(t, raftpb.CommandType_COMMAND_TYPE_NODE_REMOVE, &raftpb.NodeRemove{NodeId: id})
}

// applyAt applies one entry at index to f, as raft would.
func applyAt(f *FSM, index uint64, data []byte) *ApplyResult {
	return f.Apply(&raft.Log{Index: index, Term: 1, Type: raft.LogCommand, Data: data}).(*ApplyResult)
}

// encoded returns the state's snapshot bytes.
func encoded(t testing.TB, f *FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	return sink.Bytes()
}

// memSink is a raft.SnapshotSink over a buffer.
type memSink struct {
	buf      []byte
	closed   bool
	canceled bool
}

func (s *memSink) Write(p []byte) (int, error) { s.buf = append(s.buf, p...); return len(p), nil }
func (s *memSink) Close() error                { s.closed = true; return nil }
func (s *memSink) ID() string                  { return "mem" }
func (s *memSink) Cancel() error               { s.canceled = true; return nil }
func (s *memSink) Bytes() []byte               { return s.buf }

// recFSM is an FSM that also records what each entry's Apply returned and
// how many snapshots were restored into it, so tests can compare replicas.
type recFSM struct {
	*FSM
	history  *history
	mu       sync.Mutex
	results  map[uint64]*ApplyResult
	restores int
}

func newRecFSM(h *history) *recFSM {
	return &recFSM{FSM: NewFSM(catalog.New(), quiet), history: h, results: map[uint64]*ApplyResult{}}
}

func (f *recFSM) Apply(l *raft.Log) any {
	res := f.FSM.Apply(l)
	f.history.record(l)
	f.mu.Lock()
	f.results[l.Index] = res.(*ApplyResult)
	f.mu.Unlock()
	return res
}

// history is every entry any FSM of a cluster applied, over restarts.
// Two FSMs applying different entries at one index is a safety violation.
type history struct {
	mu       sync.Mutex
	entries  map[uint64][]byte
	conflict string
}

func newHistory() *history { return &history{entries: map[uint64][]byte{}} }

func (h *history) record(l *raft.Log) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if prev, ok := h.entries[l.Index]; ok && !bytes.Equal(prev, l.Data) && h.conflict == "" {
		h.conflict = fmt.Sprintf("two different entries applied at index %d", l.Index)
	}
	h.entries[l.Index] = bytes.Clone(l.Data)
}

func (h *history) check(t testing.TB) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conflict != "" {
		t.Fatal(h.conflict)
	}
}

func (f *recFSM) Restore(rc io.ReadCloser) error {
	err := f.FSM.Restore(rc)
	if err == nil {
		f.mu.Lock()
		f.restores++
		f.mu.Unlock()
	}
	return err
}

func (f *recFSM) result(index uint64) (*ApplyResult, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.results[index]
	return r, ok
}

func (f *recFSM) restoreCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restores
}

// An in-memory cluster of real *raft.Raft instances.

type tnode struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	trans *raft.InmemTransport
	logs  *raft.InmemStore
	snaps *raft.InmemSnapshotStore
	fsm   *recFSM
	r     *raft.Raft
	down  bool
}

type cluster struct {
	t       testing.TB
	nodes   []*tnode
	tune    func(*raft.Config)
	history *history
}

// newCluster starts n voters over connected in-memory transports and
// bootstraps them; tune adjusts each node's raft configuration.
func newCluster(t testing.TB, n int, tune func(*raft.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, tune: tune, history: newHistory()}
	var servers []raft.Server
	for i := range n {
		id := raft.ServerID(fmt.Sprintf("node%d", i+1))
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(id))
		c.nodes = append(c.nodes, &tnode{id: id, addr: addr, trans: trans, logs: raft.NewInmemStore(), snaps: raft.NewInmemSnapshotStore(), fsm: newRecFSM(c.history)})
		servers = append(servers, raft.Server{ID: id, Address: addr})
	}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
	for _, nd := range c.nodes {
		c.start(nd)
		if err := nd.r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *cluster) start(nd *tnode) {
	conf := raft.DefaultConfig()
	conf.LocalID = nd.id
	conf.Logger = newHclog(quiet, "raft")
	if c.tune != nil {
		c.tune(conf)
	}
	r, err := raft.NewRaft(conf, nd.fsm, nd.logs, nd.logs, nd.snaps, nd.trans)
	if err != nil {
		c.t.Fatal(err)
	}
	nd.r = r
}

// restart starts a stopped node again over its log, stable and snapshot
// stores (what a process finds on disk), with a fresh FSM and transport.
func (c *cluster) restart(nd *tnode) {
	if !nd.down {
		return
	}
	_, nd.trans = raft.NewInmemTransport(nd.addr)
	nd.fsm = newRecFSM(c.history)
	c.start(nd)
	nd.down = false
	c.heal(nd)
}

// shutdown stops every node that is still running and closes transports.
func (c *cluster) shutdown() {
	for _, nd := range c.nodes {
		c.stop(nd)
	}
}

// stop shuts one node down and cuts it off, as a crashed process.
func (c *cluster) stop(nd *tnode) {
	if nd.down {
		return
	}
	nd.down = true
	if err := nd.r.Shutdown().Error(); err != nil {
		c.t.Errorf("shutdown %s: %v", nd.id, err)
	}
	c.isolate(nd)
}

// isolate cuts every link to and from nd.
func (c *cluster) isolate(nd *tnode) {
	for _, o := range c.nodes {
		if o != nd {
			nd.trans.Disconnect(o.addr)
			o.trans.Disconnect(nd.addr)
		}
	}
}

// heal restores every link between nd and the running nodes.
func (c *cluster) heal(nd *tnode) {
	for _, o := range c.nodes {
		if o != nd && !o.down {
			nd.trans.Connect(o.addr, o.trans)
			o.trans.Connect(nd.addr, nd.trans)
		}
	}
}

func (c *cluster) running() []*tnode {
	var out []*tnode
	for _, nd := range c.nodes {
		if !nd.down {
			out = append(out, nd)
		}
	}
	return out
}

const waitLimit = 60 * time.Second

// waitFor polls cond until it holds, failing the test after waitLimit.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// leader waits until one of among is leader and returns it.
func (c *cluster) leader(among ...*tnode) *tnode {
	c.t.Helper()
	if len(among) == 0 {
		among = c.running()
	}
	var l *tnode
	waitFor(c.t, "a leader", func() bool {
		for _, nd := range among {
			if nd.r.State() == raft.Leader {
				l = nd
				return true
			}
		}
		return false
	})
	return l
}

// converge waits until every node of among holds the state the leader
// has after a barrier, and returns its hash. (raft's AppliedIndex counts
// entries handed to the FSM, not applied by it, so the wait is on the FSM
// state itself.)
func (c *cluster) converge(l *tnode, among ...*tnode) string {
	c.t.Helper()
	if err := l.r.Barrier(waitLimit).Error(); err != nil {
		c.t.Fatalf("barrier on %s: %v", l.id, err)
	}
	c.history.check(c.t)
	want := l.fsm.Hash()
	deadline := time.Now().Add(waitLimit)
	for {
		var lag *tnode
		for _, nd := range among {
			if nd.fsm.Hash() != want {
				lag = nd
				break
			}
		}
		if lag == nil {
			return want
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %v, %s (applied index %d) has hash %s, leader %s (applied index %d) has %s",
				waitLimit, lag.id, lag.r.AppliedIndex(), lag.fsm.Hash(), l.id, l.r.AppliedIndex(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// apply proposes raw entry bytes on nd and returns the FSM's result.
func apply(t testing.TB, nd *tnode, data []byte) (*ApplyResult, uint64) {
	t.Helper()
	f := nd.r.Apply(data, 5*time.Second)
	if err := f.Error(); err != nil {
		t.Fatalf("apply on %s: %v", nd.id, err)
	}
	res, ok := f.Response().(*ApplyResult)
	if !ok {
		t.Fatalf("apply on %s: response %T", nd.id, f.Response())
	}
	return res, f.Index()
}

// appendWait writes through s and waits for the outcome.
func appendWait(t testing.TB, s *Store, group string, fence *pb.WriteFence, recs ...*pb.Record) error {
	t.Helper()
	ch := make(chan error, 1)
	s.Append(group, recs, fence, func(err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-time.After(waitLimit):
		t.Fatalf("append to %s: no outcome after %v", group, waitLimit)
		return nil
	}
}

// write is one Store.Append in a concurrent batch.
type write struct {
	group string
	fence *pb.WriteFence
	recs  []*pb.Record
}

// appendAll issues every write at once (so they share entries) and returns
// each outcome in order.
func appendAll(t testing.TB, s *Store, ws []write) []error {
	t.Helper()
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	wg.Add(len(ws))
	for i, w := range ws {
		s.Append(w.group, w.recs, w.fence, func(err error) { errs[i] = err; wg.Done() })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatalf("%d appends: no outcome after %v", len(ws), waitLimit)
	}
	return errs
}
