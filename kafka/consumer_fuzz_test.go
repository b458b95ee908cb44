package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// The consumer protocol's requests are decoded by kmsg (dispatch) and
// mapped by hand (consumer.go). These targets decode a body at a version
// as dispatch does, run the handler, and check that whatever reaches the
// groups can be carried as protobuf and keeps the request's nulls and
// lists, and that the answer encodes and decodes at the request's version.

// nativeCheck is a Groups that checks every native request it is given and
// answers it as fakeGroups does (no group service can run per fuzz input).
type nativeCheck struct {
	mu    sync.Mutex
	calls []proto.Message
	err   error
}

func (g *nativeCheck) CallWithin(_ context.Context, req proto.Message, _ time.Duration) (proto.Message, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := proto.Marshal(req); err != nil && g.err == nil {
		g.err = fmt.Errorf("native request %T cannot be marshaled: %v", req, err)
	}
	g.calls = append(g.calls, req)
	return emptyAnswer(req), nil
}

func (g *nativeCheck) Send(req proto.Message, to coordinator.Answerer) {
	m, _ := g.CallWithin(context.Background(), req, 0)
	to.Answer(m)
}

// fuzzListener is a listener (never served) over a nativeCheck, with topic
// "t" (its id returned) in its catalog.
func fuzzListener(f *testing.F) (*Listener, *nativeCheck, [16]byte) {
	topics := catalog.New()
	id := catalog.NewTopicID()
	if err := topics.Apply(catalog.CreateTopic{Name: "t", ID: id, Partitions: 3}); err != nil {
		f.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	g := &nativeCheck{}
	l, err := New(cfg, g, topics, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.Close() })
	return l, g, id
}

// decodeBody decodes body as a request of req's kind at version v, as
// dispatch does; false when dispatch would close the connection.
func decodeBody(req kmsg.Request, v int16, body []byte) bool {
	req.SetVersion(v)
	return req.ReadFrom(body) == nil
}

// roundTrip fails unless resp, the answer to req, encodes and decodes back
// at version v.
func roundTrip(t *testing.T, req kmsg.Request, resp kmsg.Response, v int16) {
	t.Helper()
	resp.SetVersion(v)
	back := req.ResponseKind()
	back.SetVersion(v)
	if err := back.ReadFrom(resp.AppendTo(nil)); err != nil {
		t.Fatalf("the answer does not decode at v%d: %v", v, err)
	}
}

func FuzzConsumerGroupHeartbeat(f *testing.F) {
	l, g, id := fuzzListener(f)
	str := kmsg.StringPtr
	seeds := []*kmsg.ConsumerGroupHeartbeatRequest{
		sampleRequest(68, 1).(*kmsg.ConsumerGroupHeartbeatRequest),
		{Group: "g", MemberID: "m", MemberEpoch: 3, RebalanceTimeoutMillis: -1},
		{Group: "g", MemberID: "m", MemberEpoch: 3, RebalanceTimeoutMillis: -1, Topics: []kmsg.ConsumerGroupHeartbeatRequestTopic{owned(id, 0, 2), owned([16]byte{7}, 1)}},
		{Group: "g", MemberID: "m", MemberEpoch: 0, RebalanceTimeoutMillis: 1000, SubscribedTopicRegex: str("t.*"), ServerAssignor: str("range"),
			InstanceID: str("i"), RackID: str("r"), Topics: []kmsg.ConsumerGroupHeartbeatRequestTopic{owned([16]byte{7}, 1)}},
		{Group: "g", MemberID: "m", MemberEpoch: -2, InstanceID: str("i"), RebalanceTimeoutMillis: -1},
		{Group: "g", MemberID: "m\xff", MemberEpoch: -1, SubscribedTopicNames: []string{"t\xfe"}, RebalanceTimeoutMillis: -1},
	}
	for _, s := range seeds {
		for v := range int16(2) {
			s.SetVersion(v)
			f.Add(s.AppendTo(nil), uint8(v))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, version uint8) {
		v := int16(version % 2)
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		if !decodeBody(req, v, body) {
			return
		}
		g.mu.Lock()
		g.calls, g.err = g.calls[:0], nil
		g.mu.Unlock()
		resp := l.consumerGroupHeartbeat(context.Background(), mappingRequest(l, v), req).(*kmsg.ConsumerGroupHeartbeatResponse)
		roundTrip(t, req, resp, v)
		if g.err != nil {
			t.Fatal(g.err)
		}
		if len(g.calls) == 0 {
			if resp.ErrorCode == 0 {
				t.Fatalf("answered without the groups and without an error: %+v", resp)
			}
			return
		}
		n := g.calls[0].(*grouppb.ConsumerGroupHeartbeatRequest)
		switch {
		case n.SubscribedTopicNamesSet != (req.SubscribedTopicNames != nil), n.TopicsSet != (req.Topics != nil):
			t.Fatalf("nulls lost: %v from %+v", n, req)
		case len(n.Topics) > len(req.Topics), (n.InstanceId == nil) != (req.InstanceID == nil), (n.RackId == nil) != (req.RackID == nil),
			(n.ServerAssignor == nil) != (req.ServerAssignor == nil), (n.SubscribedTopicRegex == nil) != (req.SubscribedTopicRegex == nil):
			t.Fatalf("mapped %v from %+v", n, req)
		case n.MemberEpoch == 0 && len(n.Topics) != len(req.Topics):
			t.Fatalf("a join's unknown owned topics dropped: %v from %+v", n, req)
		}
		for _, tp := range n.Topics {
			if tp.Name != "t" {
				t.Fatalf("owned topic %q: the catalog holds only t", tp.Name)
			}
		}
	})
}

func FuzzConsumerGroupDescribe(f *testing.F) {
	l, g, _ := fuzzListener(f)
	seeds := []*kmsg.ConsumerGroupDescribeRequest{
		sampleRequest(69, 1).(*kmsg.ConsumerGroupDescribeRequest),
		{Groups: []string{"", "g", "h"}, IncludeAuthorizedOperations: true},
		{Groups: []string{"g\xff", "g"}},
		{},
	}
	for _, s := range seeds {
		for v := range int16(2) {
			s.SetVersion(v)
			f.Add(s.AppendTo(nil), uint8(v))
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, version uint8) {
		v := int16(version % 2)
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		if !decodeBody(req, v, body) || len(req.Groups) > 64 {
			return // dispatch takes more, but each group costs a call
		}
		g.mu.Lock()
		g.calls, g.err = g.calls[:0], nil
		g.mu.Unlock()
		resp := l.consumerGroupDescribe(context.Background(), mappingRequest(l, v), req).(*kmsg.ConsumerGroupDescribeResponse)
		roundTrip(t, req, resp, v)
		if g.err != nil {
			t.Fatal(g.err)
		}
		if len(resp.Groups) != len(req.Groups) {
			t.Fatalf("%d groups answered, %d asked", len(resp.Groups), len(req.Groups))
		}
		for i, rg := range resp.Groups {
			if rg.Group != req.Groups[i] {
				t.Fatalf("group %d answered as %q, asked %q", i, rg.Group, req.Groups[i])
			}
			if req.Groups[i] == "" && rg.ErrorCode == 0 {
				t.Fatal(`group "" described`)
			}
		}
	})
}
