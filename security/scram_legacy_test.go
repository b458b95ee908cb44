package security

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/xdg-go/scram"
)

// legacyClientFinal builds the client-final message librdkafka before 2.6.1
// sends: its nonce again in front of the server's nonce, signed as sent.
func legacyClientFinal(t *testing.T, s *Store, first, serverFirst, pass, cnonce string) string {
	t.Helper()
	c, _ := s.Credential("alice", sha256Mech)
	salted, err := SaltPassword(sha256Mech, pass, c.GetSalt(), c.GetIterations())
	if err != nil {
		t.Fatal(err)
	}
	mac := func(key []byte, msg string) []byte {
		w := hmac.New(sha256.New, key)
		w.Write([]byte(msg))
		return w.Sum(nil)
	}
	snonce, _ := attr(serverFirst, "r")
	withoutProof := "c=biws,r=" + cnonce + snonce
	clientKey := mac(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	sig := mac(stored[:], strings.TrimPrefix(first, "n,,")+","+serverFirst+","+withoutProof)
	for i := range sig {
		sig[i] ^= clientKey[i]
	}
	return withoutProof + ",p=" + base64.StdEncoding.EncodeToString(sig)
}

func TestSessionScramLegacyNonce(t *testing.T) {
	store := userStore(t, "alice", "pw", sha256Mech)
	const cnonce = "rOprNGfwEbeRWgbNEkqO"
	first := "n,,n=alice,r=" + cnonce
	run := func(pass, nonce string) ([]byte, error) {
		s := NewSession(nil, store)
		if err := s.Handshake(MechanismScramSHA256); err != nil {
			t.Fatal(err)
		}
		sf, err := s.Authenticate([]byte(first))
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.Authenticate([]byte(legacyClientFinal(t, store, first, string(sf), pass, nonce)))
		if err == nil && (s.Phase() != Authenticated || s.Principal() != User("alice")) {
			t.Fatalf("phase %v principal %v", s.Phase(), s.Principal())
		}
		return out, err
	}
	out, err := run("pw", cnonce)
	if err != nil || !strings.HasPrefix(string(out), "v=") {
		t.Fatalf("librdkafka's form: %q %v", out, err)
	}
	if _, err := run("nope", cnonce); !errors.Is(err, ErrAuthenticationFailed) {
		t.Fatalf("wrong password in the legacy form: %v", err)
	}
	if _, err := run("pw", "other"); !errors.Is(err, ErrAuthenticationFailed) {
		t.Fatalf("another prefix: %v", err)
	}
	// The correct nonce form still goes through the library.
	s := NewSession(nil, store)
	s.Handshake(MechanismScramSHA256)
	if err := scramExchange(t, s, scram.SHA256, "alice", "pw", ""); err != nil {
		t.Fatal(err)
	}
}
