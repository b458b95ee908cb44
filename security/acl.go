package security

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
)

// ClusterName is the only name of the Cluster resource, as in Kafka.
const ClusterName = "kafka-cluster"

// WildcardName matches every resource name of a literal ACL; WildcardPrincipal
// every user; WildcardHost every host.
const (
	WildcardName      = "*"
	WildcardPrincipal = "User:*"
	WildcardHost      = "*"
)

// ErrInvalidACL: a binding that CreateAcls refuses (INVALID_REQUEST).
var ErrInvalidACL = errors.New("invalid acl")

// ACL is one binding of Kafka's model: a principal is allowed or denied an
// operation on the resources a pattern names, from a host.
type ACL struct {
	ResourceType kmsg.ACLResourceType
	ResourceName string
	PatternType  kmsg.ACLResourcePatternType // LITERAL or PREFIXED
	Principal    string                      // "User:alice" or "User:*"
	Host         string                      // an IP or "*"
	Operation    kmsg.ACLOperation
	Permission   kmsg.ACLPermissionType // ALLOW or DENY
}

func (a ACL) String() string {
	return fmt.Sprintf("%s %s %s on %s:%s:%s from %s", a.Principal, a.Permission, a.Operation,
		a.ResourceType, a.PatternType, a.ResourceName, a.Host)
}

// Validate reports why CreateAcls must refuse a binding.
func (a ACL) Validate() error {
	switch a.ResourceType {
	case kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup:
		if a.ResourceName == "" {
			return fmt.Errorf("%w: empty resource name", ErrInvalidACL)
		}
	case kmsg.ACLResourceTypeCluster:
		if a.ResourceName != ClusterName {
			return fmt.Errorf("%w: the cluster resource is named %q", ErrInvalidACL, ClusterName)
		}
	default:
		return fmt.Errorf("%w: resource type %s (cohort has topics, groups and the cluster)", ErrInvalidACL, a.ResourceType)
	}
	switch a.PatternType {
	case kmsg.ACLResourcePatternTypeLiteral:
	case kmsg.ACLResourcePatternTypePrefixed:
		if a.ResourceName == WildcardName {
			return fmt.Errorf("%w: a prefixed pattern cannot be %q", ErrInvalidACL, WildcardName)
		}
	default:
		return fmt.Errorf("%w: pattern type %s", ErrInvalidACL, a.PatternType)
	}
	if _, err := ParsePrincipal(a.Principal); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidACL, err)
	}
	if a.Host == "" {
		return fmt.Errorf("%w: empty host", ErrInvalidACL)
	}
	switch a.Operation {
	case kmsg.ACLOperationUnknown, kmsg.ACLOperationAny:
		return fmt.Errorf("%w: operation %s", ErrInvalidACL, a.Operation)
	}
	if a.Operation < kmsg.ACLOperationAll || a.Operation > kmsg.ACLOperationDescribeTokens {
		return fmt.Errorf("%w: operation %d", ErrInvalidACL, a.Operation)
	}
	if a.Permission != kmsg.ACLPermissionTypeAllow && a.Permission != kmsg.ACLPermissionTypeDeny {
		return fmt.Errorf("%w: permission %s", ErrInvalidACL, a.Permission)
	}
	return nil
}

// Proto is the replicated form of a binding.
func (a ACL) Proto() *securitypb.AclBinding {
	return &securitypb.AclBinding{
		ResourceType: int32(a.ResourceType), ResourceName: a.ResourceName, PatternType: int32(a.PatternType),
		Principal: a.Principal, Host: a.Host, Operation: int32(a.Operation), Permission: int32(a.Permission),
	}
}

// ACLFromProto is the binding of its replicated form.
func ACLFromProto(b *securitypb.AclBinding) ACL {
	return ACL{
		ResourceType: kmsg.ACLResourceType(b.GetResourceType()), ResourceName: b.GetResourceName(),
		PatternType: kmsg.ACLResourcePatternType(b.GetPatternType()), Principal: b.GetPrincipal(), Host: b.GetHost(),
		Operation: kmsg.ACLOperation(b.GetOperation()), Permission: kmsg.ACLPermissionType(b.GetPermission()),
	}
}

func compareACL(a, b ACL) int {
	return cmp.Or(
		cmp.Compare(a.ResourceType, b.ResourceType),
		cmp.Compare(a.PatternType, b.PatternType),
		cmp.Compare(a.ResourceName, b.ResourceName),
		cmp.Compare(a.Principal, b.Principal),
		cmp.Compare(a.Host, b.Host),
		cmp.Compare(a.Operation, b.Operation),
		cmp.Compare(a.Permission, b.Permission),
	)
}

