package node

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startNode starts a single-node cluster; withRemote also serves the native
// API (at most one test per process may: protoactor's remote sets gRPC's
// global logger, which races with another remote's goroutines).
func startNode(t *testing.T, withRemote bool, opts ...func(*Config)) *Node {
	t.Helper()
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.RemoteAddr = ""
	if withRemote {
		cfg.RemoteAddr = "127.0.0.1:0"
	}
	cfg.Kafka.Addr = "127.0.0.1:0"
	cfg.Raft.RaftAddr = "127.0.0.1:0"
	cfg.Raft.HeartbeatTimeout = 100 * time.Millisecond
	cfg.Raft.ElectionTimeout = 100 * time.Millisecond
	cfg.Raft.LeaderLeaseTimeout = 50 * time.Millisecond
	cfg.Group.InitialRebalanceDelay = 0
	cfg.Logger = quiet()
	for _, o := range opts {
		o(&cfg)
	}
	n, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if err := n.WaitActive(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	return n
}

// remoteClient is a separate actor system with its own remote endpoint, as a
// process on another host would have.
func remoteClient(t *testing.T, addr string) *actors.Client {
	t.Helper()
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet() }))
	r := remote.NewRemote(system, remote.Configure("127.0.0.1", freePort(t)))
	r.Start()
	t.Cleanup(func() { r.Shutdown(false); system.Shutdown() })
	return actors.NewClient(system, actor.NewPID(addr, actors.RouterName))
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func do[T proto.Message](t *testing.T, c *actors.Client, req proto.Message) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.Call(ctx, req)
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
	r, ok := res.(T)
	if !ok {
		t.Fatalf("%T: answer %T", req, res)
	}
	return r
}

// The native API over protoactor remote, used from another process (this
// test binary re-run as a client, since protoactor's remote sets gRPC's global
// logger and so cannot run twice in one process): a group forms, heartbeats,
// commits and fetches offsets over TCP.
//
// Garbage on the remote port first: it closes that connection only, and the
// node keeps serving.
func TestNativeRemoteAPI(t *testing.T) {
	n := startNode(t, true)
	for _, junk := range []string{"hello\r\n\r\n", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04\x08\x00\x00\x00\x00\x00\xff\xff\xff\xff", strings.Repeat("\xff", 4096)} {
		conn, err := net.Dial("tcp", n.RemoteAddr())
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(junk))
		conn.SetReadDeadline(time.Now().Add(time.Second))
		io.Copy(io.Discard, conn)
		conn.Close()
	}
	if !strings.HasPrefix(n.RemoteAddr(), "127.0.0.1:") || strings.HasSuffix(n.RemoteAddr(), ":0") {
		t.Fatalf("remote addr %q", n.RemoteAddr())
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRemoteClientProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "COHORT_TEST_REMOTE_ADDR="+n.RemoteAddr())
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "remote client: ok") {
		t.Fatalf("remote client process: %v\n%s", err, out)
	}
}

