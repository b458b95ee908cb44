package security

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
)

// ErrBadChange: a replicated change that every replica refuses the same way.
var ErrBadChange = errors.New("security: bad change")

type credKey struct {
	user string
	mech securitypb.ScramMechanism
}

// Store is the replicated security state of one node: SCRAM credentials and
// ACL bindings. The Raft FSM applies changes to it (in log order, on the
// apply goroutine); readers (authentication, authorization) see immutable
// copies without locks.
type Store struct {
	mu    sync.Mutex // serializes writers
	creds atomic.Pointer[map[credKey]*securitypb.ScramCredential]
	set   atomic.Pointer[aclSet]
	// version counts changes to the ACLs, so callers can cache decisions.
	version atomic.Uint64
}

// NewStore returns an empty store.
func NewStore() *Store {
	s := &Store{}
	empty := map[credKey]*securitypb.ScramCredential{}
	s.creds.Store(&empty)
	s.set.Store(newACLSet(nil))
	return s
}

func (s *Store) acls() *aclSet { return s.set.Load() }

// ACLVersion changes whenever the bindings change.
func (s *Store) ACLVersion() uint64 { return s.version.Load() }

// ApplyScram applies a validated AlterUserScramCredentials change. Deleting
// a credential that does not exist changes nothing.
func (s *Store) ApplyScram(c *securitypb.ScramChange) error {
	for _, u := range c.GetUpserts() {
		if u.GetUser() == "" || MechanismName(u.GetMechanism()) == "" || len(u.GetStoredKey()) == 0 || len(u.GetServerKey()) == 0 {
			return fmt.Errorf("%w: scram credential for %q", ErrBadChange, u.GetUser())
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next := maps.Clone(*s.creds.Load())
	for _, d := range c.GetDeletions() {
		delete(next, credKey{d.GetUser(), d.GetMechanism()})
	}
	for _, u := range c.GetUpserts() {
		next[credKey{u.GetUser(), u.GetMechanism()}] = u
	}
	s.creds.Store(&next)
	return nil
}

// ApplyACL applies a change of bindings: deletes first, then creates.
func (s *Store) ApplyACL(c *securitypb.AclChange) error {
	var creates, deletes []ACL
	for _, b := range c.GetCreates() {
		a := ACLFromProto(b)
		if err := a.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrBadChange, err)
		}
		creates = append(creates, a)
	}
	for _, b := range c.GetDeletes() {
		deletes = append(deletes, ACLFromProto(b))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.set.Store(s.set.Load().with(creates, deletes))
	s.version.Add(1)
	return nil
}

// Credential returns a user's stored credential for a mechanism.
func (s *Store) Credential(user string, mech securitypb.ScramMechanism) (*securitypb.ScramCredential, bool) {
	c, ok := (*s.creds.Load())[credKey{user, mech}]
	return c, ok
}

// Credentials returns every credential, sorted by user and mechanism (the
// snapshot order).
func (s *Store) Credentials() []*securitypb.ScramCredential {
	m := *s.creds.Load()
	out := slices.Collect(maps.Values(m))
	slices.SortFunc(out, func(a, b *securitypb.ScramCredential) int {
		return cmp.Or(cmp.Compare(a.GetUser(), b.GetUser()), cmp.Compare(a.GetMechanism(), b.GetMechanism()))
	})
	return out
}

// ACLs returns every binding, sorted (the snapshot order).
func (s *Store) ACLs() []ACL { return slices.Clone(s.set.Load().all) }

// Match returns the bindings a filter selects, sorted.
func (s *Store) Match(f Filter) []ACL {
	var out []ACL
	for _, a := range s.set.Load().all {
		if f.Matches(a) {
			out = append(out, a)
		}
	}
	return out
}

// Restore replaces the whole state (a snapshot restore).
func (s *Store) Restore(creds []*securitypb.ScramCredential, acls []*securitypb.AclBinding) {
	m := make(map[credKey]*securitypb.ScramCredential, len(creds))
	for _, c := range creds {
		m[credKey{c.GetUser(), c.GetMechanism()}] = c
	}
	set := make([]ACL, 0, len(acls))
	for _, b := range acls {
		set = append(set, ACLFromProto(b))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creds.Store(&m)
	s.set.Store(newACLSet(set))
	s.version.Add(1)
}
