package raftfsm

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
)

func init() {
	applyTable[raftpb.CommandType_COMMAND_TYPE_SCRAM_CHANGE] = (*FSM).applyScramChange
	applyTable[raftpb.CommandType_COMMAND_TYPE_ACL_CHANGE] = (*FSM).applyACLChange
}

// Security is the replicated security state: SCRAM credentials and ACLs.
func (f *FSM) Security() *security.Store { return f.security }

func (f *FSM) applyScramChange(payload []byte) *ApplyResult {
	var c securitypb.ScramChange
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &ApplyResult{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return &ApplyResult{Err: f.security.ApplyScram(&c)}
}

func (f *FSM) applyACLChange(payload []byte) *ApplyResult {
	var c securitypb.AclChange
	if err := proto.Unmarshal(payload, &c); err != nil {
		return &ApplyResult{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return &ApplyResult{Err: f.security.ApplyACL(&c)}
}

// captureSecurity appends the credentials, then the bindings, in their
// sorted order. Caller holds f.mu.
func (f *FSM) captureSecurity(out []snapRecord) []snapRecord {
	for _, c := range f.security.Credentials() {
		out = append(out, snapRecord{msg: &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_Scram{Scram: c}}})
	}
	for _, a := range f.security.ACLs() {
		out = append(out, snapRecord{msg: &raftpb.SnapshotRecord{Kind: &raftpb.SnapshotRecord_Acl{Acl: a.Proto()}}})
	}
	return out
}

// securityRecords collects a snapshot's security records for Restore.
type securityRecords struct {
	creds []*securitypb.ScramCredential
	acls  []*securitypb.AclBinding
}

func (s *securityRecords) add(rec *raftpb.SnapshotRecord) {
	switch k := rec.GetKind().(type) {
	case *raftpb.SnapshotRecord_Scram:
		s.creds = append(s.creds, k.Scram)
	case *raftpb.SnapshotRecord_Acl:
		s.acls = append(s.acls, k.Acl)
	}
}

// ProposeScram applies a SCRAM credential change through the log. Leader only.
func (n *Node) ProposeScram(ctx context.Context, c *securitypb.ScramChange) error {
	return n.apply(ctx, raftpb.CommandType_COMMAND_TYPE_SCRAM_CHANGE, c)
}

// ProposeACL applies an ACL change through the log. Leader only.
func (n *Node) ProposeACL(ctx context.Context, c *securitypb.AclChange) error {
	return n.apply(ctx, raftpb.CommandType_COMMAND_TYPE_ACL_CHANGE, c)
}
