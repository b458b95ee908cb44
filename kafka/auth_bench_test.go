package kafka_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/internal/testnode"
	"github.com/cohort-coord/cohort/node"
	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
)

// BenchmarkSecurityCost measures heartbeats/s and commits/s of one member
// against a real single node (Raft, group actor, listener) in three
// settings, in the same run: PLAINTEXT without authorization, SASL_PLAINTEXT
// without authorization, and SASL_PLAINTEXT with the authorizer and ACLs
// (the member's principal has READ on its group and topic among 200 other
// bindings). Requests are pipelined 32 deep on one connection.
//
//	go test -run '^$' -bench BenchmarkSecurityCost -benchtime 20000x ./kafka/
func BenchmarkSecurityCost(b *testing.B) {
	for _, tc := range []struct {
		name       string
		sasl, acls bool
	}{{"plaintext", false, false}, {"sasl", true, false}, {"sasl+acls", true, true}} {
		n := startSecureNode(b, tc.sasl, tc.acls)
		c := dialMember(b, n, tc.sasl)
		gen, member := c.joinAlone(b)
		b.Run(tc.name+"/heartbeat", func(b *testing.B) {
			c.pipeline(b, func() kmsg.Request {
				return &kmsg.HeartbeatRequest{Version: 4, Group: "bench", Generation: gen, MemberID: member}
			}, func(r kmsg.Response) int16 { return r.(*kmsg.HeartbeatResponse).ErrorCode })
		})
		b.Run(tc.name+"/commit", func(b *testing.B) {
			var off int64
			c.pipeline(b, func() kmsg.Request {
				off++
				req := kmsg.NewPtrOffsetCommitRequest()
				req.Version, req.Group, req.Generation, req.MemberID = 8, "bench", gen, member
				t := kmsg.NewOffsetCommitRequestTopic()
				t.Topic = "bench"
				p := kmsg.NewOffsetCommitRequestTopicPartition()
				p.Offset = off
				t.Partitions = append(t.Partitions, p)
				req.Topics = append(req.Topics, t)
				return req
			}, func(r kmsg.Response) int16 { return r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode })
		})
		n.Close()
	}
}

func startSecureNode(b *testing.B, sasl, acls bool) *node.Node {
	b.Helper()
	cfg := testnode.Config(b)
	cfg.MetricsOff = true
	proto := security.Plaintext
	if sasl {
		proto = security.SASLPlaintext
	}
	cfg.Security.Listeners = []security.Listener{{Protocol: proto, Addr: "127.0.0.1:0"}}
	cfg.Security.Authorizer = acls
	n := testnode.Start(b, cfg)
	ctx := context.Background()
	if err := n.Topics().Propose(ctx, catalog.CreateTopic{Name: "bench", ID: catalog.NewTopicID(), Partitions: 1}); err != nil {
		b.Fatal(err)
	}
	if sasl {
		c, err := security.NewCredential("bench", securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512, "bench-pw", security.MinIterations)
		if err != nil {
			b.Fatal(err)
		}
		if err := n.ChangeScram(ctx, &securitypb.ScramChange{Upserts: []*securitypb.ScramCredential{c}}); err != nil {
			b.Fatal(err)
		}
	}
	if acls {
		change := &securitypb.AclChange{}
		add := func(rt kmsg.ACLResourceType, name, principal string) {
			a := security.ACL{ResourceType: rt, ResourceName: name, PatternType: kmsg.ACLResourcePatternTypeLiteral,
				Principal: principal, Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow}
			change.Creates = append(change.Creates, a.Proto())
		}
		for i := range 100 {
			add(kmsg.ACLResourceTypeGroup, fmt.Sprintf("other-%d", i), fmt.Sprintf("User:u%d", i))
			add(kmsg.ACLResourceTypeTopic, fmt.Sprintf("other-%d", i), fmt.Sprintf("User:u%d", i))
		}
		add(kmsg.ACLResourceTypeGroup, "bench", "User:bench")
		add(kmsg.ACLResourceTypeTopic, "bench", "User:bench")
		if err := n.ChangeACL(ctx, change); err != nil {
			b.Fatal(err)
		}
	}
	return n
}

