package kafka

import (
	"context"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
)

// securityAdmin returns the store and admin of a listener that manages
// security, with the error code to answer otherwise: SECURITY_DISABLED, as
// Kafka answers ACL requests without an authorizer.
func (l *Listener) securityAdmin(acls bool) (*security.Store, SecurityAdmin, int16) {
	sec := l.cfg.Security
	if sec == nil || sec.Store == nil || sec.Admin == nil || (acls && sec.Authorizer == nil) {
		return nil, nil, kerr.SecurityDisabled.Code
	}
	return sec.Store, sec.Admin, errNone
}

func (l *Listener) describeACLs(_ context.Context, r *request, req *kmsg.DescribeACLsRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeACLsResponse()
	store, _, code := l.securityAdmin(true)
	if code == errNone && !r.clusterAllowed(kmsg.ACLOperationDescribe) {
		code = clusterDenied
	}
	f := security.Filter{
		ResourceType: req.ResourceType, ResourceName: req.ResourceName, PatternType: req.ResourcePatternType,
		Principal: req.Principal, Host: req.Host, Operation: req.Operation, Permission: req.PermissionType,
	}
	if r.version == 0 {
		f.PatternType = kmsg.ACLResourcePatternTypeLiteral
	}
	if code == errNone && f.Validate() != nil {
		code = kerr.InvalidRequest.Code
	}
	if code != errNone {
		resp.ErrorCode = code
		resp.ErrorMessage = kmsg.StringPtr(kerr.ErrorForCode(code).Error())
		return resp
	}
	for _, a := range store.Match(f) {
		n := len(resp.Resources)
		if n == 0 || resp.Resources[n-1].ResourceType != a.ResourceType || resp.Resources[n-1].ResourceName != a.ResourceName ||
			resp.Resources[n-1].ResourcePatternType != a.PatternType {
			res := kmsg.NewDescribeACLsResponseResource()
			res.ResourceType, res.ResourceName, res.ResourcePatternType = a.ResourceType, a.ResourceName, a.PatternType
			resp.Resources = append(resp.Resources, res)
			n++
		}
		e := kmsg.NewDescribeACLsResponseResourceACL()
		e.Principal, e.Host, e.Operation, e.PermissionType = a.Principal, a.Host, a.Operation, a.Permission
		resp.Resources[n-1].ACLs = append(resp.Resources[n-1].ACLs, e)
	}
	return resp
}

func (l *Listener) createACLs(ctx context.Context, r *request, req *kmsg.CreateACLsRequest) kmsg.Response {
	resp := kmsg.NewPtrCreateACLsResponse()
	resp.Results = make([]kmsg.CreateACLsResponseResult, len(req.Creations))
	_, admin, code := l.securityAdmin(true)
	if code == errNone && !r.clusterAllowed(kmsg.ACLOperationAlter) {
		code = clusterDenied
	}
	change := &securitypb.AclChange{}
	var valid []int
	for i, c := range req.Creations {
		res := kmsg.NewCreateACLsResponseResult()
		a := security.ACL{
			ResourceType: c.ResourceType, ResourceName: c.ResourceName, PatternType: c.ResourcePatternType,
			Principal: c.Principal, Host: c.Host, Operation: c.Operation, Permission: c.PermissionType,
		}
		if r.version == 0 {
			a.PatternType = kmsg.ACLResourcePatternTypeLiteral
		}
		switch {
		case code != errNone:
			res.ErrorCode = code
		default:
			if err := a.Validate(); err != nil {
				res.ErrorCode = kerr.InvalidRequest.Code
				res.ErrorMessage = kmsg.StringPtr(err.Error())
			} else {
				change.Creates = append(change.Creates, a.Proto())
				valid = append(valid, i)
			}
		}
		resp.Results[i] = res
	}
	if len(change.Creates) > 0 {
		if err := admin.ChangeACL(ctx, change); err != nil {
			l.log.Warn("create acls", "err", err)
			for _, i := range valid {
				resp.Results[i].ErrorCode = kerr.UnknownServerError.Code
				resp.Results[i].ErrorMessage = kmsg.StringPtr(err.Error())
			}
		}
	}
	return resp
}

