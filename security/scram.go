package security

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"

	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
)

// SASL mechanism names.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// Mechanisms are every mechanism cohort serves, in the order a handshake
// lists them.
var Mechanisms = []string{MechanismScramSHA512, MechanismScramSHA256, MechanismPlain}

// Kafka's bounds on SCRAM iterations (ScramMechanism.minIterations and
// AlterUserScramCredentials' maximum).
const (
	MinIterations     = 4096
	MaxIterations     = 16384
	DefaultIterations = 8192
)

// ErrUnacceptableCredential: an upsert Kafka refuses (UNACCEPTABLE_CREDENTIAL).
var ErrUnacceptableCredential = errors.New("unacceptable credential")

// ScramMechanism is the replicated code of a SCRAM mechanism name; ok is
// false for other names.
func ScramMechanism(name string) (m securitypb.ScramMechanism, ok bool) {
	switch name {
	case MechanismScramSHA256:
		return securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_256, true
	case MechanismScramSHA512:
		return securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512, true
	}
	return 0, false
}

// MechanismName is the SASL name of a SCRAM mechanism code, "" if unknown.
func MechanismName(m securitypb.ScramMechanism) string {
	switch m {
	case securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_256:
		return MechanismScramSHA256
	case securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512:
		return MechanismScramSHA512
	}
	return ""
}

func hashOf(m securitypb.ScramMechanism) func() hash.Hash {
	if m == securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512 {
		return sha512.New
	}
	return sha256.New
}

// CredentialFromSalted derives what the server stores from a salted password
// (what AlterUserScramCredentials carries): StoredKey = H(HMAC(salted,
// "Client Key")) and ServerKey = HMAC(salted, "Server Key") (RFC 5802). The
// salted password itself is not kept.
func CredentialFromSalted(user string, m securitypb.ScramMechanism, salt []byte, iterations int32, salted []byte) (*securitypb.ScramCredential, error) {
	if MechanismName(m) == "" {
		return nil, fmt.Errorf("%w: unknown mechanism %v", ErrUnacceptableCredential, m)
	}
	if iterations < MinIterations || iterations > MaxIterations {
		return nil, fmt.Errorf("%w: iterations %d outside [%d, %d]", ErrUnacceptableCredential, iterations, MinIterations, MaxIterations)
	}
	h := hashOf(m)
	if len(salt) == 0 || len(salted) != h().Size() {
		return nil, fmt.Errorf("%w: empty salt or salted password of the wrong size", ErrUnacceptableCredential)
	}
	mac := func(key []byte, msg string) []byte {
		w := hmac.New(h, key)
		w.Write([]byte(msg))
		return w.Sum(nil)
	}
	d := h()
	d.Write(mac(salted, "Client Key"))
	return &securitypb.ScramCredential{
		User: user, Mechanism: m, Salt: salt, Iterations: iterations,
		StoredKey: d.Sum(nil), ServerKey: mac(salted, "Server Key"),
	}, nil
}

// SaltPassword is PBKDF2 of the password with the mechanism's hash (what a
// client such as kadm computes before AlterUserScramCredentials).
func SaltPassword(m securitypb.ScramMechanism, password string, salt []byte, iterations int32) ([]byte, error) {
	h := hashOf(m)
	return pbkdf2.Key(h, password, salt, int(iterations), h().Size())
}

// NewCredential salts a password with a fresh random salt and derives the
// stored credential (the bootstrap user; tests).
func NewCredential(user string, m securitypb.ScramMechanism, password string, iterations int32) (*securitypb.ScramCredential, error) {
	salt := make([]byte, 24)
	if _, err := rand.Read(salt); err != nil {
		return nil, err
	}
	salted, err := SaltPassword(m, password, salt, iterations)
	if err != nil {
		return nil, err
	}
	return CredentialFromSalted(user, m, salt, iterations, salted)
}

// verifyPassword reports whether password is the one c was derived from.
func verifyPassword(c *securitypb.ScramCredential, password string) bool {
	salted, err := SaltPassword(c.GetMechanism(), password, c.GetSalt(), c.GetIterations())
	if err != nil {
		return false
	}
	got, err := CredentialFromSalted(c.GetUser(), c.GetMechanism(), c.GetSalt(), c.GetIterations(), salted)
	if err != nil {
		return false
	}
	return hmac.Equal(got.GetStoredKey(), c.GetStoredKey())
}