// Filter selects bindings, as DescribeAcls and DeleteAcls do: ANY matches
// every value, a nil name, principal or host every one, and the pattern
// type MATCH every binding that applies to the named resource (literal of
// that name or "*", prefixed of a prefix of it).
type Filter struct {
	ResourceType kmsg.ACLResourceType
	ResourceName *string
	PatternType  kmsg.ACLResourcePatternType
	Principal    *string
	Host         *string
	Operation    kmsg.ACLOperation
	Permission   kmsg.ACLPermissionType
}

// Validate reports a filter that can match nothing sensible (UNKNOWN values).
func (f Filter) Validate() error {
	if f.ResourceType == kmsg.ACLResourceTypeUnknown || f.PatternType == kmsg.ACLResourcePatternTypeUnknown ||
		f.Operation == kmsg.ACLOperationUnknown || f.Permission == kmsg.ACLPermissionTypeUnknown {
		return fmt.Errorf("%w: a filter with an UNKNOWN value", ErrInvalidACL)
	}
	return nil
}

// Matches reports whether the filter selects a.
func (f Filter) Matches(a ACL) bool {
	if f.ResourceType != kmsg.ACLResourceTypeAny && f.ResourceType != a.ResourceType {
		return false
	}
	switch f.PatternType {
	case kmsg.ACLResourcePatternTypeAny:
		if f.ResourceName != nil && *f.ResourceName != a.ResourceName {
			return false
		}
	case kmsg.ACLResourcePatternTypeMatch:
		if f.ResourceName != nil && !patternApplies(a, *f.ResourceName) {
			return false
		}
	default:
		if f.PatternType != a.PatternType || (f.ResourceName != nil && *f.ResourceName != a.ResourceName) {
			return false
		}
	}
	if f.Principal != nil && *f.Principal != a.Principal {
		return false
	}
	if f.Host != nil && *f.Host != a.Host {
		return false
	}
	if f.Operation != kmsg.ACLOperationAny && f.Operation != a.Operation {
		return false
	}
	if f.Permission != kmsg.ACLPermissionTypeAny && f.Permission != a.Permission {
		return false
	}
	return true
}

// patternApplies reports whether a's resource pattern covers the resource name.
func patternApplies(a ACL, name string) bool {
	switch a.PatternType {
	case kmsg.ACLResourcePatternTypeLiteral:
		return a.ResourceName == name || a.ResourceName == WildcardName
	case kmsg.ACLResourcePatternTypePrefixed:
		return strings.HasPrefix(name, a.ResourceName)
	}
	return false
}

// aclSet is an immutable, sorted set of bindings, indexed by resource type
// and, for literal bindings, by name, so a check looks only at the
// bindings that can apply.
type aclSet struct {
	all    []ACL
	byType map[kmsg.ACLResourceType]*typeIndex
}

type typeIndex struct {
	literal  map[string][]ACL // literal bindings by name, "*" included
	prefixed []ACL
}

// candidates calls fn with every binding whose pattern covers name.
func (ix *typeIndex) candidates(name string, fn func(ACL) bool) {
	for _, b := range ix.literal[name] {
		if !fn(b) {
			return
		}
	}
	if name != WildcardName {
		for _, b := range ix.literal[WildcardName] {
			if !fn(b) {
				return
			}
		}
	}
	for _, b := range ix.prefixed {
		if strings.HasPrefix(name, b.ResourceName) && !fn(b) {
			return
		}
	}
}

func newACLSet(all []ACL) *aclSet {
	slices.SortFunc(all, compareACL)
	all = slices.CompactFunc(all, func(a, b ACL) bool { return compareACL(a, b) == 0 })
	s := &aclSet{all: all, byType: map[kmsg.ACLResourceType]*typeIndex{}}
	for _, a := range all {
		ix := s.byType[a.ResourceType]
		if ix == nil {
			ix = &typeIndex{literal: map[string][]ACL{}}
			s.byType[a.ResourceType] = ix
		}
		if a.PatternType == kmsg.ACLResourcePatternTypePrefixed {
			ix.prefixed = append(ix.prefixed, a)
		} else {
			ix.literal[a.ResourceName] = append(ix.literal[a.ResourceName], a)
		}
	}
	return s
}

func (s *aclSet) with(creates, deletes []ACL) *aclSet {
	out := make([]ACL, 0, len(s.all)+len(creates))
	for _, a := range s.all {
		if !slices.ContainsFunc(deletes, func(d ACL) bool { return compareACL(a, d) == 0 }) {
			out = append(out, a)
		}
	}
	return newACLSet(append(out, creates...))
}