// TestRemoteClientProcess is the client half of TestNativeRemoteAPI; it runs
// only in the child process.
func TestRemoteClientProcess(t *testing.T) {
	addr := os.Getenv("COHORT_TEST_REMOTE_ADDR")
	if addr == "" {
		t.Skip("runs as the client process of TestNativeRemoteAPI")
	}
	c := remoteClient(t, addr)

	join := &pb.JoinGroupRequest{GroupId: "rg", ClientId: "remote", ApiVersion: 3, SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 10_000,
		ProtocolType: "consumer", Protocols: []*pb.Protocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0}}}}
	j := do[*pb.JoinGroupResponse](t, c, join)
	if j.ErrorCode != coordinator.ErrNone || j.GenerationId != 1 || j.Leader != j.MemberId || len(j.Members) != 1 || !strings.HasPrefix(j.MemberId, "remote-") {
		t.Fatalf("join: %v", j)
	}
	s := do[*pb.SyncGroupResponse](t, c, &pb.SyncGroupRequest{GroupId: "rg", GenerationId: 1, MemberId: j.MemberId,
		Assignments: []*pb.SyncGroupAssignment{{MemberId: j.MemberId, Assignment: []byte("all")}}})
	if s.ErrorCode != coordinator.ErrNone || string(s.Assignment) != "all" || s.GetProtocolName() != "range" {
		t.Fatalf("sync: %v", s)
	}
	if h := do[*pb.HeartbeatResponse](t, c, &pb.HeartbeatRequest{GroupId: "rg", GenerationId: 1, MemberId: j.MemberId}); h.ErrorCode != coordinator.ErrNone {
		t.Fatalf("heartbeat: %v", h)
	}
	if h := do[*pb.HeartbeatResponse](t, c, &pb.HeartbeatRequest{GroupId: "rg", GenerationId: 7, MemberId: j.MemberId}); h.ErrorCode != coordinator.ErrIllegalGeneration {
		t.Fatalf("stale heartbeat: %v", h)
	}
	cm := do[*pb.OffsetCommitResponse](t, c, &pb.OffsetCommitRequest{GroupId: "rg", GenerationId: 1, MemberId: j.MemberId,
		Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 0, Offset: 11}}}}})
	if cm.Topics[0].Partitions[0].ErrorCode != coordinator.ErrNone {
		t.Fatalf("commit: %v", cm)
	}
	f := do[*pb.OffsetFetchResponse](t, c, &pb.OffsetFetchRequest{GroupId: "rg", Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{0, 1}}}})
	if got := f.Topics[0].Partitions; got[0].Offset != 11 || got[1].Offset != -1 {
		t.Fatalf("fetch: %v", f)
	}
	l := do[*pb.ListGroupsResponse](t, c, &pb.ListGroupsRequest{})
	if len(l.Groups) != 1 || l.Groups[0].State != "Stable" {
		t.Fatalf("list: %v", l)
	}
	lv := do[*pb.LeaveGroupResponse](t, c, &pb.LeaveGroupRequest{GroupId: "rg", Members: []*pb.MemberIdentity{{MemberId: j.MemberId}}})
	if lv.ErrorCode != coordinator.ErrNone || lv.Members[0].ErrorCode != coordinator.ErrNone {
		t.Fatalf("leave: %v", lv)
	}
	d := do[*pb.DescribeGroupResponse](t, c, &pb.DescribeGroupRequest{GroupId: "rg"})
	if d.State != "Empty" || d.GenerationId != 2 {
		t.Fatalf("describe after leave: %v", d)
	}
	t.Log("remote client: ok")
}

// A node registers the log format it agrees to: a single node raises its
// cluster's format to the newest at once, and one pinned to format 1
// (--raft-log-format 1, for a rollback during an upgrade) keeps it there
// and writes plain entries.
func TestLogFormatPin(t *testing.T) {
	for _, pin := range []uint32{0, raftfsm.LogFormatPlain} {
		n := startNode(t, false, func(c *Config) { c.Raft.LogFormat = pin })
		want := raftfsm.LogFormat
		if pin != 0 {
			want = pin
		}
		// The cluster starts at format 1: with that pin, only the node's
		// registration says the pin was applied.
		registered := func() bool {
			reg, ok := n.Raft().FSM.Node(n.Raft().ID())
			return ok && reg.GetLogFormat() == want
		}
		deadline := time.Now().Add(10 * time.Second)
		for (n.Raft().FSM.LogFormat() != want || !registered()) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		reg, ok := n.Raft().FSM.Node(n.Raft().ID())
		if got := n.Raft().FSM.LogFormat(); got != want || !ok || reg.GetLogFormat() != want {
			t.Fatalf("pinned to %d: cluster format %d, registered %v", pin, got, reg)
		}
		// Stays: a registration of the pinned format raises nothing.
		time.Sleep(200 * time.Millisecond)
		if got := n.Raft().FSM.LogFormat(); got != want {
			t.Fatalf("pinned to %d: the format became %d", pin, got)
		}
	}
}

