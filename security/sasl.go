package security

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"

	"github.com/xdg-go/scram"

	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
)

// SASL errors. A Kafka listener answers them with UNSUPPORTED_SASL_MECHANISM,
// ILLEGAL_SASL_STATE and SASL_AUTHENTICATION_FAILED, then closes the
// connection. Their texts never carry a secret.
var (
	ErrUnsupportedMechanism = errors.New("unsupported SASL mechanism")
	ErrIllegalState         = errors.New("request is not valid given the current SASL state")
	ErrAuthenticationFailed = errors.New("authentication failed: invalid username or password")
)

// Credentials looks up a user's stored SCRAM credential (Store).
type Credentials interface {
	Credential(user string, mech securitypb.ScramMechanism) (*securitypb.ScramCredential, bool)
}

// Phase is where a SASL session stands.
type Phase int

const (
	// WantHandshake: only ApiVersions and SaslHandshake may come.
	WantHandshake Phase = iota
	// WantAuthenticate: only ApiVersions and SaslAuthenticate (or, after a
	// v0 handshake, raw SASL tokens) may come.
	WantAuthenticate
	// Authenticated: the connection acts as Principal.
	Authenticated
	// Failed: nothing more is served; the connection closes.
	Failed
)

// Session is the SASL state machine of one connection, as Kafka's
// SaslServerAuthenticator runs it: a handshake picks a mechanism, then
// authenticate steps run its exchange until it succeeds or fails. Any step
// out of order fails the session.
type Session struct {
	mechs []string
	creds Credentials

	phase     Phase
	mech      string
	conv      *scram.ServerConversation
	principal Principal
	user      string // the user name an exchange claimed, for logs
	// The SCRAM first messages, for legacyFinal.
	clientFirst, serverFirst string
}

// NewSession starts a session that accepts the given mechanisms (nil: all
// of Mechanisms) against creds.
func NewSession(mechs []string, creds Credentials) *Session {
	if mechs == nil {
		mechs = Mechanisms
	}
	return &Session{mechs: mechs, creds: creds}
}

// Phase is where the session stands.
func (s *Session) Phase() Phase { return s.phase }

// Mechanisms are the mechanisms the session accepts (a handshake's answer).
func (s *Session) Mechanisms() []string { return s.mechs }

// Mechanism is the mechanism the handshake chose.
func (s *Session) Mechanism() string { return s.mech }

// Principal is who the connection authenticated as.
func (s *Session) Principal() Principal { return s.principal }

// User is the user name the exchange claimed (also after a failure); it is
// not a secret and may be logged.
func (s *Session) User() string { return s.user }

// Handshake chooses the mechanism.
func (s *Session) Handshake(mech string) error {
	if s.phase != WantHandshake {
		s.phase = Failed
		return ErrIllegalState
	}
	if !slices.Contains(s.mechs, mech) {
		s.phase = Failed
		return ErrUnsupportedMechanism
	}
	s.mech = mech
	if m, ok := ScramMechanism(mech); ok {
		srv, err := newScramServer(m, s.creds)
		if err != nil {
			s.phase = Failed
			return err
		}
		s.conv = srv.NewConversation()
	}
	s.phase = WantAuthenticate
	return nil
}

// Authenticate runs one step of the exchange with the client's token and
// returns the server's answer (empty for PLAIN). On success the phase is
// Authenticated; on any error it is Failed.
func (s *Session) Authenticate(token []byte) ([]byte, error) {
	if s.phase != WantAuthenticate {
		s.phase = Failed
		return nil, ErrIllegalState
	}
	if s.mech == MechanismPlain {
		return nil, s.plain(token)
	}
	out, err := s.conv.Step(string(token))
	if err != nil && s.serverFirst != "" {
		// librdkafka before 2.6.1 sends its nonce twice; see legacyFinal.
		out, err = s.legacyFinal(string(token))
		if err == nil {
			s.principal = User(s.user)
			s.phase = Authenticated
			return []byte(out), nil
		}
	}
	if err == nil && s.clientFirst == "" {
		s.clientFirst, s.serverFirst = string(token), out
	}
	if s.user == "" {
		s.user = s.conv.Username()
	}
	if err != nil {
		s.phase = Failed
		return nil, ErrAuthenticationFailed
	}
	if s.conv.Done() {
		if !s.conv.Valid() || (s.conv.AuthzID() != "" && s.conv.AuthzID() != s.conv.Username()) {
			s.phase = Failed
			return nil, ErrAuthenticationFailed
		}
		s.principal = User(s.conv.Username())
		s.phase = Authenticated
	}
	return []byte(out), nil
}

// plain checks "authzid NUL authcid NUL password" (RFC 4616) against the
// stored SCRAM credentials: the authorization id must be empty or the user.
func (s *Session) plain(token []byte) error {
	s.phase = Failed
	parts := bytes.Split(token, []byte{0})
	if len(parts) != 3 {
		return ErrAuthenticationFailed
	}
	authz, user, pass := string(parts[0]), string(parts[1]), string(parts[2])
	s.user = user
	if user == "" || pass == "" || (authz != "" && authz != user) {
		return ErrAuthenticationFailed
	}
	for _, m := range []securitypb.ScramMechanism{securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512, securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_256} {
		if c, ok := s.creds.Credential(user, m); ok {
			if !verifyPassword(c, pass) {
				return ErrAuthenticationFailed
			}
			s.principal = User(user)
			s.phase = Authenticated
			return nil
		}
	}
	return ErrAuthenticationFailed
}

func newScramServer(m securitypb.ScramMechanism, creds Credentials) (*scram.Server, error) {
	lookup := func(user string) (scram.StoredCredentials, error) {
		c, ok := creds.Credential(user, m)
		if !ok {
			return scram.StoredCredentials{}, ErrAuthenticationFailed
		}
		return scram.StoredCredentials{
			KeyFactors: scram.KeyFactors{Salt: string(c.GetSalt()), Iters: int(c.GetIterations())},
			StoredKey:  c.GetStoredKey(),
			ServerKey:  c.GetServerKey(),
		}, nil
	}
	hash := scram.SHA256
	if m == securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512 {
		hash = scram.SHA512
	}
	srv, err := hash.NewServer(lookup)
	if err != nil {
		return nil, err
	}
	return srv.WithNonceGenerator(serverNonce), nil
}

// serverNonce is the server's part of a SCRAM nonce: 24 random bytes in
// hex. Base64 nonces (the library's default) hold '+' and '/', which
// librdkafka 2.0 does not send back unchanged in its client-final message;
// Kafka's own nonces are alphanumeric too.
func serverNonce() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail
	}
	return hex.EncodeToString(b)
}

// Fail ends the session: nothing more is served.
func (s *Session) Fail() { s.phase = Failed }
