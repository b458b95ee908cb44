package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// Security configures authentication and authorization of a listener.
type Security struct {
	// SASL makes connections authenticate (SaslHandshake, SaslAuthenticate)
	// with one of Mechanisms (nil: all of security.Mechanisms) before any
	// request but ApiVersions.
	SASL       bool
	Mechanisms []string
	// Store holds the credentials and ACLs (the replicated state).
	Store *security.Store
	// Authorizer, when set, checks requests against the ACLs; nil allows
	// everything.
	Authorizer *security.Authorizer
	// Admin applies credential and ACL changes; nil refuses them.
	Admin SecurityAdmin
}

// SecurityAdmin applies security changes through the replicated log (on
// the leader, forwarded from other nodes), returning once applied here.
type SecurityAdmin interface {
	ChangeScram(ctx context.Context, c *securitypb.ScramChange) error
	ChangeACL(ctx context.Context, c *securitypb.AclChange) error
}

// errBeforeAuth: a request other than ApiVersions or SASL on a connection
// that has not authenticated; Kafka closes such connections.
var errBeforeAuth = errors.New("request before SASL authentication")

// errCloseAfterAnswers ends the reader once the connection must close after
// its queued answers are written (a failed SASL exchange).
var errCloseAfterAnswers = errors.New("closing after the queued answers")

// initAuth sets the connection's principal and SASL session.
func (c *conn) initAuth() {
	c.principal = security.Anonymous
	if sec := c.l.cfg.Security; sec != nil && sec.SASL {
		c.sasl = security.NewSession(sec.Mechanisms, sec.Store)
	}
}

// tlsPrincipal takes the principal of a verified client certificate
// (tlsconfig.PrincipalFromConn: User:<common name>) once the TLS handshake
// completed; SASL replaces it on a SASL_SSL listener.
func (c *conn) tlsPrincipal() {
	if c.tls == nil {
		return
	}
	if p, err := security.ParsePrincipal(tlsconfig.PrincipalFromConn(c.tls)); err == nil {
		c.principal = p
	}
}

// authenticating reports whether the connection must still authenticate.
func (c *conn) authenticating() bool {
	return c.sasl != nil && c.sasl.Phase() != security.Authenticated
}

// saslRequest serves a request of a connection that has not authenticated:
// SaslHandshake and SaslAuthenticate advance the session, anything else
// closes the connection. A failed step is answered, then the connection
// closes.
func (c *conn) saslRequest(h header, body []byte) error {
	var resp kmsg.Response
	var failed error
	switch h.key {
	case kmsg.SASLHandshake.Int16():
		req := kmsg.NewPtrSASLHandshakeRequest()
		if err := c.decodeSASL(h, req, body); err != nil {
			return err
		}
		r := kmsg.NewPtrSASLHandshakeResponse()
		r.SupportedMechanisms = c.sasl.Mechanisms()
		c.saslMech = req.Mechanism
		if err := c.sasl.Handshake(req.Mechanism); err != nil {
			r.ErrorCode, failed = saslCode(err), err
		} else if h.version == 0 {
			c.saslRaw = true
		}
		resp = r
	case kmsg.SASLAuthenticate.Int16():
		req := kmsg.NewPtrSASLAuthenticateRequest()
		if err := c.decodeSASL(h, req, body); err != nil {
			return err
		}
		r := kmsg.NewPtrSASLAuthenticateResponse()
		out, err := c.sasl.Authenticate(req.SASLAuthBytes)
		if err != nil {
			r.ErrorCode, failed = saslCode(err), err
			r.ErrorMessage = kmsg.StringPtr(err.Error())
		}
		r.SASLAuthBytes = out
		resp = r
	default:
		c.sasl.Fail()
		return fmt.Errorf("%w: %s", errBeforeAuth, kmsg.NameForKey(h.key))
	}
	resp.SetVersion(h.version)
	p := &pending{corr: h.corr, key: h.key, resp: resp, last: failed != nil}
	c.logSASL(failed)
	if err := c.enqueue(p); err != nil {
		return err
	}
	if failed != nil {
		return errCloseAfterAnswers
	}
	return nil
}

func (c *conn) decodeSASL(h header, req kmsg.Request, body []byte) error {
	if h.version < 0 || h.version > req.MaxVersion() || h.version > c.l.apis[h.key].max {
		c.sasl.Fail()
		return fmt.Errorf("%w: api key %d version %d", errBadInput, h.key, h.version)
	}
	req.SetVersion(h.version)
	if req.IsFlexible() {
		c.tags = tagReader{src: body}
		kmsg.SkipTags(&c.tags)
		if c.tags.bad {
			c.sasl.Fail()
			return fmt.Errorf("%w: request header tags", errBadInput)
		}
		body = c.tags.src
	}
	if err := req.ReadFrom(body); err != nil {
		c.sasl.Fail()
		return fmt.Errorf("%w: decode %s v%d: %v", errBadInput, kmsg.NameForKey(h.key), h.version, err)
	}
	return nil
}

// saslToken serves one raw SASL token (after a SaslHandshake v0, the
// exchange is not framed as Kafka requests). A failure closes the
// connection without an answer, as Kafka does.
func (c *conn) saslToken(token []byte) error {
	out, err := c.sasl.Authenticate(token)
	c.logSASL(err)
	if err != nil {
		return err
	}
	if c.sasl.Phase() == security.Authenticated {
		c.saslRaw = false
	}
	return c.enqueue(&pending{raw: true, token: out})
}

