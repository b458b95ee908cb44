package security

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/xdg-go/scram"
	"google.golang.org/protobuf/proto"

	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
)

var (
	sha256Mech = securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_256
	sha512Mech = securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512
)

func userStore(t *testing.T, user, pass string, mechs ...securitypb.ScramMechanism) *Store {
	t.Helper()
	s := NewStore()
	for _, m := range mechs {
		c, err := NewCredential(user, m, pass, MinIterations)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ApplyScram(&securitypb.ScramChange{Upserts: []*securitypb.ScramCredential{c}}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// scramExchange runs a client conversation against a session and returns
// the session's error.
func scramExchange(t *testing.T, s *Session, hash scram.HashGeneratorFcn, user, pass, authz string) error {
	t.Helper()
	cl, err := hash.NewClient(user, pass, authz)
	if err != nil {
		t.Fatal(err)
	}
	conv := cl.NewConversation()
	msg, _ := conv.Step("")
	for !conv.Done() {
		out, err := s.Authenticate([]byte(msg))
		if err != nil {
			return err
		}
		if msg, err = conv.Step(string(out)); err != nil {
			t.Fatalf("client step: %v", err)
		}
	}
	if !conv.Valid() {
		t.Fatal("the client does not accept the server's signature")
	}
	return nil
}

func TestSessionScram(t *testing.T) {
	store := userStore(t, "alice", "pw", sha256Mech, sha512Mech)
	for _, tc := range []struct {
		mech string
		hash scram.HashGeneratorFcn
	}{{MechanismScramSHA256, scram.SHA256}, {MechanismScramSHA512, scram.SHA512}} {
		s := NewSession(nil, store)
		if s.Phase() != WantHandshake {
			t.Fatal("a new session does not want a handshake")
		}
		if err := s.Handshake(tc.mech); err != nil || s.Phase() != WantAuthenticate {
			t.Fatalf("%s handshake: %v", tc.mech, err)
		}
		if err := scramExchange(t, s, tc.hash, "alice", "pw", ""); err != nil {
			t.Fatalf("%s: %v", tc.mech, err)
		}
		if s.Phase() != Authenticated || s.Principal() != User("alice") {
			t.Fatalf("%s: phase %v principal %v", tc.mech, s.Phase(), s.Principal())
		}
		// Nothing more may be exchanged.
		if _, err := s.Authenticate([]byte("x")); !errors.Is(err, ErrIllegalState) || s.Phase() != Failed {
			t.Fatalf("%s: step after success: %v", tc.mech, err)
		}
	}
	for name, run := range map[string]func(s *Session) error{
		"wrong password": func(s *Session) error { return scramExchange(t, s, scram.SHA512, "alice", "nope", "") },
		"unknown user":   func(s *Session) error { return scramExchange(t, s, scram.SHA512, "bob", "pw", "") },
		"other authzid":  func(s *Session) error { return scramExchange(t, s, scram.SHA512, "alice", "pw", "root") },
		"garbage":        func(s *Session) error { _, err := s.Authenticate([]byte("\x00\xffgarbage")); return err },
		"bad final": func(s *Session) error {
			cl, _ := scram.SHA512.NewClient("alice", "pw", "")
			first, _ := cl.NewConversation().Step("")
			if _, err := s.Authenticate([]byte(first)); err != nil {
				return err
			}
			_, err := s.Authenticate([]byte("c=biws,r=wrongnonce,p=AAAA"))
			return err
		},
	} {
		s := NewSession(nil, store)
		if err := s.Handshake(MechanismScramSHA512); err != nil {
			t.Fatal(err)
		}
		if err := run(s); !errors.Is(err, ErrAuthenticationFailed) || s.Phase() != Failed {
			t.Errorf("%s: %v, phase %v", name, err, s.Phase())
		}
	}
	// A user with only a SCRAM-SHA-256 credential cannot use SCRAM-SHA-512.
	only256 := userStore(t, "carol", "pw", sha256Mech)
	s := NewSession(nil, only256)
	s.Handshake(MechanismScramSHA512)
	if err := scramExchange(t, s, scram.SHA512, "carol", "pw", ""); !errors.Is(err, ErrAuthenticationFailed) {
		t.Fatalf("SHA-512 without its credential: %v", err)
	}
}

func TestSessionPlain(t *testing.T) {
	store := userStore(t, "alice", "pw", sha256Mech)
	tok := func(parts ...string) []byte { return []byte(strings.Join(parts, "\x00")) }
	for name, tc := range map[string]struct {
		token []byte
		ok    bool
	}{
		"ok":              {tok("", "alice", "pw"), true},
		"authzid is user": {tok("alice", "alice", "pw"), true},
		"other authzid":   {tok("root", "alice", "pw"), false},
		"wrong password":  {tok("", "alice", "pW"), false},
		"unknown user":    {tok("", "bob", "pw"), false},
		"empty password":  {tok("", "alice", ""), false},
		"two parts":       {tok("alice", "pw"), false},
		"four parts":      {tok("", "alice", "pw", "x"), false},
		"empty":           {nil, false},
	} {
		s := NewSession(nil, store)
		if err := s.Handshake(MechanismPlain); err != nil {
			t.Fatal(err)
		}
		out, err := s.Authenticate(tc.token)
		if tc.ok != (err == nil) || len(out) != 0 {
			t.Errorf("%s: %v %q", name, err, out)
			continue
		}
		want := Failed
		if tc.ok {
			want = Authenticated
		}
		if s.Phase() != want {
			t.Errorf("%s: phase %v", name, s.Phase())
		}
	}
}

func TestSessionOrder(t *testing.T) {
	store := userStore(t, "alice", "pw", sha256Mech)
	s := NewSession(nil, store)
	if _, err := s.Authenticate([]byte("\x00alice\x00pw")); !errors.Is(err, ErrIllegalState) || s.Phase() != Failed {
		t.Fatalf("authenticate before handshake: %v", err)
	}
	s = NewSession([]string{MechanismScramSHA256}, store)
	if err := s.Handshake(MechanismPlain); !errors.Is(err, ErrUnsupportedMechanism) || s.Phase() != Failed {
		t.Fatalf("disabled mechanism: %v", err)
	}
	s = NewSession(nil, store)
	s.Handshake(MechanismPlain)
	if err := s.Handshake(MechanismPlain); !errors.Is(err, ErrIllegalState) {
		t.Fatalf("second handshake: %v", err)
	}
}

func TestCredentialDerivation(t *testing.T) {
	// The stored keys of a salted password are RFC 5802's: the xdg-go
	// client derives the same from the password.
	salt := []byte("NaCl-salt")
	for _, tc := range []struct {
		m    securitypb.ScramMechanism
		hash scram.HashGeneratorFcn
	}{{sha256Mech, scram.SHA256}, {sha512Mech, scram.SHA512}} {
		salted, err := SaltPassword(tc.m, "pencil", salt, 4096)
		if err != nil {
			t.Fatal(err)
		}
		c, err := CredentialFromSalted("u", tc.m, salt, 4096, salted)
		if err != nil {
			t.Fatal(err)
		}
		cl, _ := tc.hash.NewClient("u", "pencil", "")
		want, err := cl.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: 4096})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(c.GetStoredKey(), want.StoredKey) || !bytes.Equal(c.GetServerKey(), want.ServerKey) {
			t.Fatalf("%v: keys differ from xdg-go's", tc.m)
		}
		if bytes.Contains(mustMarshal(t, c), salted) {
			t.Fatal("the stored credential holds the salted password")
		}
		if !verifyPassword(c, "pencil") || verifyPassword(c, "pencil2") {
			t.Fatal("verifyPassword")
		}
	}
	for name, f := range map[string]func() error{
		"few iterations": func() error {
			_, err := CredentialFromSalted("u", sha256Mech, salt, 4095, make([]byte, 32))
			return err
		},
		"many iterations": func() error {
			_, err := CredentialFromSalted("u", sha256Mech, salt, 16385, make([]byte, 32))
			return err
		},
		"size": func() error {
			_, err := CredentialFromSalted("u", sha512Mech, salt, 4096, make([]byte, 32))
			return err
		},
		"no salt":   func() error { _, err := CredentialFromSalted("u", sha256Mech, nil, 4096, make([]byte, 32)); return err },
		"mechanism": func() error { _, err := CredentialFromSalted("u", 0, salt, 4096, make([]byte, 32)); return err },
	} {
		if err := f(); !errors.Is(err, ErrUnacceptableCredential) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStoreChangesAndRestore(t *testing.T) {
	s := userStore(t, "bob", "pw", sha512Mech, sha256Mech)
	a := userStore(t, "alice", "pw", sha256Mech)
	c, _ := a.Credential("alice", sha256Mech)
	if err := s.ApplyScram(&securitypb.ScramChange{Upserts: []*securitypb.ScramCredential{c},
		Deletions: []*securitypb.ScramDeletion{{User: "bob", Mechanism: sha512Mech}, {User: "nobody", Mechanism: sha256Mech}}}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range s.Credentials() {
		got = append(got, c.GetUser()+"/"+MechanismName(c.GetMechanism()))
	}
	if strings.Join(got, ",") != "alice/SCRAM-SHA-256,bob/SCRAM-SHA-256" {
		t.Fatalf("credentials %v", got)
	}
	if err := s.ApplyScram(&securitypb.ScramChange{Upserts: []*securitypb.ScramCredential{{User: "x"}}}); !errors.Is(err, ErrBadChange) {
		t.Fatalf("credential without keys: %v", err)
	}
	a1 := acl(group, "g", literal, "User:a", "*", opRead, allow)
	a2 := acl(topic, "t", prefix, "User:b", "*", opRead, deny)
	v := s.ACLVersion()
	if err := s.ApplyACL(&securitypb.AclChange{Creates: []*securitypb.AclBinding{a2.Proto(), a1.Proto(), a1.Proto()}}); err != nil {
		t.Fatal(err)
	}
	if s.ACLVersion() == v || len(s.ACLs()) != 2 || s.ACLs()[0] != a2 {
		t.Fatalf("acls %v (sorted by resource type, duplicates once)", s.ACLs())
	}
	if err := s.ApplyACL(&securitypb.AclChange{Creates: []*securitypb.AclBinding{{ResourceType: 99}}}); !errors.Is(err, ErrBadChange) {
		t.Fatalf("invalid binding: %v", err)
	}
	if err := s.ApplyACL(&securitypb.AclChange{Deletes: []*securitypb.AclBinding{a2.Proto()}}); err != nil || len(s.ACLs()) != 1 {
		t.Fatalf("delete: %v %v", err, s.ACLs())
	}
	// Restore gives the same state back, in the same order.
	var bindings []*securitypb.AclBinding
	for _, a := range s.ACLs() {
		bindings = append(bindings, a.Proto())
	}
	r := NewStore()
	r.Restore(s.Credentials(), bindings)
	if len(r.Credentials()) != 2 || !proto.Equal(r.Credentials()[0], s.Credentials()[0]) || len(r.ACLs()) != 1 || r.ACLs()[0] != a1 {
		t.Fatal("restore differs")
	}
}
