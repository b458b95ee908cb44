package kafka

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// withAsyncBound bounds every asynchronous request by d for one test.
func withAsyncBound(t *testing.T, d time.Duration) {
	old := asyncBound
	asyncBound = d
	t.Cleanup(func() { asyncBound = old })
}

// commitRequest is an OffsetCommit at version v of the given topics'
// partitions (topic "t" has partitions 0-2).
func commitRequest(v int16, topics map[string][]int32, order ...string) *kmsg.OffsetCommitRequest {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.SetVersion(v)
	r.Group, r.Generation, r.MemberID = "g", 3, "m-1"
	for _, name := range order {
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = name
		for _, p := range topics[name] {
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.Metadata = p, int64(100+p), kmsg.StringPtr("md")
			rt.Partitions = append(rt.Partitions, rp)
		}
		r.Topics = append(r.Topics, rt)
	}
	return r
}

// directAnswer is the answer to req that preparing it, calling fn on its
// native request and building the Kafka answer in one go give (what a
// worker answered, when these requests waited on one).
func directAnswer(t *testing.T, l *Listener, fn func(context.Context, proto.Message) (proto.Message, error), req kmsg.Request) []byte {
	t.Helper()
	kreq := kmsg.RequestForKey(req.Key())
	kreq.SetVersion(req.GetVersion())
	if err := kreq.ReadFrom(req.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	r := request{version: req.GetVersion(), clientID: "test-client", c: &conn{l: l, host: "/127.0.0.1"}}
	n, _, a, resp := l.prepare(&r, kreq, nil)
	if resp == nil {
		m, err := emptyAnswer(n), error(nil)
		if fn != nil {
			m, err = fn(context.Background(), n)
		}
		resp = a.answer(l, n, m, err)
	}
	resp.SetVersion(req.GetVersion())
	return resp.AppendTo(nil)
}

// OffsetCommits, JoinGroups and SyncGroups sent to the groups get the
// answers, byte for byte, that preparing them, calling the groups and
// answering in one go give: at every version, with commit partitions the
// listener refuses itself, with call errors, with answers of the wrong type,
// and with a commit answer whose topics come in another order than asked.
// (The fake never answers a failed call: those requests are answered at a
// short bound.)
func TestSentAnswersAsADirectCall(t *testing.T) {
	withAsyncBound(t, 0)
	commits := func(fn func(out *grouppb.OffsetCommitResponse)) func(context.Context, proto.Message) (proto.Message, error) {
		return func(_ context.Context, req proto.Message) (proto.Message, error) {
			out := emptyAnswer(req)
			if c, ok := out.(*grouppb.OffsetCommitResponse); ok {
				fn(c)
			}
			return out, nil
		}
	}
	answers := map[string]func(ctx context.Context, req proto.Message) (proto.Message, error){
		"ok": nil,
		"reversed": commits(func(out *grouppb.OffsetCommitResponse) {
			for i, t := range out.Topics {
				for j, p := range t.Partitions {
					p.ErrorCode = int32(i*10 + j + 1)
				}
			}
			for i, j := 0, len(out.Topics)-1; i < j; i, j = i+1, j-1 {
				out.Topics[i], out.Topics[j] = out.Topics[j], out.Topics[i]
			}
		}),
		"partial": commits(func(out *grouppb.OffsetCommitResponse) {
			out.Topics = out.Topics[:1]
			out.Topics[0].Partitions = out.Topics[0].Partitions[len(out.Topics[0].Partitions)-1:]
		}),
		"error": func(context.Context, proto.Message) (proto.Message, error) {
			return nil, errors.New("no coordinator")
		},
		"wrong type": func(context.Context, proto.Message) (proto.Message, error) {
			return &grouppb.HeartbeatResponse{}, nil
		},
	}
	shapes := []struct {
		topics map[string][]int32
		order  []string
	}{
		{map[string][]int32{"t": {1}}, []string{"t"}},
		{map[string][]int32{"t": {0, 99, 2, 1}}, []string{"t"}},
		{map[string][]int32{"t": {2, 0}, "u": {0}, "nope": {4}}, []string{"nope", "t", "u"}},
		{map[string][]int32{"nope": {0, 1}}, []string{"nope"}},
	}
	var requests []kmsg.Request
	for v := int16(0); v <= 9; v++ {
		for _, shape := range shapes {
			requests = append(requests, commitRequest(v, shape.topics, shape.order...))
		}
		for _, key := range []int16{11, 14} { // JoinGroup, SyncGroup
			if r := sampleRequest(key, v); v <= r.MaxVersion() {
				r.SetVersion(v)
				requests = append(requests, r)
			}
		}
	}
	for name, fn := range answers {
		asyncBound = 0
		if name == "error" {
			asyncBound = 20 * time.Millisecond
		}
		ag := &fakeGroups{fn: fn}
		s := startServer(t, ag, nil)
		if err := s.topics.Apply(catalog.CreateTopic{Name: "u", ID: catalog.NewTopicID(), Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		c := dial(t, s.l.Addr())
		for _, req := range requests {
			got := c.do(req)
			if want, gb := directAnswer(t, s.l, fn, req), got.AppendTo(nil); string(want) != string(gb) {
				t.Fatalf("%s: %s v%d: answer %+v, a direct call's %x", name, kmsg.NameForKey(req.Key()), req.GetVersion(), got, want)
			}
		}
		if n := ag.sent.Load(); n < 30 {
			t.Fatalf("%s: %d requests sent asynchronously", name, n)
		}
	}
}

// Answers keep the request order: a heartbeat answered at once waits behind
// an earlier commit whose answer has not come yet.
func TestAsyncCommitKeepsAnswerOrder(t *testing.T) {
	ag := &fakeGroups{hold: make(chan struct{})}
	s := startServer(t, ag, nil)
	c := dial(t, s.l.Addr())
	commit := commitRequest(8, map[string][]int32{"t": {0}}, "t")
	hb := sampleRequest(12, 4)
	hb.SetVersion(4)
	first, second := c.send(commit), c.send(hb)
	for ag.sent.Load() == 0 || ag.count() == 0 {
		time.Sleep(time.Millisecond) // until the commit is sent and the heartbeat answered
	}
	close(ag.hold)
	r, err := c.recv(commit, first)
	if err != nil {
		t.Fatal(err)
	}
	if code := r.(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("commit answered %d", code)
	}
	if _, err := c.recv(hb, second); err != nil {
		t.Fatal(err)
	}
}

// A commit whose answer does not come by the deadline is answered
// COORDINATOR_NOT_AVAILABLE (the worker path's answer to a call that timed
// out), partitions the listener refused keep their own codes, the late
// answer is dropped, and the connection goes on.
func TestAsyncCommitDeadline(t *testing.T) {
	withAsyncBound(t, 100*time.Millisecond)
	ag := &fakeGroups{hold: make(chan struct{})}
	s := startServer(t, ag, nil)
	c := dial(t, s.l.Addr())
	req := commitRequest(8, map[string][]int32{"t": {0, 1}, "nope": {0}}, "t", "nope")
	r := c.do(req).(*kmsg.OffsetCommitResponse)
	want := []int16{kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorNotAvailable.Code, kerr.UnknownTopicOrPartition.Code}
	var got []int16
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			got = append(got, p.ErrorCode)
		}
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("codes %v, want %v", got, want)
	}
	if n := s.l.callErrors.Load(); n != 1 {
		t.Fatalf("%d call errors counted, want 1", n)
	}
	close(ag.hold) // the late answer comes now
	r = c.do(req).(*kmsg.OffsetCommitResponse)
	if code := r.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("next commit answered %d", code)
	}
}