// logSASL counts and logs an authentication's outcome: the mechanism and
// the user name, never a token.
func (c *conn) logSASL(err error) {
	switch {
	case err != nil:
		c.l.authFailures.Add(1)
		c.l.saslOutcome(c.nc.RemoteAddr().String(), cmp.Or(c.sasl.Mechanism(), c.saslMech), c.sasl.User(), err, security.Principal{})
	case c.sasl.Phase() == security.Authenticated:
		c.principal = c.sasl.Principal()
		c.l.saslOutcome(c.nc.RemoteAddr().String(), c.sasl.Mechanism(), c.sasl.User(), nil, c.principal)
	}
}

func saslCode(err error) int16 {
	switch {
	case errors.Is(err, security.ErrUnsupportedMechanism):
		return kerr.UnsupportedSaslMechanism.Code
	case errors.Is(err, security.ErrIllegalState):
		return kerr.IllegalSaslState.Code
	default:
		return kerr.SaslAuthenticationFailed.Code
	}
}

// saslHandshake and saslAuthenticate answer SASL requests outside the
// handshake phase (a listener without SASL, an authenticated connection):
// ILLEGAL_SASL_STATE, as Kafka does without re-authentication.
func (l *Listener) saslHandshake(_ context.Context, _ *request, _ *kmsg.SASLHandshakeRequest) kmsg.Response {
	r := kmsg.NewPtrSASLHandshakeResponse()
	r.ErrorCode = kerr.IllegalSaslState.Code
	return r
}

func (l *Listener) saslAuthenticate(_ context.Context, _ *request, _ *kmsg.SASLAuthenticateRequest) kmsg.Response {
	r := kmsg.NewPtrSASLAuthenticateResponse()
	r.ErrorCode = kerr.IllegalSaslState.Code
	r.ErrorMessage = kmsg.StringPtr(security.ErrIllegalState.Error())
	return r
}

// authorize reports whether the connection's principal may perform op on
// the resource; true when authorization is off. A denial is counted and
// logged (audit.go).
func (r *request) authorize(op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	if r.may(op, rt, name) {
		return true
	}
	r.denied(op, rt, name)
	return false
}

// may is authorize without counting or logging a denial: for answers that
// only describe what is allowed (authorized_operations) or leave out what is
// not (listings), as Kafka's authorizer does not log those either.
func (r *request) may(op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) bool {
	a := r.c.l.authz
	if a == nil {
		return true
	}
	return a.Authorize(r.c.principal, r.c.host[1:], op, rt, name)
}

func (r *request) groupAllowed(op kmsg.ACLOperation, group string) bool {
	return r.authorize(op, kmsg.ACLResourceTypeGroup, group)
}

func (r *request) topicAllowed(op kmsg.ACLOperation, topic string) bool {
	return r.authorize(op, kmsg.ACLResourceTypeTopic, topic)
}

func (r *request) clusterAllowed(op kmsg.ACLOperation) bool {
	return r.authorize(op, kmsg.ACLResourceTypeCluster, security.ClusterName)
}

var (
	groupDenied   = kerr.GroupAuthorizationFailed.Code
	topicDenied   = kerr.TopicAuthorizationFailed.Code
	clusterDenied = kerr.ClusterAuthorizationFailed.Code
)

// createAllowed: CREATE on the cluster or on the topic, as Kafka checks
// CreateTopics and auto-creation.
func (r *request) createAllowed(topic string) bool {
	return r.may(kmsg.ACLOperationCreate, kmsg.ACLResourceTypeCluster, security.ClusterName) || r.topicAllowed(kmsg.ACLOperationCreate, topic)
}

// Operations reported in authorized_operations; without authorization
// every one that applies to cohort.
var (
	groupOperations = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDelete, kmsg.ACLOperationDescribe}
	topicOperations = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe}
)

func (r *request) operations(rt kmsg.ACLResourceType, name string, ops []kmsg.ACLOperation) int32 {
	var bits int32
	for _, op := range ops {
		if r.may(op, rt, name) {
			bits |= 1 << op
		}
	}
	return bits
}

func (r *request) groupOperations(group string) int32 {
	return r.operations(kmsg.ACLResourceTypeGroup, group, groupOperations)
}

func (r *request) topicOperations(topic string) int32 {
	return r.operations(kmsg.ACLResourceTypeTopic, topic, topicOperations)
}

// filterOffsets drops (all topics) or refuses (named ones) the offsets of
// topics the caller may not describe, as Kafka's OffsetFetch does.
func (r *request) filterOffsets(out *grouppb.OffsetFetchResponse) *grouppb.OffsetFetchResponse {
	if r.c.l.authz == nil || out == nil {
		return out
	}
	for _, t := range out.Topics {
		if r.topicAllowed(kmsg.ACLOperationDescribe, t.Name) {
			continue
		}
		for _, p := range t.Partitions {
			p.Offset, p.LeaderEpoch, p.Metadata, p.ErrorCode = -1, -1, "", int32(topicDenied)
		}
	}
	return out
}
