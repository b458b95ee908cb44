package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
)

// allowACL lets alice perform op on the resource.
func allowACL(t *testing.T, store *security.Store, rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation) {
	t.Helper()
	a := security.ACL{ResourceType: rt, ResourceName: name, PatternType: kmsg.ACLResourcePatternTypeLiteral,
		Principal: "User:alice", Host: "*", Operation: op, Permission: kmsg.ACLPermissionTypeAllow}
	if err := store.ApplyACL(&securitypb.AclChange{Creates: []*securitypb.AclBinding{a.Proto()}}); err != nil {
		t.Fatal(err)
	}
}

// A ConsumerGroupHeartbeat needs READ on the group, then DESCRIBE on every
// subscribed topic (one denial refuses the whole request); a refused one
// never reaches the groups.
func TestConsumerGroupHeartbeatACLs(t *testing.T) {
	s, store := secureServer(t, true, nil)
	alice := authedRaw(t, s, aliceUser, alicePass)
	heartbeat := func(topics ...string) *kmsg.ConsumerGroupHeartbeatResponse {
		req := sampleRequest(68, 1).(*kmsg.ConsumerGroupHeartbeatRequest)
		req.SetVersion(1)
		req.SubscribedTopicNames = topics
		return alice.do(req).(*kmsg.ConsumerGroupHeartbeatResponse)
	}
	if r := heartbeat("t"); r.ErrorCode != groupDenied || r.MemberID != nil {
		t.Fatalf("no ACLs: %+v", r)
	}
	allowACL(t, store, kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationDescribe)
	if r := heartbeat("t"); r.ErrorCode != groupDenied {
		t.Fatalf("DESCRIBE on the group: %d", r.ErrorCode)
	}
	allowACL(t, store, kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationRead)
	if r := heartbeat("t"); r.ErrorCode != topicDenied || r.MemberID != nil {
		t.Fatalf("READ on the group only: %+v", r)
	}
	allowACL(t, store, kmsg.ACLResourceTypeTopic, "t", kmsg.ACLOperationDescribe)
	if r := heartbeat("t", "u"); r.ErrorCode != topicDenied {
		t.Fatalf("one of two topics describable: %d", r.ErrorCode)
	}
	if n := s.groups.count(); n != 0 {
		t.Fatalf("%d refused requests reached the groups", n)
	}
	// No subscribed names (a keepalive, or subscribed to nothing): no topic
	// check.
	for _, topics := range [][]string{nil, {}} {
		if r := heartbeat(topics...); r.ErrorCode != 0 {
			t.Fatalf("subscribed to %v: %d", topics, r.ErrorCode)
		}
	}
	if r := heartbeat("t"); r.ErrorCode != 0 || r.Assignment == nil || len(r.Assignment.Topics) != 1 {
		t.Fatalf("every ACL: %+v", r)
	}
	if n, ok := s.groups.last().(*grouppb.ConsumerGroupHeartbeatRequest); !ok || len(n.SubscribedTopicNames) != 1 || n.SubscribedTopicNames[0] != "t" {
		t.Fatalf("native request %v", s.groups.last())
	}
}

// A ConsumerGroupDescribe needs DESCRIBE on each group, and a group whose
// members hold or are assigned a topic the caller may not describe is
// answered TOPIC_AUTHORIZATION_FAILED, without its members.
func TestConsumerGroupDescribeACLs(t *testing.T) {
	s, store := secureServer(t, true, nil)
	alice := authedRaw(t, s, aliceUser, alicePass)
	describe := func() []kmsg.ConsumerGroupDescribeResponseGroup {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.SetVersion(1)
		req.Groups, req.IncludeAuthorizedOperations = []string{"g", "h"}, true
		return alice.do(req).(*kmsg.ConsumerGroupDescribeResponse).Groups
	}
	if gs := describe(); gs[0].ErrorCode != groupDenied || gs[1].ErrorCode != groupDenied || s.groups.count() != 0 {
		t.Fatalf("no ACLs: %+v, %d calls", gs, s.groups.count())
	}
	allowACL(t, store, kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationDescribe)
	gs := describe()
	if gs[0].ErrorCode != topicDenied || gs[0].ErrorMessage == nil || len(gs[0].Members) != 0 || gs[0].AuthorizedOperations != -1<<31 ||
		gs[1].ErrorCode != groupDenied {
		t.Fatalf("DESCRIBE on g, not on its topic: %+v", gs)
	}
	allowACL(t, store, kmsg.ACLResourceTypeTopic, "t", kmsg.ACLOperationDescribe)
	gs = describe()
	if gs[0].ErrorCode != 0 || len(gs[0].Members) != 1 || gs[0].AuthorizedOperations != 1<<kmsg.ACLOperationDescribe || gs[1].ErrorCode != groupDenied {
		t.Fatalf("DESCRIBE on g and t: %+v", gs)
	}
	if gs[0].Members[0].Assignment.TopicPartitions[0].Topic != "t" {
		t.Fatalf("members %+v", gs[0].Members)
	}
}
