package clustertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// A leader stopped (SIGSTOP) for longer than an election, with requests
// queued on its connections, must not answer them from its own state when
// it resumes: another node leads by then and may have changed that state.
// The heartbeat it finds queued gets NOT_COORDINATOR (not a stale OK), the
// offset fetch NOT_COORDINATOR (not the offset committed before the pause,
// which the new leader has since replaced).
func TestPausedLeaderAnswersNothingStale(t *testing.T) {
	if testing.Short() {
		t.Skip("starts cohortd processes")
	}
	c := StartCluster(t, 3)
	old := c.WaitLeader(30 * time.Second)
	if old == nil {
		t.Fatal("no leader")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conns := NewConns("paused-leader")
	defer conns.Close()
	const group, topic = "paused", "paused-t"
	coord := &Coordinator{Conns: conns, Group: group, Seeds: func() []string { return []string{old.KafkaAddr} }}
	if err := CreateTopic(ctx, coord, topic, 1); err != nil {
		t.Fatal(err)
	}
	member, gen := joinOne(ctx, t, coord, group, topic)
	commitOne(ctx, t, coord, group, topic, member, gen, 5)

	// Raw connections to the leader, so the requests written while it is
	// stopped wait in its socket buffers. Many of them, so that the race
	// between its readers and its Raft goroutine after the resume is run
	// often.
	const nconns, pairs = 8, 16
	var raw []net.Conn
	for range nconns {
		conn, err := net.Dial("tcp", old.KafkaAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		raw = append(raw, conn)
	}
	old.Cmd.Process.Signal(syscall.SIGSTOP)
	waitStopped(t, old.Cmd.Process.Pid)
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			old.Cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume()

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Version, hb.Group, hb.Generation, hb.MemberID = 3, group, gen, member
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Version, fetch.Group = 5, group
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic, ft.Partitions = topic, []int32{0}
	fetch.Topics = []kmsg.OffsetFetchRequestTopic{ft}
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("paused-leader"))
	for _, conn := range raw {
		// One write, many frames (AppendRequest sizes its frame from the
		// start of the buffer it is given, so each gets its own).
		var b []byte
		for i := range int32(pairs) {
			b = append(b, f.AppendRequest(nil, hb, 2*i+1)...)
			b = append(b, f.AppendRequest(nil, fetch, 2*i+2)...)
		}
		if _, err := conn.Write(b); err != nil {
			t.Fatal(err)
		}
	}

	// The others elect a leader, take the group over (the member keeps its
	// generation) and accept a newer commit.
	var others []string
	for _, n := range c.Running() {
		if n != old {
			others = append(others, n.KafkaAddr)
		}
	}
	coord2 := &Coordinator{Conns: conns, Group: group, Seeds: func() []string { return others }}
	commitOne(ctx, t, coord2, group, topic, member, gen, 9)

	resume()
	var answered, stale int
	for ci, conn := range raw {
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		r := bufio.NewReader(conn)
	reading:
		for i := range int32(2 * pairs) {
			body, err := readResponse(r, i+1)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("connection %d, correlation %d: no answer from the resumed old leader: %v", ci, i+1, err)
			}
			if err != nil {
				// A closed connection answers nothing stale either.
				t.Logf("connection %d, correlation %d: %v", ci, i+1, err)
				break reading
			}
			answered++
			if i%2 == 0 {
				res := kmsg.NewPtrHeartbeatResponse()
				res.Version = hb.Version
				if err := res.ReadFrom(body); err != nil {
					t.Fatal(err)
				}
				if res.ErrorCode != 16 {
					stale++
					t.Errorf("connection %d: queued heartbeat answered with code %d by the resumed old leader, want NOT_COORDINATOR (16)", ci, res.ErrorCode)
				}
				continue
			}
			res := kmsg.NewPtrOffsetFetchResponse()
			res.Version = fetch.Version
			if err := res.ReadFrom(body); err != nil {
				t.Fatal(err)
			}
			if res.ErrorCode != 16 {
				got := int64(-1)
				if len(res.Topics) == 1 && len(res.Topics[0].Partitions) == 1 {
					got = res.Topics[0].Partitions[0].Offset
				}
				stale++
				t.Errorf("connection %d: queued offset fetch answered with code %d, offset %d by the resumed old leader, want NOT_COORDINATOR (16); the cluster holds 9", ci, res.ErrorCode, got)
			}
		}
	}
	t.Logf("%d queued requests answered by the resumed old leader, %d of them from stale state", answered, stale)
}

