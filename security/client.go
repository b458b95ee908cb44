package security

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// ClientMechanism is franz-go's client side of a SASL mechanism, for
// cohort's own clients (cohortctl, the member library).
func ClientMechanism(mechanism, user, password string) (sasl.Mechanism, error) {
	if user == "" || password == "" {
		return nil, fmt.Errorf("SASL %s needs a user and a password", mechanism)
	}
	switch mechanism {
	case MechanismPlain:
		return plain.Auth{User: user, Pass: password}.AsMechanism(), nil
	case MechanismScramSHA256:
		return scram.Auth{User: user, Pass: password}.AsSha256Mechanism(), nil
	case MechanismScramSHA512:
		return scram.Auth{User: user, Pass: password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("SASL mechanism %q: want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", mechanism)
}