func TestDataDirIsLocked(t *testing.T) {
	n := startNode(t, false)
	cfg := n.cfg
	cfg.Kafka.Addr = "127.0.0.1:0"
	cfg.Raft.RaftAddr = "127.0.0.1:0"
	if _, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second node on the same data dir: %v", err)
	}
}

// A node restarted on its data dir serves the same groups: generation,
// members, assignments and committed offsets survive (Raft log in
// raft-boltdb), and members heartbeat on without a rebalance.
func TestRestartKeepsGroupsAndOffsets(t *testing.T) {
	dir := t.TempDir()
	start := func() *Node {
		cfg := DefaultConfig()
		cfg.DataDir = dir
		cfg.RemoteAddr, cfg.Kafka.Addr, cfg.Raft.RaftAddr = "", "127.0.0.1:0", "127.0.0.1:0"
		cfg.Raft.HeartbeatTimeout, cfg.Raft.ElectionTimeout, cfg.Raft.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
		cfg.Group.InitialRebalanceDelay = 0
		cfg.Logger = quiet()
		n, err := Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.WaitActive(10 * time.Second); err != nil {
			n.Close()
			t.Fatal(err)
		}
		return n
	}
	call := func(n *Node, req proto.Message) proto.Message {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := n.Service().Call(ctx, req)
		if err != nil {
			t.Fatalf("%T: %v", req, err)
		}
		return res
	}
	n := start()
	j := call(n, &pb.JoinGroupRequest{GroupId: "durable", ClientId: "c", ApiVersion: 3, SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 10_000,
		ProtocolType: "consumer", Protocols: []*pb.Protocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0}}}}).(*pb.JoinGroupResponse)
	if j.ErrorCode != 0 {
		t.Fatalf("join: %v", j)
	}
	s := call(n, &pb.SyncGroupRequest{GroupId: "durable", GenerationId: j.GenerationId, MemberId: j.MemberId,
		Assignments: []*pb.SyncGroupAssignment{{MemberId: j.MemberId, Assignment: []byte("mine")}}}).(*pb.SyncGroupResponse)
	if s.ErrorCode != 0 {
		t.Fatalf("sync: %v", s)
	}
	c := call(n, &pb.OffsetCommitRequest{GroupId: "durable", GenerationId: j.GenerationId, MemberId: j.MemberId,
		Topics: []*pb.OffsetCommitTopic{{Name: "t", Partitions: []*pb.OffsetCommitPartition{{Partition: 2, Offset: 1234, Metadata: proto.String("m")}}}}}).(*pb.OffsetCommitResponse)
	if c.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("commit: %v", c)
	}
	rec, offsets, _ := n.Raft().FSM.Load("durable")
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n = start()
	defer n.Close()
	// The node registry changes (this node's ports are new); the group's
	// records must not.
	rec2, offsets2, _ := n.Raft().FSM.Load("durable")
	if !proto.Equal(rec, rec2) || len(offsets) != len(offsets2) || !proto.Equal(offsets[0], offsets2[0]) {
		t.Fatalf("group records after restart %v %v, before %v %v", rec2, offsets2, rec, offsets)
	}
	d := call(n, &pb.DescribeGroupRequest{GroupId: "durable"}).(*pb.DescribeGroupResponse)
	if d.State != "Stable" || d.GenerationId != j.GenerationId || len(d.Members) != 1 || d.Members[0].MemberId != j.MemberId || string(d.Members[0].Assignment) != "mine" {
		t.Fatalf("after restart: %v", d)
	}
	h := call(n, &pb.HeartbeatRequest{GroupId: "durable", GenerationId: j.GenerationId, MemberId: j.MemberId}).(*pb.HeartbeatResponse)
	if h.ErrorCode != 0 {
		t.Fatalf("heartbeat after restart: %v", h)
	}
	f := call(n, &pb.OffsetFetchRequest{GroupId: "durable", Topics: []*pb.TopicPartitions{{Name: "t", Partitions: []int32{2}}}}).(*pb.OffsetFetchResponse)
	if p := f.Topics[0].Partitions[0]; p.Offset != 1234 || p.Metadata != "m" {
		t.Fatalf("offset after restart: %v", f)
	}
}