// waitStopped waits until the process is in the stopped state: a signal is
// delivered asynchronously, and a request that arrives before it takes
// effect is answered at once.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// The state follows the command name in parentheses.
		if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
	}
	t.Fatalf("process %d did not stop", pid)
}

// readResponse reads one non-flexible response frame and checks its
// correlation id.
func readResponse(r io.Reader, corr int32) ([]byte, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(hdr[:4]))
	if got := int32(binary.BigEndian.Uint32(hdr[4:])); got != corr {
		return nil, fmt.Errorf("correlation id %d, want %d", got, corr)
	}
	body := make([]byte, size-4)
	_, err := io.ReadFull(r, body)
	return body, err
}

// joinOne forms the group with one member and returns its id and generation.
func joinOne(ctx context.Context, t *testing.T, coord *Coordinator, group, topic string) (string, int32) {
	t.Helper()
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	member := ""
	for {
		req := kmsg.NewPtrJoinGroupRequest()
		req.Group, req.MemberID, req.ProtocolType = group, member, "consumer"
		req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 60_000, 10_000
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", meta.AppendTo(nil)
		req.Protocols = []kmsg.JoinGroupRequestProtocol{p}
		res, _, err := coord.Retry(ctx, func() kmsg.Request { return req }, func(r kmsg.Response) int16 { return r.(*kmsg.JoinGroupResponse).ErrorCode })
		if err != nil {
			t.Fatal(err)
		}
		jr := res.(*kmsg.JoinGroupResponse)
		if jr.ErrorCode == 79 { // MEMBER_ID_REQUIRED
			member = jr.MemberID
			continue
		}
		if jr.ErrorCode != 0 {
			t.Fatalf("join: code %d", jr.ErrorCode)
		}
		asg := kmsg.NewConsumerMemberAssignment()
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic, at.Partitions = topic, []int32{0}
		asg.Topics = []kmsg.ConsumerMemberAssignmentTopic{at}
		sync := kmsg.NewPtrSyncGroupRequest()
		sync.Group, sync.Generation, sync.MemberID = group, jr.Generation, jr.MemberID
		protoType, protoName := "consumer", "range"
		sync.ProtocolType, sync.Protocol = &protoType, &protoName
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID, sa.MemberAssignment = jr.MemberID, asg.AppendTo(nil)
		sync.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{sa}
		sres, _, err := coord.Retry(ctx, func() kmsg.Request { return sync }, func(r kmsg.Response) int16 { return r.(*kmsg.SyncGroupResponse).ErrorCode })
		if err != nil || sres.(*kmsg.SyncGroupResponse).ErrorCode != 0 {
			t.Fatalf("sync: %v %v", sres, err)
		}
		return jr.MemberID, jr.Generation
	}
}

// commitOne commits offset for partition 0 as the member, retrying while the
// coordinator moves.
func commitOne(ctx context.Context, t *testing.T, coord *Coordinator, group, topic, member string, gen int32, offset int64) {
	t.Helper()
	mk := func() kmsg.Request {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Group, req.Generation, req.MemberID = group, gen, member
		ct := kmsg.NewOffsetCommitRequestTopic()
		ct.Topic = topic
		cp := kmsg.NewOffsetCommitRequestTopicPartition()
		cp.Partition, cp.Offset = 0, offset
		ct.Partitions = []kmsg.OffsetCommitRequestTopicPartition{cp}
		req.Topics = []kmsg.OffsetCommitRequestTopic{ct}
		return req
	}
	code := func(r kmsg.Response) int16 {
		if t := r.(*kmsg.OffsetCommitResponse).Topics; len(t) == 1 && len(t[0].Partitions) == 1 {
			return t[0].Partitions[0].ErrorCode
		}
		return -1
	}
	for {
		res, _, err := coord.Retry(ctx, mk, code)
		if err != nil {
			t.Fatalf("commit %d: %v", offset, err)
		}
		switch c := code(res); c {
		case 0:
			return
		case 14, 15: // COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
			time.Sleep(100 * time.Millisecond)
		default:
			t.Fatalf("commit %d: code %d", offset, c)
		}
	}
}
