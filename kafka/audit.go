package kafka

import (
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/internal/ratelog"
	"github.com/cohort-coord/cohort/security"
)

// What the listener says about security: SASL authentications by mechanism
// and result and authorization denials by resource and operation, counted
// in /metrics and logged at INFO. The logs are rate-limited (auditRate
// lines a second after a burst of auditBurst, for each of the two kinds),
// since a misconfigured client retries without end; a line after dropped
// ones says how many were suppressed.
const (
	auditRate  = 10
	auditBurst = 50
)

// SASL results, the result label of cohort_kafka_sasl_authentications_total.
const (
	saslSuccess     = "success"
	saslFailed      = "failed"                // wrong password, unknown user, bad token
	saslUnsupported = "unsupported_mechanism" // a mechanism the listener does not offer
	saslBadState    = "illegal_state"         // a request out of the exchange's order
)

// knownMechanisms bound the mechanism label: a client can name any string.
var knownMechanisms = []string{
	security.MechanismPlain, security.MechanismScramSHA256, security.MechanismScramSHA512, "GSSAPI", "OAUTHBEARER",
}

func mechanismLabel(m string) string {
	for _, k := range knownMechanisms {
		if strings.EqualFold(m, k) {
			return k
		}
	}
	if m == "" {
		return "none"
	}
	return "other"
}

type audit struct {
	sasl    *prometheus.CounterVec
	denials *prometheus.CounterVec
	saslLog *ratelog.Limiter
	denyLog *ratelog.Limiter
}

func newAudit(reg prometheus.Registerer) *audit {
	a := &audit{
		sasl: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cohort_kafka_sasl_authentications_total",
			Help: "SASL authentications on the Kafka listener, by mechanism and result (success, failed, unsupported_mechanism, illegal_state).",
		}, []string{"mechanism", "result"}),
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cohort_kafka_authorization_denials_total",
			Help: "Requests or parts of requests refused by the ACLs, by resource type and operation.",
		}, []string{"resource", "operation"}),
		saslLog: ratelog.New(auditRate, auditBurst),
		denyLog: ratelog.New(auditRate, auditBurst),
	}
	// Every series an operator may alert on is exported from the start, at
	// zero, so that rate() and absent() work before the first event.
	for _, m := range []string{security.MechanismPlain, security.MechanismScramSHA256, security.MechanismScramSHA512} {
		for _, r := range []string{saslSuccess, saslFailed, saslUnsupported, saslBadState} {
			a.sasl.WithLabelValues(m, r)
		}
	}
	for _, d := range checkedOperations {
		a.denials.WithLabelValues(strings.ToLower(d.rt.String()), strings.ToLower(d.op.String()))
	}
	if reg != nil {
		reg.MustRegister(a.sasl, a.denials)
	}
	return a
}

// checkedOperations are the (resource, operation) pairs the listener
// authorizes, the labels of cohort_kafka_authorization_denials_total.
var checkedOperations = []struct {
	rt kmsg.ACLResourceType
	op kmsg.ACLOperation
}{
	{kmsg.ACLResourceTypeGroup, kmsg.ACLOperationRead},
	{kmsg.ACLResourceTypeGroup, kmsg.ACLOperationDescribe},
	{kmsg.ACLResourceTypeGroup, kmsg.ACLOperationDelete},
	{kmsg.ACLResourceTypeTopic, kmsg.ACLOperationRead},
	{kmsg.ACLResourceTypeTopic, kmsg.ACLOperationDescribe},
	{kmsg.ACLResourceTypeTopic, kmsg.ACLOperationCreate},
	{kmsg.ACLResourceTypeTopic, kmsg.ACLOperationDelete},
	{kmsg.ACLResourceTypeTopic, kmsg.ACLOperationAlter},
	{kmsg.ACLResourceTypeCluster, kmsg.ACLOperationDescribe},
	{kmsg.ACLResourceTypeCluster, kmsg.ACLOperationAlter},
	{kmsg.ACLResourceTypeCluster, kmsg.ACLOperationCreate},
}

// saslOutcome counts and logs one SASL step that failed (err) or
// completed the authentication.
func (l *Listener) saslOutcome(remote, mechanism, user string, err error, principal security.Principal) {
	mech := mechanismLabel(mechanism)
	if err == nil {
		l.audit.sasl.WithLabelValues(mech, saslSuccess).Inc()
		l.log.Debug("SASL authenticated", "remote", remote, "mechanism", mechanism, "principal", principal.String())
		return
	}
	result := saslFailed
	switch saslCode(err) {
	case kerr.UnsupportedSaslMechanism.Code:
		result = saslUnsupported
	case kerr.IllegalSaslState.Code:
		result = saslBadState
	}
	l.audit.sasl.WithLabelValues(mech, result).Inc()
	l.audit.saslLog.Log(l.log, time.Now(), slog.LevelInfo, "SASL authentication failed",
		slog.String("remote", remote), slog.String("mechanism", mechanism), slog.String("user", user),
		slog.String("result", result), slog.String("err", err.Error()))
}

// denied counts and logs an authorization denial.
func (r *request) denied(op kmsg.ACLOperation, rt kmsg.ACLResourceType, name string) {
	l := r.c.l
	res, opName := strings.ToLower(rt.String()), strings.ToLower(op.String())
	l.audit.denials.WithLabelValues(res, opName).Inc()
	l.audit.denyLog.Log(l.log, time.Now(), slog.LevelInfo, "authorization denied",
		slog.String("principal", r.c.principal.String()), slog.String("host", r.c.host[1:]),
		slog.String("operation", opName), slog.String("resource", res), slog.String("name", name))
}
