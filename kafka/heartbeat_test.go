package kafka

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/internal/tripwire"
	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// heldGroups is a GroupIDs holding a fixed set of group ids.
type heldGroups map[string]string

func (h heldGroups) GroupID(b []byte) (string, bool) {
	s, ok := h[string(b)]
	return s, ok
}

// sameHeartbeat fails unless got holds the fields of want, naming those it
// does not.
func sameHeartbeat(t testing.TB, got, want *kmsg.HeartbeatRequest) {
	t.Helper()
	if diff := tripwire.DiffStruct(want, got); diff != nil {
		t.Fatalf("decoded %+v, kmsg decodes %+v: %q", got, want, diff)
	}
}

// checkHeartbeatDecode decodes body both ways: where decodeHeartbeat takes
// it, kmsg must decode it too, to the same fields. It reports whether
// decodeHeartbeat took it.
func checkHeartbeatDecode(t testing.TB, body []byte, version int16, ids GroupIDs) bool {
	t.Helper()
	var got kmsg.HeartbeatRequest
	var last heartbeatStrings
	if !decodeHeartbeat(body, version, &got, ids, &last) {
		return false
	}
	want := kmsg.NewPtrHeartbeatRequest()
	want.SetVersion(version)
	if err := want.ReadFrom(body); err != nil {
		t.Fatalf("decodeHeartbeat took v%d %x, which kmsg refuses: %v", version, body, err)
	}
	sameHeartbeat(t, &got, want)
	return true
}

func TestDecodeHeartbeatMatchesKmsg(t *testing.T) {
	long := strings.Repeat("m", 200) // past a one-byte compact length
	inst := "instance-1"
	cases := []struct {
		name             string
		group, member    string
		instance         *string
		tags             bool
		fast, fastBefore bool // decoded by hand from v4 / from v0-v3
	}{
		{name: "plain", group: "orders", member: "consumer-1-4b1c", fast: true, fastBefore: true},
		{name: "empty ids", fast: true, fastBefore: true},
		{name: "static member", group: "orders", member: "m", instance: &inst, fast: true, fastBefore: true},
		{name: "long member id", group: "orders", member: long, fastBefore: true},
		{name: "tagged field", group: "orders", member: "m", tags: true, fastBefore: true},
	}
	ids := heldGroups{"orders": "orders"}
	for _, c := range cases {
		for v := int16(0); v <= 4; v++ {
			req := kmsg.NewPtrHeartbeatRequest()
			req.SetVersion(v)
			req.Group, req.Generation, req.MemberID, req.InstanceID = c.group, 7, c.member, c.instance
			if c.tags {
				req.UnknownTags.Set(9, []byte{1})
			}
			body := req.AppendTo(nil)
			want := c.fastBefore
			if v >= 4 {
				want = c.fast
			}
			if got := checkHeartbeatDecode(t, body, v, ids); got != want {
				t.Errorf("%s v%d: decoded by hand %v, want %v", c.name, v, got, want)
			}
			refusesDamaged(t, c.name, v, body, func(b []byte) bool { return checkHeartbeatDecode(t, b, v, ids) })
		}
	}
}

// refusesDamaged fails unless decodes, a hand decoder's check, leaves to kmsg
// body with a byte after it and every truncation of body.
func refusesDamaged(t *testing.T, name string, v int16, body []byte, decodes func([]byte) bool) {
	t.Helper()
	if decodes(append(bytes.Clone(body), 0)) {
		t.Errorf("%s v%d: trailing byte decoded by hand", name, v)
	}
	for n := range body {
		if decodes(body[:n]) {
			t.Errorf("%s v%d: %d of %d bytes decoded by hand", name, v, n, len(body))
		}
	}
}

