package interop

import (
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	xscram "github.com/xdg-go/scram"

	"github.com/cohort-coord/cohort/security"
)

// The drivers' security settings, as Kafka clients name them:
// SECURITY_PROTOCOL (PLAINTEXT, SASL_PLAINTEXT, SASL_SSL), SASL_MECHANISM,
// SASL_USERNAME, SASL_PASSWORD and SSL_CA_FILE.

func driverTLS() (*tls.Config, error) {
	pem, err := os.ReadFile(os.Getenv("SSL_CA_FILE"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", os.Getenv("SSL_CA_FILE"))
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// franzSecurity is the kgo options of the environment's settings.
func franzSecurity() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	proto := security.Protocol(os.Getenv("SECURITY_PROTOCOL"))
	if proto.TLS() {
		cfg, err := driverTLS()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if proto.SASL() {
		m, err := security.ClientMechanism(os.Getenv("SASL_MECHANISM"), os.Getenv("SASL_USERNAME"), os.Getenv("SASL_PASSWORD"))
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// saramaSecurity sets sarama's network security from the environment.
func saramaSecurity(cfg *sarama.Config) error {
	proto := security.Protocol(os.Getenv("SECURITY_PROTOCOL"))
	if proto.TLS() {
		tc, err := driverTLS()
		if err != nil {
			return err
		}
		cfg.Net.TLS.Enable, cfg.Net.TLS.Config = true, tc
	}
	if !proto.SASL() {
		return nil
	}
	s := &cfg.Net.SASL
	s.Enable, s.Handshake = true, true
	s.User, s.Password = os.Getenv("SASL_USERNAME"), os.Getenv("SASL_PASSWORD")
	switch os.Getenv("SASL_MECHANISM") {
	case security.MechanismPlain:
		s.Mechanism = sarama.SASLTypePlaintext
	case security.MechanismScramSHA256:
		s.Mechanism = sarama.SASLTypeSCRAMSHA256
		s.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &saramaScram{hash: xscram.HashGeneratorFcn(sha256.New)} }
	case security.MechanismScramSHA512:
		s.Mechanism = sarama.SASLTypeSCRAMSHA512
		s.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &saramaScram{hash: xscram.HashGeneratorFcn(sha512.New)} }
	default:
		return fmt.Errorf("SASL mechanism %q", os.Getenv("SASL_MECHANISM"))
	}
	return nil
}

// saramaScram is sarama's SCRAM client over xdg-go/scram (sarama leaves
// the SCRAM client to the application).
type saramaScram struct {
	hash xscram.HashGeneratorFcn
	conv *xscram.ClientConversation
}

func (c *saramaScram) Begin(user, pass, authz string) error {
	cl, err := c.hash.NewClient(user, pass, authz)
	if err != nil {
		return err
	}
	c.conv = cl.NewConversation()
	return nil
}

func (c *saramaScram) Step(challenge string) (string, error) { return c.conv.Step(challenge) }
func (c *saramaScram) Done() bool                            { return c.conv.Done() }