func (l *Listener) deleteACLs(ctx context.Context, r *request, req *kmsg.DeleteACLsRequest) kmsg.Response {
	resp := kmsg.NewPtrDeleteACLsResponse()
	resp.Results = make([]kmsg.DeleteACLsResponseResult, len(req.Filters))
	store, admin, code := l.securityAdmin(true)
	if code == errNone && !r.clusterAllowed(kmsg.ACLOperationAlter) {
		code = clusterDenied
	}
	change := &securitypb.AclChange{}
	var matched []security.ACL
	for i, kf := range req.Filters {
		res := kmsg.NewDeleteACLsResponseResult()
		f := security.Filter{
			ResourceType: kf.ResourceType, ResourceName: kf.ResourceName, PatternType: kf.ResourcePatternType,
			Principal: kf.Principal, Host: kf.Host, Operation: kf.Operation, Permission: kf.PermissionType,
		}
		if r.version == 0 {
			f.PatternType = kmsg.ACLResourcePatternTypeLiteral
		}
		switch {
		case code != errNone:
			res.ErrorCode = code
		case f.Validate() != nil:
			res.ErrorCode = kerr.InvalidRequest.Code
		default:
			for _, a := range store.Match(f) {
				m := kmsg.NewDeleteACLsResponseResultMatchingACL()
				m.ResourceType, m.ResourceName, m.ResourcePatternType = a.ResourceType, a.ResourceName, a.PatternType
				m.Principal, m.Host, m.Operation, m.PermissionType = a.Principal, a.Host, a.Operation, a.Permission
				res.MatchingACLs = append(res.MatchingACLs, m)
				if !slices.Contains(matched, a) {
					matched = append(matched, a)
					change.Deletes = append(change.Deletes, a.Proto())
				}
			}
		}
		resp.Results[i] = res
	}
	if len(change.Deletes) > 0 {
		if err := admin.ChangeACL(ctx, change); err != nil {
			l.log.Warn("delete acls", "err", err)
			for i := range resp.Results {
				if len(resp.Results[i].MatchingACLs) > 0 {
					resp.Results[i].ErrorCode = kerr.UnknownServerError.Code
					resp.Results[i].ErrorMessage = kmsg.StringPtr(err.Error())
					resp.Results[i].MatchingACLs = nil
				}
			}
		}
	}
	return resp
}

func (l *Listener) describeUserScram(_ context.Context, r *request, req *kmsg.DescribeUserSCRAMCredentialsRequest) kmsg.Response {
	resp := kmsg.NewPtrDescribeUserSCRAMCredentialsResponse()
	store, _, code := l.securityAdmin(false)
	if code == errNone && !r.clusterAllowed(kmsg.ACLOperationDescribe) {
		code = clusterDenied
	}
	if code != errNone {
		resp.ErrorCode = code
		return resp
	}
	byUser := map[string][]*securitypb.ScramCredential{}
	var users []string
	for _, c := range store.Credentials() {
		if len(byUser[c.GetUser()]) == 0 {
			users = append(users, c.GetUser())
		}
		byUser[c.GetUser()] = append(byUser[c.GetUser()], c)
	}
	asked := users
	if req.Users != nil {
		asked = nil
		seen := map[string]int{}
		for _, u := range req.Users {
			seen[u.Name]++
			if seen[u.Name] == 1 {
				asked = append(asked, u.Name)
			}
		}
		for _, u := range asked {
			if seen[u] > 1 {
				res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
				res.User, res.ErrorCode = u, kerr.DuplicateResource.Code
				res.ErrorMessage = kmsg.StringPtr("user named more than once")
				resp.Results = append(resp.Results, res)
			}
		}
	}
	for _, u := range asked {
		if req.Users != nil && slices.ContainsFunc(resp.Results, func(r kmsg.DescribeUserSCRAMCredentialsResponseResult) bool { return r.User == u }) {
			continue
		}
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User = u
		if len(byUser[u]) == 0 {
			res.ErrorCode = kerr.ResourceNotFound.Code
			res.ErrorMessage = kmsg.StringPtr("attempt to describe a user credential that does not exist")
		}
		for _, c := range byUser[u] {
			ci := kmsg.NewDescribeUserSCRAMCredentialsResponseResultCredentialInfo()
			ci.Mechanism, ci.Iterations = int8(c.GetMechanism()), c.GetIterations()
			res.CredentialInfos = append(res.CredentialInfos, ci)
		}
		resp.Results = append(resp.Results, res)
	}
	return resp
}