type benchConn struct {
	nc   net.Conn
	br   *bufio.Reader
	fm   *kmsg.RequestFormatter
	corr int32
}

func dialMember(b *testing.B, n *node.Node, sasl bool) *benchConn {
	b.Helper()
	nc, err := net.Dial("tcp", n.KafkaAddr())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	c := &benchConn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10), fm: kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench"))}
	if sasl {
		if r := c.do(b, &kmsg.SASLHandshakeRequest{Version: 1, Mechanism: "PLAIN"}).(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
			b.Fatalf("handshake %d", r.ErrorCode)
		}
		r := c.do(b, &kmsg.SASLAuthenticateRequest{Version: 2, SASLAuthBytes: []byte("\x00bench\x00bench-pw")}).(*kmsg.SASLAuthenticateResponse)
		if r.ErrorCode != 0 {
			b.Fatalf("authenticate %d", r.ErrorCode)
		}
	}
	return c
}

func (c *benchConn) send(b *testing.B, req kmsg.Request) {
	c.corr++
	if _, err := c.nc.Write(c.fm.AppendRequest(nil, req, c.corr)); err != nil {
		b.Fatal(err)
	}
}

func (c *benchConn) recv(b *testing.B, req kmsg.Request) kmsg.Response {
	var size [4]byte
	if _, err := io.ReadFull(c.br, size[:]); err != nil {
		b.Fatal(err)
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.br, frame); err != nil {
		b.Fatal(err)
	}
	body := frame[4:]
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if resp.IsFlexible() {
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		b.Fatal(err)
	}
	return resp
}

func (c *benchConn) do(b *testing.B, req kmsg.Request) kmsg.Response {
	c.send(b, req)
	return c.recv(b, req)
}

// joinAlone makes the connection the only member of group bench.
func (c *benchConn) joinAlone(b *testing.B) (int32, string) {
	b.Helper()
	join := &kmsg.JoinGroupRequest{Version: 5, Group: "bench", SessionTimeoutMillis: 30000, RebalanceTimeoutMillis: 30000,
		ProtocolType: "consumer", Protocols: []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte{0, 1, 0, 0, 0, 0, 0, 0}}}}
	r := c.do(b, join).(*kmsg.JoinGroupResponse)
	if r.ErrorCode == 79 { // MEMBER_ID_REQUIRED
		join.MemberID = r.MemberID
		r = c.do(b, join).(*kmsg.JoinGroupResponse)
	}
	if r.ErrorCode != 0 {
		b.Fatalf("join: %d", r.ErrorCode)
	}
	s := c.do(b, &kmsg.SyncGroupRequest{Version: 3, Group: "bench", Generation: r.Generation, MemberID: r.MemberID,
		GroupAssignment: []kmsg.SyncGroupRequestGroupAssignment{{MemberID: r.MemberID, MemberAssignment: []byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0}}}}).(*kmsg.SyncGroupResponse)
	if s.ErrorCode != 0 {
		b.Fatalf("sync: %d", s.ErrorCode)
	}
	return r.Generation, r.MemberID
}

// pipeline sends b.N requests, 32 in flight, and checks every answer.
func (c *benchConn) pipeline(b *testing.B, mk func() kmsg.Request, code func(kmsg.Response) int16) {
	const depth = 32
	sample := mk()
	b.ResetTimer()
	start := time.Now()
	sent, got := 0, 0
	for got < b.N {
		for sent < b.N && sent-got < depth {
			c.send(b, mk())
			sent++
		}
		if cd := code(c.recv(b, sample)); cd != 0 {
			b.Fatalf("error %d", cd)
		}
		got++
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}
