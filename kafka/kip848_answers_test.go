package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitAt sends an OffsetCommit of version v for partition 0 of "orders"
// and returns the partition's code.
func commitAt(t *testing.T, c *rawClient, v int16, group, member string, gen int32) int16 {
	t.Helper()
	req := kmsg.NewPtrOffsetCommitRequest()
	req.SetVersion(v)
	req.Group, req.Generation, req.MemberID = group, gen, member
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = "orders"
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = 0, 11
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	r := c.do(req).(*kmsg.OffsetCommitResponse)
	if len(r.Topics) != 1 || len(r.Topics[0].Partitions) != 1 {
		t.Fatalf("v%d commit answer %+v", v, r.Topics)
	}
	return r.Topics[0].Partitions[0].ErrorCode
}

// The answers that depend on the request's version, over Kafka's wire:
//
//   - OffsetMetadataManager.validateOffsetCommit: a commit with a member
//     epoch to a group that does not exist is GROUP_ID_NOT_FOUND from v9 on,
//     ILLEGAL_GENERATION before it;
//   - ConsumerGroup.validateOffsetCommit: a consumer-protocol member must
//     commit with v9 or later (UNSUPPORTED_VERSION with v8);
//   - GroupMetadataManager.describeGroups (KIP-1043): DescribeGroups of a
//     consumer group, or of a group id without a group, is state Dead with
//     no error below v6 and GROUP_ID_NOT_FOUND with a message from v6 on.
func TestKafkaVersionedAnswers(t *testing.T) {
	s := startConsumerServer(t, nil)
	a := s.member(t, "billing", "member-a")
	a.beat()
	for _, tc := range []struct {
		v    int16
		want int16
	}{{9, kerr.GroupIDNotFound.Code}, {8, kerr.IllegalGeneration.Code}, {7, kerr.IllegalGeneration.Code}} {
		if code := commitAt(t, a.c, tc.v, "nobody", "member-x", 5); code != tc.want {
			t.Fatalf("v%d commit to a group that does not exist: %d, want %d", tc.v, code, tc.want)
		}
	}
	if code := commitAt(t, a.c, 8, "billing", a.id, a.epoch); code != kerr.UnsupportedVersion.Code {
		t.Fatalf("v8 commit of a consumer-protocol member: %d, want UNSUPPORTED_VERSION", code)
	}
	if code := commitAt(t, a.c, 9, "billing", a.id, a.epoch); code != 0 {
		t.Fatalf("v9 commit of a consumer-protocol member: %d", code)
	}
	for _, v := range []int16{0, 5, 6} {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.SetVersion(v)
		req.Groups = []string{"billing", "nobody"}
		r := a.c.do(req).(*kmsg.DescribeGroupsResponse)
		if len(r.Groups) != 2 {
			t.Fatalf("v%d: %d groups", v, len(r.Groups))
		}
		for i, msg := range []string{"Group billing is not a classic group.", "Group nobody not found."} {
			g := r.Groups[i]
			wantCode, wantMsg := int16(0), ""
			if v >= 6 {
				wantCode, wantMsg = kerr.GroupIDNotFound.Code, msg
			}
			gotMsg := ""
			if g.ErrorMessage != nil {
				gotMsg = *g.ErrorMessage
			}
			if g.ErrorCode != wantCode || g.State != "Dead" || gotMsg != wantMsg || len(g.Members) != 0 {
				t.Fatalf("v%d describe of %s: code %d state %q message %q", v, g.Group, g.ErrorCode, g.State, gotMsg)
			}
		}
	}
}