func (l *Listener) alterUserScram(ctx context.Context, r *request, req *kmsg.AlterUserSCRAMCredentialsRequest) kmsg.Response {
	resp := kmsg.NewPtrAlterUserSCRAMCredentialsResponse()
	store, admin, code := l.securityAdmin(false)
	if code == errNone && !r.clusterAllowed(kmsg.ACLOperationAlter) {
		code = clusterDenied
	}
	// One result per user, in the order users first appear.
	var order []string
	codes := map[string]int16{}
	msgs := map[string]string{}
	count := map[string]int{}
	fail := func(u string, c int16, msg string) {
		if codes[u] == errNone {
			codes[u], msgs[u] = c, msg
		}
	}
	note := func(u string) {
		if _, ok := codes[u]; !ok {
			order = append(order, u)
			codes[u] = errNone
		}
	}
	for _, d := range req.Deletions {
		note(d.Name)
		count[d.Name+"\x00"+string(rune(d.Mechanism))]++
	}
	for _, u := range req.Upsertions {
		note(u.Name)
		count[u.Name+"\x00"+string(rune(u.Mechanism))]++
	}
	change := &securitypb.ScramChange{}
	for _, d := range req.Deletions {
		m := securitypb.ScramMechanism(d.Mechanism)
		switch {
		case code != errNone:
			fail(d.Name, code, "")
		case d.Name == "":
			fail(d.Name, kerr.UnacceptableCredential.Code, "empty user name")
		case security.MechanismName(m) == "":
			fail(d.Name, kerr.UnsupportedSaslMechanism.Code, "unknown SCRAM mechanism")
		case count[d.Name+"\x00"+string(rune(d.Mechanism))] > 1:
			fail(d.Name, kerr.DuplicateResource.Code, "a user and mechanism named more than once")
		default:
			if _, ok := store.Credential(d.Name, m); !ok {
				fail(d.Name, kerr.ResourceNotFound.Code, "attempt to delete a user credential that does not exist")
				continue
			}
			change.Deletions = append(change.Deletions, &securitypb.ScramDeletion{User: d.Name, Mechanism: m})
		}
	}
	for _, u := range req.Upsertions {
		m := securitypb.ScramMechanism(u.Mechanism)
		switch {
		case code != errNone:
			fail(u.Name, code, "")
		case u.Name == "":
			fail(u.Name, kerr.UnacceptableCredential.Code, "empty user name")
		case security.MechanismName(m) == "":
			fail(u.Name, kerr.UnsupportedSaslMechanism.Code, "unknown SCRAM mechanism")
		case count[u.Name+"\x00"+string(rune(u.Mechanism))] > 1:
			fail(u.Name, kerr.DuplicateResource.Code, "a user and mechanism named more than once")
		default:
			c, err := security.CredentialFromSalted(u.Name, m, u.Salt, u.Iterations, u.SaltedPassword)
			if err != nil {
				fail(u.Name, kerr.UnacceptableCredential.Code, err.Error())
				continue
			}
			change.Upserts = append(change.Upserts, c)
		}
	}
	// A user with any refused part changes nothing.
	change.Deletions = slices.DeleteFunc(change.Deletions, func(d *securitypb.ScramDeletion) bool { return codes[d.GetUser()] != errNone })
	change.Upserts = slices.DeleteFunc(change.Upserts, func(c *securitypb.ScramCredential) bool { return codes[c.GetUser()] != errNone })
	if len(change.Deletions)+len(change.Upserts) > 0 {
		if err := admin.ChangeScram(ctx, change); err != nil {
			l.log.Warn("alter user scram credentials", "err", err)
			for _, d := range change.Deletions {
				fail(d.GetUser(), kerr.UnknownServerError.Code, "the change was not applied")
			}
			for _, c := range change.Upserts {
				fail(c.GetUser(), kerr.UnknownServerError.Code, "the change was not applied")
			}
		}
	}
	for _, u := range order {
		res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
		res.User, res.ErrorCode = u, codes[u]
		if msgs[u] != "" {
			res.ErrorMessage = kmsg.StringPtr(msgs[u])
		}
		resp.Results = append(resp.Results, res)
	}
	return resp
}
