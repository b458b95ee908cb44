package security

import (
	"errors"
	"fmt"
	"net"
	"strings"
)

// Protocol is a Kafka listener's security protocol.
type Protocol string

// The four security protocols of Kafka's listeners.
const (
	Plaintext     Protocol = "PLAINTEXT"
	SSL           Protocol = "SSL"
	SASLPlaintext Protocol = "SASL_PLAINTEXT"
	SASLSSL       Protocol = "SASL_SSL"
)

// TLS reports whether the protocol runs over TLS.
func (p Protocol) TLS() bool { return p == SSL || p == SASLSSL }

// SASL reports whether the protocol authenticates with SASL.
func (p Protocol) SASL() bool { return p == SASLPlaintext || p == SASLSSL }

// Listener is one entry of Kafka's listeners: a security protocol and the
// address it binds. At most one listener per protocol: the protocol is its
// name, as in Kafka without a listener.security.protocol.map.
type Listener struct {
	Protocol Protocol
	Addr     string
}

func (l Listener) String() string { return string(l.Protocol) + "://" + l.Addr }

// ParseListeners parses "PROTOCOL://host:port,..." (Kafka's listeners).
func ParseListeners(s string) ([]Listener, error) {
	var out []Listener
	var errs []error
	seen := map[Protocol]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		proto, addr, ok := strings.Cut(f, "://")
		if !ok {
			errs = append(errs, fmt.Errorf("listener %q is not PROTOCOL://host:port", f))
			continue
		}
		p := Protocol(strings.ToUpper(proto))
		switch p {
		case Plaintext, SSL, SASLPlaintext, SASLSSL:
		default:
			errs = append(errs, fmt.Errorf("listener %q: unknown security protocol %q (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)", f, proto))
			continue
		}
		if seen[p] {
			errs = append(errs, fmt.Errorf("listener %q: a second %s listener", f, p))
			continue
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			errs = append(errs, fmt.Errorf("listener %q: %w", f, err))
			continue
		}
		seen[p] = true
		out = append(out, Listener{Protocol: p, Addr: addr})
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no listener"))
	}
	return out, errors.Join(errs...)
}
