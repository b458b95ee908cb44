package member

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohort-coord/cohort/security"
)

// KafkaSASL is the option of the Kafka transport that authenticates every
// connection with SASL: mechanism PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
// (cohortd's SASL_PLAINTEXT and SASL_SSL listeners, or any Kafka broker):
//
//	sasl, err := member.KafkaSASL("SCRAM-SHA-512", "orders-svc", password)
//	member.WithTransport(member.KafkaWithOptions(seeds, sasl, kgo.DialTLSConfig(cfg)))
func KafkaSASL(mechanism, user, password string) (kgo.Opt, error) {
	m, err := security.ClientMechanism(mechanism, user, password)
	if err != nil {
		return nil, err
	}
	return kgo.SASL(m), nil
}
