package raftfsm

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
)

// Security changes apply through the log, survive a snapshot exactly and
// count in the FSM hash; an invalid change is refused the same way
// everywhere.
func TestSecurityCommandsAndSnapshot(t *testing.T) {
	f := NewFSM(catalog.New(), quiet)
	apply := func(i uint64, typ raftpb.CommandType, m proto.Message) *ApplyResult {
		t.Helper()
		data, err := encodeCommand(typ, m)
		if err != nil {
			t.Fatal(err)
		}
		return f.Apply(&raft.Log{Index: i, Data: data}).(*ApplyResult)
	}
	c, err := security.NewCredential("alice", securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512, "pw", security.MinIterations)
	if err != nil {
		t.Fatal(err)
	}
	before := f.Hash()
	if r := apply(1, raftpb.CommandType_COMMAND_TYPE_SCRAM_CHANGE, &securitypb.ScramChange{Upserts: []*securitypb.ScramCredential{c}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	a := security.ACL{ResourceType: kmsg.ACLResourceTypeGroup, ResourceName: "g", PatternType: kmsg.ACLResourcePatternTypeLiteral,
		Principal: "User:alice", Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow}
	if r := apply(2, raftpb.CommandType_COMMAND_TYPE_ACL_CHANGE, &securitypb.AclChange{Creates: []*securitypb.AclBinding{a.Proto()}}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if r := apply(3, raftpb.CommandType_COMMAND_TYPE_ACL_CHANGE, &securitypb.AclChange{Creates: []*securitypb.AclBinding{{ResourceType: 2}}}); r.Err == nil {
		t.Fatal("an invalid binding was applied")
	}
	if f.Hash() == before {
		t.Fatal("the hash ignores the security state")
	}
	if got, ok := f.Security().Credential("alice", securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512); !ok || !proto.Equal(got, c) {
		t.Fatal("credential not applied")
	}
	snap := encoded(t, f)
	if bytes.Contains(snap, []byte("pw\x00")) {
		t.Fatal("password in the snapshot")
	}
	r := restored(t, snap)
	requireSame(t, "restored", f, r)
	if len(r.Security().ACLs()) != 1 || r.Security().ACLs()[0] != a || len(r.Security().Credentials()) != 1 {
		t.Fatalf("restored security state: %v %v", r.Security().ACLs(), r.Security().Credentials())
	}
	recs := snapshotRecords(t, snap)
	if _, ok := recs[0].GetKind().(*raftpb.SnapshotRecord_Scram); !ok {
		t.Fatalf("first record %T", recs[0].GetKind())
	}
}
