package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
)

// startSecureConsumerServer is startConsumerServer with SASL and the
// authorizer on: admin is a superuser, alice has no ACL yet.
func startSecureConsumerServer(t *testing.T) (*consumerServer, *security.Store) {
	t.Helper()
	store := security.NewStore()
	addUser(t, store, adminUser, adminPass)
	addUser(t, store, aliceUser, alicePass)
	sec := &Security{SASL: true, Store: store, Admin: storeAdmin{store},
		Authorizer: security.NewAuthorizer(store, []security.Principal{security.User(adminUser)})}
	return startConsumerServer(t, func(c *Config) { c.Security = sec }), store
}

// allowACL lets alice perform op on the resource.
func allowACL(t *testing.T, store *security.Store, rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation) {
	t.Helper()
	changeACL(t, store, true, rt, name, op)
}

// changeACL creates (or deletes) the ACL that lets alice perform op on the
// resource.
func changeACL(t *testing.T, store *security.Store, create bool, rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation) {
	t.Helper()
	a := security.ACL{ResourceType: rt, ResourceName: name, PatternType: kmsg.ACLResourcePatternTypeLiteral,
		Principal: "User:alice", Host: "*", Operation: op, Permission: kmsg.ACLPermissionTypeAllow}
	c := &securitypb.AclChange{Creates: []*securitypb.AclBinding{a.Proto()}}
	if !create {
		c.Creates, c.Deletes = nil, c.Creates
	}
	if err := store.ApplyACL(c); err != nil {
		t.Fatal(err)
	}
}

// A ConsumerGroupHeartbeat needs READ on the group, then DESCRIBE on every
// subscribed topic (one denial refuses the whole request, which never
// reaches the group: alice's join succeeds at the group's first epoch once
// allowed).
func TestConsumerGroupHeartbeatACLs(t *testing.T) {
	s, store := startSecureConsumerServer(t)
	alice := &kafkaMember{t: t, c: s.authed(t, aliceUser, alicePass), group: "g", id: "alice-1"}
	if r := alice.send(0); r.ErrorCode != groupDenied || r.MemberID != nil {
		t.Fatalf("no ACLs: %+v", r)
	}
	allowACL(t, store, kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationDescribe)
	if r := alice.send(0); r.ErrorCode != groupDenied {
		t.Fatalf("DESCRIBE on the group: %d", r.ErrorCode)
	}
	allowACL(t, store, kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationRead)
	if r := alice.send(0); r.ErrorCode != topicDenied || r.MemberID != nil {
		t.Fatalf("READ on the group only: %+v", r)
	}
	allowACL(t, store, kmsg.ACLResourceTypeTopic, "orders", kmsg.ACLOperationDescribe)
	if r := alice.send(0); r.ErrorCode != topicDenied {
		t.Fatalf("one of the two subscribed topics describable: %d", r.ErrorCode)
	}
	allowACL(t, store, kmsg.ACLResourceTypeTopic, "audit", kmsg.ACLOperationDescribe)
	alice.beat()
	if alice.epoch != 1 || !ownsExactly(alice.owned, map[[16]byte][]int32{s.orders: {0, 1, 2, 3}, s.audit: {0, 1}}) {
		t.Fatalf("every ACL: epoch %d, owns %v", alice.epoch, alice.owned)
	}
	// A heartbeat that names no topic needs no topic ACL.
	changeACL(t, store, false, kmsg.ACLResourceTypeTopic, "audit", kmsg.ACLOperationDescribe)
	alice.beat()
	if alice.epoch != 1 || len(alice.owned[s.audit]) != 2 {
		t.Fatalf("keepalive without DESCRIBE on audit: epoch %d, owns %v", alice.epoch, alice.owned)
	}
	if r := alice.send(0); r.ErrorCode != topicDenied {
		t.Fatalf("a join naming audit without DESCRIBE on it: %d", r.ErrorCode)
	}
}

// A ConsumerGroupDescribe needs DESCRIBE on each group, and a group whose
// members hold or are assigned a topic the caller may not describe is
// answered TOPIC_AUTHORIZATION_FAILED, without its members.
func TestConsumerGroupDescribeACLs(t *testing.T) {
	s, store := startSecureConsumerServer(t)
	admin := &kafkaMember{t: t, c: s.authed(t, adminUser, adminPass), group: "g", id: "admin-1"}
	admin.beat()
	alice := s.authed(t, aliceUser, alicePass)
	describe := func() []kmsg.ConsumerGroupDescribeResponseGroup {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.SetVersion(1)
		req.Groups, req.IncludeAuthorizedOperations = []string{"g", "h"}, true
		return alice.do(req).(*kmsg.ConsumerGroupDescribeResponse).Groups
	}
	if gs := describe(); gs[0].ErrorCode != groupDenied || gs[1].ErrorCode != groupDenied {
		t.Fatalf("no ACLs: %+v", gs)
	}
	allowACL(t, store, kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationDescribe)
	for _, topic := range []string{"orders", "audit"} {
		gs := describe()
		if gs[0].ErrorCode != topicDenied || gs[0].ErrorMessage == nil || len(gs[0].Members) != 0 || gs[0].Epoch != 0 ||
			gs[0].AuthorizedOperations != -1<<31 || gs[1].ErrorCode != groupDenied {
			t.Fatalf("DESCRIBE on g, not on every topic it holds: %+v", gs)
		}
		allowACL(t, store, kmsg.ACLResourceTypeTopic, topic, kmsg.ACLOperationDescribe)
	}
	gs := describe()
	if gs[0].ErrorCode != 0 || gs[0].Epoch != 1 || len(gs[0].Members) != 1 || gs[0].Members[0].MemberID != admin.id ||
		gs[0].AuthorizedOperations != 1<<kmsg.ACLOperationDescribe || gs[1].ErrorCode != groupDenied {
		t.Fatalf("DESCRIBE on g and its topics: %+v", gs)
	}
}