// Answers that race the deadline: each partition is answered either by the
// groups (0) or at the deadline (COORDINATOR_NOT_AVAILABLE), never
// anything else, and every answer comes in order (run with -race).
func TestAsyncAnswersRacingTheDeadline(t *testing.T) {
	withAsyncBound(t, time.Millisecond)
	ag := &fakeGroups{delay: func() time.Duration { return time.Duration(rand.IntN(2000)) * time.Microsecond }}
	s := startServer(t, ag, nil)
	c := dial(t, s.l.Addr())
	// Commits, joins and syncs each live in a pooled slot (commitSlot,
	// waitSlot) that a late answer must never reach once reused.
	join, sync := sampleRequest(11, 5), sampleRequest(14, 3)
	join.SetVersion(5)
	sync.SetVersion(3)
	reqs := []kmsg.Request{commitRequest(8, map[string][]int32{"t": {0}}, "t"), join, sync}
	code := func(r kmsg.Response) int16 {
		switch r := r.(type) {
		case *kmsg.OffsetCommitResponse:
			return r.Topics[0].Partitions[0].ErrorCode
		case *kmsg.JoinGroupResponse:
			return r.ErrorCode
		case *kmsg.SyncGroupResponse:
			return r.ErrorCode
		}
		return -2
	}
	seen := map[int16]int{}
	for range 20 {
		var sent []kmsg.Request
		var corrs []int32
		for i := range 12 {
			req := reqs[i%len(reqs)]
			sent = append(sent, req)
			corrs = append(corrs, c.send(req))
		}
		for i, corr := range corrs {
			r, err := c.recv(sent[i], corr)
			if err != nil {
				t.Fatal(err)
			}
			code := code(r)
			if code != 0 && code != kerr.CoordinatorNotAvailable.Code {
				t.Fatalf("%s answered %d", kmsg.NameForKey(sent[i].Key()), code)
			}
			seen[code]++
		}
	}
	if seen[0]+seen[kerr.CoordinatorNotAvailable.Code] != 240 || seen[0] == 0 || seen[kerr.CoordinatorNotAvailable.Code] == 0 {
		t.Fatalf("answers %v", seen)
	}
}

