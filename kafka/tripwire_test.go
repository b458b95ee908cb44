package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/internal/tripwire"
)

// The hand-written decoders of OffsetCommit and Heartbeat are checked
// against kmsg with every field of kmsg's request set (by reflection, so a
// field kmsg gains is set too), at every version kmsg knows: at each version
// the hand decoder takes, it must decode what kmsg decodes, and a field it
// does not decode fails the test, named. Nothing is ignored deliberately:
// what the hand decoders do not handle (tagged fields at any level, more
// than one topic or partition, the versions they do not know) sends the
// request to kmsg, which the tests check too.

// The highest versions the hand decoders take.
const maxHandCommit, maxHandHeartbeat = 9, 4

func TestDecodeCommitKnowsEveryField(t *testing.T) {
	decode := func(body []byte, v int16) (*kmsg.OffsetCommitRequest, bool) {
		var got kmsg.OffsetCommitRequest
		var parts commitParts
		var last commitStrings
		return &got, decodeCommit(body, v, &got, &parts, heldGroups{}, &last)
	}
	for v := range kmsg.NewPtrOffsetCommitRequest().MaxVersion() + 1 {
		// One topic of one partition: the shape decodeCommit takes.
		req := kmsg.NewPtrOffsetCommitRequest()
		tripwire.FillStruct(req, 1)
		req.SetVersion(v)
		body := req.AppendTo(nil)
		got, ok := decode(body, v)
		if ok != (v <= maxHandCommit) {
			t.Errorf("v%d: decoded by hand %v, want %v", v, ok, v <= maxHandCommit)
		}
		if ok {
			sameAsKmsg(t, "OffsetCommit", v, body, got, kmsg.NewPtrOffsetCommitRequest())
		}
		// Two topics of two partitions, or a tag at any level, go to kmsg.
		two := kmsg.NewPtrOffsetCommitRequest()
		tripwire.FillStruct(two, 2)
		two.SetVersion(v)
		if _, ok := decode(two.AppendTo(nil), v); ok {
			t.Errorf("v%d: two topics of two partitions decoded by hand", v)
		}
		if req.IsFlexible() {
			for name, tags := range map[string]*kmsg.Tags{"request": &req.UnknownTags, "topic": &req.Topics[0].UnknownTags, "partition": &req.Topics[0].Partitions[0].UnknownTags} {
				tags.Set(9, []byte{1})
				if _, ok := decode(req.AppendTo(nil), v); ok {
					t.Errorf("v%d: a tagged field of the %s decoded by hand", v, name)
				}
				*tags = kmsg.Tags{}
			}
		}
	}
}

func TestDecodeHeartbeatKnowsEveryField(t *testing.T) {
	for v := range kmsg.NewPtrHeartbeatRequest().MaxVersion() + 1 {
		req := kmsg.NewPtrHeartbeatRequest()
		tripwire.FillStruct(req, 2)
		req.SetVersion(v)
		body := req.AppendTo(nil)
		var got kmsg.HeartbeatRequest
		var last heartbeatStrings
		ok := decodeHeartbeat(body, v, &got, heldGroups{}, &last)
		if ok != (v <= maxHandHeartbeat) {
			t.Errorf("v%d: decoded by hand %v, want %v", v, ok, v <= maxHandHeartbeat)
		}
		if ok {
			sameAsKmsg(t, "Heartbeat", v, body, &got, kmsg.NewPtrHeartbeatRequest())
		}
		if req.IsFlexible() {
			req.UnknownTags.Set(9, []byte{1})
			if decodeHeartbeat(req.AppendTo(nil), v, &got, heldGroups{}, &last) {
				t.Errorf("v%d: a tagged field decoded by hand", v)
			}
		}
	}
}

// sameAsKmsg fails, naming each field, where got differs from what kmsg
// decodes from body into want.
func sameAsKmsg(t *testing.T, api string, v int16, body []byte, got, want kmsg.Request) {
	t.Helper()
	want.SetVersion(v)
	if err := want.ReadFrom(body); err != nil {
		t.Fatalf("%s v%d: kmsg refuses its own encoding: %v", api, v, err)
	}
	for _, d := range tripwire.DiffStruct(want, got) {
		t.Errorf("%s v%d: the hand decoder does not decode %s", api, v, d)
	}
}
