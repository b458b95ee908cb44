package security

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
)

const (
	topic   = kmsg.ACLResourceTypeTopic
	group   = kmsg.ACLResourceTypeGroup
	cluster = kmsg.ACLResourceTypeCluster
	literal = kmsg.ACLResourcePatternTypeLiteral
	prefix  = kmsg.ACLResourcePatternTypePrefixed
	allow   = kmsg.ACLPermissionTypeAllow
	deny    = kmsg.ACLPermissionTypeDeny

	opRead            = kmsg.ACLOperationRead
	opWrite           = kmsg.ACLOperationWrite
	opCreate          = kmsg.ACLOperationCreate
	opDelete          = kmsg.ACLOperationDelete
	opAlter           = kmsg.ACLOperationAlter
	opDescribe        = kmsg.ACLOperationDescribe
	opAll             = kmsg.ACLOperationAll
	opDescribeConfigs = kmsg.ACLOperationDescribeConfigs
	opAlterConfigs    = kmsg.ACLOperationAlterConfigs
)

func acl(rt kmsg.ACLResourceType, name string, pt kmsg.ACLResourcePatternType, principal, host string, op kmsg.ACLOperation, perm kmsg.ACLPermissionType) ACL {
	return ACL{ResourceType: rt, ResourceName: name, PatternType: pt, Principal: principal, Host: host, Operation: op, Permission: perm}
}

func storeWith(t testing.TB, acls ...ACL) *Store {
	t.Helper()
	s := NewStore()
	c := &securitypb.AclChange{}
	for _, a := range acls {
		c.Creates = append(c.Creates, a.Proto())
	}
	if err := s.ApplyACL(c); err != nil {
		t.Fatal(err)
	}
	return s
}

type check struct {
	name      string
	principal Principal
	host      string
	op        kmsg.ACLOperation
	rt        kmsg.ACLResourceType
	res       string
	want      bool
}

func TestAuthorizerRules(t *testing.T) {
	alice, bob := User("alice"), User("bob")
	cases := []struct {
		name   string
		acls   []ACL
		super  []Principal
		checks []check
	}{
		{"no acl refuses", nil, nil, []check{
			{"read", alice, "1.2.3.4", opRead, group, "g", false},
			{"anonymous", Anonymous, "1.2.3.4", opDescribe, topic, "t", false},
		}},
		{"literal allow", []ACL{acl(group, "g", literal, "User:alice", "*", opRead, allow)}, nil, []check{
			{"same name", alice, "1.2.3.4", opRead, group, "g", true},
			{"other name", alice, "1.2.3.4", opRead, group, "g2", false},
			{"other principal", bob, "1.2.3.4", opRead, group, "g", false},
			{"other type", alice, "1.2.3.4", opRead, topic, "g", false},
			{"other op", alice, "1.2.3.4", opDelete, group, "g", false},
		}},
		{"literal wildcard name and principal", []ACL{acl(topic, "*", literal, "User:*", "*", opRead, allow)}, nil, []check{
			{"any topic", bob, "1.2.3.4", opRead, topic, "anything", true},
			{"anonymous too", Anonymous, "1.2.3.4", opRead, topic, "x", true},
			{"not groups", bob, "1.2.3.4", opRead, group, "x", false},
		}},
		{"prefixed", []ACL{acl(group, "app-", prefix, "User:alice", "*", opRead, allow)}, nil, []check{
			{"prefix match", alice, "h", opRead, group, "app-orders", true},
			{"exact prefix", alice, "h", opRead, group, "app-", true},
			{"not a prefix", alice, "h", opRead, group, "ap", false},
			{"other", alice, "h", opRead, group, "web-app-1", false},
		}},
		{"host", []ACL{acl(group, "g", literal, "User:alice", "10.0.0.1", opRead, allow)}, nil, []check{
			{"that host", alice, "10.0.0.1", opRead, group, "g", true},
			{"other host", alice, "10.0.0.2", opRead, group, "g", false},
		}},
		{"deny wins", []ACL{
			acl(group, "*", literal, "User:*", "*", opAll, allow),
			acl(group, "secret", literal, "User:alice", "*", opRead, deny),
			acl(group, "priv-", prefix, "User:*", "10.0.0.9", opAll, deny),
		}, nil, []check{
			{"allowed elsewhere", alice, "h", opRead, group, "g", true},
			{"denied read", alice, "h", opRead, group, "secret", false},
			{"deny read leaves describe", alice, "h", opDescribe, group, "secret", true},
			{"bob not denied", bob, "h", opRead, group, "secret", true},
			{"deny all from a host", bob, "10.0.0.9", opDescribe, group, "priv-x", false},
			{"other host fine", bob, "10.0.0.8", opDescribe, group, "priv-x", true},
		}},
		{"implied describe", []ACL{
			acl(topic, "r", literal, "User:alice", "*", opRead, allow),
			acl(topic, "w", literal, "User:alice", "*", opWrite, allow),
			acl(topic, "d", literal, "User:alice", "*", opDelete, allow),
			acl(topic, "a", literal, "User:alice", "*", opAlter, allow),
			acl(topic, "c", literal, "User:alice", "*", opCreate, allow),
			acl(topic, "ac", literal, "User:alice", "*", opAlterConfigs, allow),
		}, nil, []check{
			{"read", alice, "h", opDescribe, topic, "r", true},
			{"write", alice, "h", opDescribe, topic, "w", true},
			{"delete", alice, "h", opDescribe, topic, "d", true},
			{"alter", alice, "h", opDescribe, topic, "a", true},
			{"create does not", alice, "h", opDescribe, topic, "c", false},
			{"describe does not imply read", alice, "h", opRead, topic, "d", false},
			{"alter configs implies describe configs", alice, "h", opDescribeConfigs, topic, "ac", true},
			{"alter configs does not imply describe", alice, "h", opDescribe, topic, "ac", false},
		}},
		{"all", []ACL{acl(cluster, ClusterName, literal, "User:alice", "*", opAll, allow)}, nil, []check{
			{"alter", alice, "h", opAlter, cluster, ClusterName, true},
			{"describe", alice, "h", opDescribe, cluster, ClusterName, true},
		}},
		{"superuser", []ACL{acl(group, "g", literal, "User:root", "*", opAll, deny)}, []Principal{User("root")}, []check{
			{"skips deny", User("root"), "h", opRead, group, "g", true},
			{"anything", User("root"), "h", opAlter, cluster, ClusterName, true},
			{"others not", alice, "h", opRead, group, "g", false},
		}},
	}
	for _, tc := range cases {
		a := NewAuthorizer(storeWith(t, tc.acls...), tc.super)
		for _, c := range tc.checks {
			if got := a.Authorize(c.principal, c.host, c.op, c.rt, c.res); got != c.want {
				t.Errorf("%s / %s: %s %s on %s %q from %s = %v, want %v", tc.name, c.name, c.principal, c.op, c.rt, c.res, c.host, got, c.want)
			}
		}
	}
}