// The writer's one timer stands for every deadline: armed for the earliest
// queued deadline, re-armed for the first waiting request when it fires
// early (its deadline is later) and for the next one once the first is
// answered, so a request whose bound passed behind a slower one is given up
// as soon as it comes first, and none is given up early.
func TestWriterTimerCoversEveryDeadline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &conn{l: &Listener{}, ctx: ctx, room: make(chan struct{}, maxInFlight), wake: make(chan struct{}, 1)}
	r := request{c: c}
	defer func() {
		if c.expiry != nil {
			c.expiry.Stop()
		}
	}()
	now := time.Now()
	slow, fast := &pending{corr: 1, r: r, call: (*joinAnswer)(nil), deadline: now.Add(300 * time.Millisecond)},
		&pending{corr: 2, r: r, call: (*joinAnswer)(nil), deadline: now.Add(30 * time.Millisecond)}
	for _, p := range []*pending{slow, fast} {
		if err := c.enqueue(p); err != nil {
			t.Fatal(err)
		}
	}
	if !c.armedAt.Equal(fast.deadline) {
		t.Fatalf("timer armed at %v, want the earliest deadline", c.armedAt.Sub(now))
	}
	wait := func() {
		select {
		case <-c.wake:
		case <-time.After(5 * time.Second):
			t.Fatal("the writer was not woken")
		}
	}
	if p := c.next(); p != nil {
		t.Fatalf("request %d ready before any answer", p.corr)
	}
	wait() // the timer, at fast's deadline: slow's has not passed
	if p := c.next(); p != nil {
		t.Fatalf("request %d given up before its deadline", p.corr)
	}
	if !c.armedAt.Equal(slow.deadline) {
		t.Fatalf("timer re-armed at %v, want slow's deadline", c.armedAt.Sub(now))
	}
	slow.Answer(&grouppb.JoinGroupResponse{})
	wait()
	if p := c.next(); p != slow || slow.state.Load() != asyncAnswered {
		t.Fatalf("next %v, want the answered request", p)
	}
	c.wmu.Lock()
	c.pop()
	c.wmu.Unlock()
	<-c.room
	// fast's deadline passed while it waited behind slow.
	for p := c.next(); p == nil; p = c.next() {
		wait()
	}
	if fast.state.Load() != asyncExpired {
		t.Fatalf("fast in state %d, want expired", fast.state.Load())
	}
	fast.Answer(&grouppb.JoinGroupResponse{}) // late: dropped
	if fast.native != nil {
		t.Fatal("a late answer reached an expired request")
	}
}
