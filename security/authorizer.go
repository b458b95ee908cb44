package security

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Principal is who a connection acts as, in Kafka's "Type:name" form.
type Principal struct {
	Type string // "User"
	Name string
}

// Anonymous is the principal of a connection that did not authenticate.
var Anonymous = Principal{Type: "User", Name: "ANONYMOUS"}

// User is the principal of an authenticated user name.
func User(name string) Principal { return Principal{Type: "User", Name: name} }

func (p Principal) String() string { return p.Type + ":" + p.Name }

// ParsePrincipal parses "Type:name" (Kafka's form; the name may hold colons).
func ParsePrincipal(s string) (Principal, error) {
	t, name, ok := strings.Cut(s, ":")
	if !ok || t == "" || name == "" {
		return Principal{}, fmt.Errorf("principal %q is not Type:name", s)
	}
	return Principal{Type: t, Name: name}, nil
}

// ParseSuperUsers parses Kafka's super.users: principals separated by ';'
// (',' is accepted too).
func ParseSuperUsers(s string) ([]Principal, error) {
	var out []Principal
	var errs []error
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ';' || r == ',' }) {
		p, err := ParsePrincipal(strings.TrimSpace(f))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// ACLSource gives the current bindings (Store).
type ACLSource interface {
	acls() *aclSet
}

// Authorizer decides requests with Kafka's rules: a superuser may do
// anything; otherwise a DENY binding that matches wins; otherwise an ALLOW
// binding that matches allows; otherwise the request is refused (Kafka's
// allow.everyone.if.no.acl.found=false). A binding matches a request when
// its pattern covers the resource (literal of that name or "*", prefixed of
// a prefix of it), its principal is the caller or User:*, its host the
// caller's or *, and its operation the one asked for or ALL. An ALLOW of
// READ, WRITE, DELETE or ALTER also allows DESCRIBE, and one of
// ALTER_CONFIGS also allows DESCRIBE_CONFIGS.
type Authorizer struct {
	super map[Principal]bool
	src   ACLSource
}

// NewAuthorizer returns an authorizer over the bindings of src.
func NewAuthorizer(src ACLSource, superUsers []Principal) *Authorizer {
	a := &Authorizer{super: map[Principal]bool{}, src: src}
	for _, p := range superUsers {
		a.super[p] = true
	}
	return a
}

// SuperUser reports whether p skips every check.
func (a *Authorizer) SuperUser(p Principal) bool { return a.super[p] }

// Authorize reports whether p, connected from host (an IP, no port), may
// perform op on the resource.
func (a *Authorizer) Authorize(p Principal, host string, op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	if a.super[p] {
		return true
	}
	set := a.src.acls()
	if set == nil || set.byType[rt] == nil {
		return false
	}
	allowed, denied := false, false
	set.byType[rt].candidates(name, func(b ACL) bool {
		if !isPrincipal(b.Principal, p) && b.Principal != WildcardPrincipal {
			return true
		}
		if b.Host != host && b.Host != WildcardHost {
			return true
		}
		if b.Permission == kmsg.ACLPermissionTypeDeny {
			if b.Operation == op || b.Operation == kmsg.ACLOperationAll {
				denied = true
				return false
			}
			return true
		}
		allowed = allowed || grants(b.Operation, op)
		return true
	})
	return allowed && !denied
}

// isPrincipal reports whether s is p's "Type:name" (without building it).
func isPrincipal(s string, p Principal) bool {
	return len(s) == len(p.Type)+1+len(p.Name) && strings.HasPrefix(s, p.Type) && s[len(p.Type)] == ':' && strings.HasSuffix(s, p.Name)
}

// grants reports whether an ALLOW of have allows want.
func grants(have, want kmsg.ACLOperation) bool {
	if have == want || have == kmsg.ACLOperationAll {
		return true
	}
	switch want {
	case kmsg.ACLOperationDescribe:
		switch have {
		case kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationDelete, kmsg.ACLOperationAlter:
			return true
		}
	case kmsg.ACLOperationDescribeConfigs:
		return have == kmsg.ACLOperationAlterConfigs
	}
	return false
}
