package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/cohort-coord/cohort/node"
	"github.com/cohort-coord/cohort/security"
)

// securityFlags registers the listener, SASL and ACL flags (Kafka's
// listeners, advertised.listeners, sasl.enabled.mechanisms, super.users).
func securityFlags(fs *flag.FlagSet, s *node.SecurityConfig) {
	fs.Var(listenersFlag{&s.Listeners}, "listeners", "Kafka listeners, one per security protocol: PROTOCOL://host:port,... with PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (default: PLAINTEXT on --kafka-addr)")
	fs.Var(listenersFlag{&s.AdvertisedListeners}, "advertised-listeners", "PROTOCOL://host:port,...: what Metadata and FindCoordinator tell the clients of each listener (default: its bound address)")
	fs.Var(listFlag{&s.SASLMechanisms}, "sasl-enabled-mechanisms", "mechanisms of SASL listeners, comma-separated: SCRAM-SHA-512, SCRAM-SHA-256, PLAIN (default: all three)")
	fs.BoolVar(&s.Authorizer, "authorizer", s.Authorizer, "check every Kafka request against the ACLs (off: everything is allowed, and the ACL APIs answer SECURITY_DISABLED)")
	fs.Var(superUsersFlag{&s.SuperUsers}, "super-users", "principals that skip ACL checks, separated by ';': User:admin;User:ops")
	fs.StringVar(&s.ScramUsersFile, "scram-users-file", s.ScramUsersFile, "file of user:password lines: the leader creates SCRAM-SHA-256 and SCRAM-SHA-512 credentials for each user that has none yet (the first superuser)")
}

type listenersFlag struct{ l *[]security.Listener }

func (f listenersFlag) String() string {
	if f.l == nil {
		return ""
	}
	var out []string
	for _, l := range *f.l {
		out = append(out, l.String())
	}
	return strings.Join(out, ",")
}

func (f listenersFlag) Set(v string) error {
	l, err := security.ParseListeners(v)
	if err != nil {
		return err
	}
	*f.l = l
	return nil
}

type listFlag struct{ l *[]string }

func (f listFlag) String() string {
	if f.l == nil {
		return ""
	}
	return strings.Join(*f.l, ",")
}

func (f listFlag) Set(v string) error {
	var out []string
	for _, m := range strings.Split(v, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, strings.ToUpper(m))
		}
	}
	if len(out) == 0 {
		return fmt.Errorf("empty list")
	}
	*f.l = out
	return nil
}

type superUsersFlag struct{ p *[]security.Principal }

func (f superUsersFlag) String() string {
	if f.p == nil {
		return ""
	}
	var out []string
	for _, p := range *f.p {
		out = append(out, p.String())
	}
	return strings.Join(out, ";")
}

func (f superUsersFlag) Set(v string) error {
	p, err := security.ParseSuperUsers(v)
	if err != nil {
		return err
	}
	*f.p = p
	return nil
}
