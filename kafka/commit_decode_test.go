package kafka

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// checkCommitDecode decodes body both ways: where decodeCommit takes it,
// kmsg must decode it too, to the same request. It reports whether
// decodeCommit took it.
func checkCommitDecode(t testing.TB, body []byte, version int16, ids GroupIDs) bool {
	t.Helper()
	var got kmsg.OffsetCommitRequest
	var parts commitParts
	var last commitStrings
	if !decodeCommit(body, version, &got, &parts, ids, &last) {
		return false
	}
	want := kmsg.NewPtrOffsetCommitRequest()
	want.SetVersion(version)
	if err := want.ReadFrom(body); err != nil {
		t.Fatalf("decodeCommit took v%d %x, which kmsg refuses: %v", version, body, err)
	}
	if !reflect.DeepEqual(&got, want) {
		t.Fatalf("v%d: decoded %+v, kmsg decodes %+v", version, got, *want)
	}
	return true
}

func commitBody(version int16, edit func(*kmsg.OffsetCommitRequest)) []byte {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.SetVersion(version)
	req.Group, req.Generation, req.MemberID, req.RetentionTimeMillis = "orders", 7, "consumer-1-4b1c", 60000
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = "payments"
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	meta := "from host-3"
	p.Partition, p.Offset, p.Timestamp, p.LeaderEpoch, p.Metadata = 4, 1<<40+5, 1700000000000, 9, &meta
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	if edit != nil {
		edit(req)
	}
	return req.AppendTo(nil)
}

func TestDecodeCommitMatchesKmsg(t *testing.T) {
	long := strings.Repeat("m", 200) // past a one-byte compact length
	inst := "instance-1"
	empty := ""
	cases := []struct {
		name       string
		edit       func(*kmsg.OffsetCommitRequest)
		fast, flex bool // decoded by hand before v8 / from v8
	}{
		{name: "plain", fast: true, flex: true},
		{name: "empty strings", fast: true, flex: true, edit: func(r *kmsg.OffsetCommitRequest) {
			r.Group, r.MemberID, r.Topics[0].Topic, r.Topics[0].Partitions[0].Metadata = "", "", "", &empty
		}},
		{name: "null metadata", fast: true, flex: true, edit: func(r *kmsg.OffsetCommitRequest) { r.Topics[0].Partitions[0].Metadata = nil }},
		{name: "static member", fast: true, flex: true, edit: func(r *kmsg.OffsetCommitRequest) { r.InstanceID = &inst }},
		{name: "admin commit", fast: true, flex: true, edit: func(r *kmsg.OffsetCommitRequest) { r.Generation, r.MemberID = -1, "" }},
		{name: "long member id", fast: true, edit: func(r *kmsg.OffsetCommitRequest) { r.MemberID = long }},
		{name: "long metadata", fast: true, edit: func(r *kmsg.OffsetCommitRequest) { r.Topics[0].Partitions[0].Metadata = &long }},
		{name: "two partitions", edit: func(r *kmsg.OffsetCommitRequest) {
			r.Topics[0].Partitions = append(r.Topics[0].Partitions, r.Topics[0].Partitions[0])
		}},
		{name: "two topics", edit: func(r *kmsg.OffsetCommitRequest) { r.Topics = append(r.Topics, r.Topics[0]) }},
		{name: "no topics", edit: func(r *kmsg.OffsetCommitRequest) { r.Topics = nil }},
		{name: "request tag", fast: true, edit: func(r *kmsg.OffsetCommitRequest) { r.UnknownTags.Set(9, []byte{1}) }},
		{name: "partition tag", fast: true, edit: func(r *kmsg.OffsetCommitRequest) { r.Topics[0].Partitions[0].UnknownTags.Set(9, []byte{1}) }},
	}
	ids := heldGroups{"orders": "orders"}
	for _, c := range cases {
		for v := int16(0); v <= 9; v++ {
			body := commitBody(v, c.edit)
			want := c.fast
			if v >= 8 {
				want = c.flex
			}
			if got := checkCommitDecode(t, body, v, ids); got != want {
				t.Errorf("%s v%d: decoded by hand %v, want %v", c.name, v, got, want)
			}
			refusesDamaged(t, c.name, v, body, func(b []byte) bool { return checkCommitDecode(t, b, v, ids) })
		}
	}
}

// TestDecodeCommitReusesStrings: a held group's id and a member, topic and
// metadata that repeat cost no allocation, and the strings are the ones
// kept; the decoded request is not tied to the frame.
func TestDecodeCommitReusesStrings(t *testing.T) {
	group := "orders"
	ids := heldGroups{group: group}
	body := commitBody(8, nil)
	var req kmsg.OffsetCommitRequest
	var parts commitParts
	var last commitStrings
	if !decodeCommit(body, 8, &req, &parts, ids, &last) {
		t.Fatal("not decoded")
	}
	member, topic := req.MemberID, req.Topics[0].Topic
	allocs := testing.AllocsPerRun(100, func() {
		if !decodeCommit(body, 8, &req, &parts, ids, &last) {
			t.Fatal("not decoded")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per repeated commit, want 0", allocs)
	}
	if unsafe.StringData(req.Group) != unsafe.StringData(group) || unsafe.StringData(req.MemberID) != unsafe.StringData(member) ||
		unsafe.StringData(req.Topics[0].Topic) != unsafe.StringData(topic) {
		t.Error("the held group id or the last member id or topic was not reused")
	}
	// Overwriting the frame changes nothing decoded from it.
	want := kmsg.NewPtrOffsetCommitRequest()
	want.SetVersion(8)
	if err := want.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	req.Group = "elsewhere" // a group the node does not hold is copied
	other := commitBody(8, func(r *kmsg.OffsetCommitRequest) { r.Group = "elsewhere" })
	if !decodeCommit(other, 8, &req, &parts, ids, &last) || req.Group != "elsewhere" {
		t.Fatalf("group %q", req.Group)
	}
	clear(other)
	want.Group = "elsewhere"
	if !reflect.DeepEqual(&req, want) {
		t.Fatalf("after the frame was cleared: %+v, want %+v", req, *want)
	}
}

func FuzzDecodeCommit(f *testing.F) {
	for v := int16(0); v <= 9; v++ {
		f.Add(v, commitBody(v, nil))
	}
	ids := heldGroups{"orders": "orders"}
	f.Fuzz(func(t *testing.T, version int16, body []byte) {
		if version < 0 || version > 9 {
			return
		}
		checkCommitDecode(t, body, version, ids)
	})
}

// BenchmarkDecodeCommit compares decoding the usual commit by hand with
// copying the frame and decoding it with kmsg, as the reader did before.
func BenchmarkDecodeCommit(b *testing.B) {
	body := commitBody(8, nil)
	ids := heldGroups{"orders": "orders"}
	b.Run("kmsg", func(b *testing.B) {
		b.ReportAllocs()
		var req kmsg.OffsetCommitRequest
		for b.Loop() {
			req = kmsg.OffsetCommitRequest{Version: 8}
			if err := req.ReadFrom(bytes.Clone(body)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("by-hand", func(b *testing.B) {
		b.ReportAllocs()
		var req kmsg.OffsetCommitRequest
		var parts commitParts
		var last commitStrings
		for b.Loop() {
			if !decodeCommit(body, 8, &req, &parts, ids, &last) {
				b.Fatal("not decoded")
			}
		}
	})
}