// TestDecodeHeartbeatReusesStrings: a held group's id and a repeated member
// id cost no allocation, and the strings are the ones kept.
func TestDecodeHeartbeatReusesStrings(t *testing.T) {
	group := "orders"
	ids := heldGroups{group: group}
	req := kmsg.NewPtrHeartbeatRequest()
	req.SetVersion(4)
	req.Group, req.Generation, req.MemberID = "orders", 3, "consumer-1-4b1c"
	body := req.AppendTo(nil)
	var hb kmsg.HeartbeatRequest
	var last heartbeatStrings
	if !decodeHeartbeat(body, 4, &hb, ids, &last) {
		t.Fatal("not decoded")
	}
	member := hb.MemberID
	allocs := testing.AllocsPerRun(100, func() {
		if !decodeHeartbeat(body, 4, &hb, ids, &last) {
			t.Fatal("not decoded")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per repeated heartbeat, want 0", allocs)
	}
	if unsafe.StringData(hb.Group) != unsafe.StringData(group) || unsafe.StringData(hb.MemberID) != unsafe.StringData(member) {
		t.Error("the held group id or the last member id was not reused")
	}
	// A group the node does not hold is copied, as kmsg would.
	req.Group = "elsewhere"
	if !decodeHeartbeat(req.AppendTo(nil), 4, &hb, ids, &last) || hb.Group != "elsewhere" {
		t.Fatalf("group %q", hb.Group)
	}
}

func FuzzDecodeHeartbeat(f *testing.F) {
	for v := int16(0); v <= 4; v++ {
		req := kmsg.NewPtrHeartbeatRequest()
		req.SetVersion(v)
		req.Group, req.Generation, req.MemberID = "orders", 1, "m-1"
		f.Add(v, req.AppendTo(nil))
	}
	ids := heldGroups{"orders": "orders"}
	f.Fuzz(func(t *testing.T, version int16, body []byte) {
		if version < 0 || version > 4 {
			return
		}
		checkHeartbeatDecode(t, body, version, ids)
	})
}

// TestInlineHeartbeatReusesOnlyAnsweredRequests: the reader passes the
// group core the same native request for the next heartbeat only once the
// last one was answered; after a call that failed (it may still be queued in
// the group's mailbox) the next heartbeat gets a new one.
func TestInlineHeartbeatReusesOnlyAnsweredRequests(t *testing.T) {
	var mu sync.Mutex
	var seen []*grouppb.HeartbeatRequest
	var members []string
	fg := &fakeGroups{fn: func(ctx context.Context, req proto.Message) (proto.Message, error) {
		hb, ok := req.(*grouppb.HeartbeatRequest)
		if !ok {
			return emptyAnswer(req), nil
		}
		mu.Lock()
		seen, members = append(seen, hb), append(members, hb.GetMemberId())
		mu.Unlock()
		if hb.GetMemberId() == "slow" {
			return nil, errors.New("call timed out")
		}
		return &grouppb.HeartbeatResponse{ErrorCode: hb.GetGenerationId()}, nil
	}}
	s := startServer(t, fg, nil)
	c := dial(t, s.l.Addr())
	send := func(member string, gen int32) int16 {
		r := kmsg.NewPtrHeartbeatRequest()
		r.SetVersion(4)
		r.Group, r.Generation, r.MemberID = "g", gen, member
		return c.do(r).(*kmsg.HeartbeatResponse).ErrorCode
	}
	if code := send("a", 1); code != 1 {
		t.Fatalf("first heartbeat answered %d", code)
	}
	if code := send("b", 2); code != 2 {
		t.Fatalf("second heartbeat answered %d", code)
	}
	if code := send("slow", 3); code != kerr.CoordinatorNotAvailable.Code {
		t.Fatalf("failed call answered %d", code)
	}
	if code := send("c", 4); code != 4 {
		t.Fatalf("heartbeat after the failed call answered %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(members, []string{"a", "b", "slow", "c"}) {
		t.Fatalf("group core saw members %v", members)
	}
	if seen[1] != seen[0] || seen[2] != seen[1] {
		t.Error("an answered heartbeat's native request was not reused")
	}
	if seen[3] == seen[2] {
		t.Error("the native request of a call that failed was reused")
	}
}