func TestACLValidate(t *testing.T) {
	ok := acl(group, "g", literal, "User:a", "*", opRead, allow)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := map[string]ACL{
		"transactional id": acl(kmsg.ACLResourceTypeTransactionalId, "x", literal, "User:a", "*", opRead, allow),
		"cluster name":     acl(cluster, "c", literal, "User:a", "*", opAlter, allow),
		"match pattern":    acl(group, "g", kmsg.ACLResourcePatternTypeMatch, "User:a", "*", opRead, allow),
		"prefixed *":       acl(group, "*", prefix, "User:a", "*", opRead, allow),
		"principal":        acl(group, "g", literal, "alice", "*", opRead, allow),
		"host":             acl(group, "g", literal, "User:a", "", opRead, allow),
		"op any":           acl(group, "g", literal, "User:a", "*", kmsg.ACLOperationAny, allow),
		"permission any":   acl(group, "g", literal, "User:a", "*", opRead, kmsg.ACLPermissionTypeAny),
		"empty name":       acl(topic, "", literal, "User:a", "*", opRead, allow),
	}
	for name, a := range bad {
		if err := a.Validate(); !errors.Is(err, ErrInvalidACL) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestFilterMatches(t *testing.T) {
	lit := acl(group, "app-1", literal, "User:a", "*", opRead, allow)
	star := acl(group, "*", literal, "User:b", "*", opRead, allow)
	pre := acl(group, "app-", prefix, "User:a", "*", opRead, deny)
	other := acl(topic, "app-1", literal, "User:a", "*", opRead, allow)
	s := storeWith(t, lit, star, pre, other)
	name := func(s string) *string { return &s }
	any := Filter{ResourceType: kmsg.ACLResourceTypeAny, PatternType: kmsg.ACLResourcePatternTypeAny, Operation: kmsg.ACLOperationAny, Permission: kmsg.ACLPermissionTypeAny}
	f := any
	if got := s.Match(f); len(got) != 4 {
		t.Fatalf("any: %v", got)
	}
	f = any
	f.ResourceType, f.ResourceName, f.PatternType = group, name("app-1"), kmsg.ACLResourcePatternTypeMatch
	if got := s.Match(f); len(got) != 3 {
		t.Fatalf("match app-1: %v", got)
	}
	f.PatternType = literal
	if got := s.Match(f); len(got) != 1 || got[0] != lit {
		t.Fatalf("literal app-1: %v", got)
	}
	f = any
	f.Principal, f.Permission = name("User:a"), deny
	if got := s.Match(f); len(got) != 1 || got[0] != pre {
		t.Fatalf("deny of a: %v", got)
	}
	if err := (Filter{}).Validate(); err == nil {
		t.Fatal("a filter of UNKNOWN values is valid")
	}
}

func TestParsePrincipalsAndSuperUsers(t *testing.T) {
	p, err := ParsePrincipal("User:CN=a,O=b")
	if err != nil || p.Type != "User" || p.Name != "CN=a,O=b" {
		t.Fatalf("%+v %v", p, err)
	}
	for _, bad := range []string{"", "alice", ":x", "User:"} {
		if _, err := ParsePrincipal(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	su, err := ParseSuperUsers("User:admin; User:ops")
	if err != nil || len(su) != 2 || su[1] != User("ops") {
		t.Fatalf("%v %v", su, err)
	}
	if _, err := ParseSuperUsers("User:admin;bad"); err == nil {
		t.Fatal("bad super user accepted")
	}
}

func TestParseListeners(t *testing.T) {
	l, err := ParseListeners("PLAINTEXT://127.0.0.1:9092, sasl_ssl://127.0.0.1:9093")
	if err != nil || len(l) != 2 || l[1].Protocol != SASLSSL || !l[1].Protocol.TLS() || !l[1].Protocol.SASL() || l[0].Protocol.SASL() {
		t.Fatalf("%v %v", l, err)
	}
	for _, bad := range []string{"", "127.0.0.1:9092", "KERBEROS://127.0.0.1:1", "SSL://nohost", "SSL://127.0.0.1:1,SSL://127.0.0.1:2"} {
		if _, err := ParseListeners(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}
