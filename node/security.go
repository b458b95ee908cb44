package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/kafka"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
)

// SecurityConfig configures the Kafka listeners per security protocol, SASL
// and ACLs.
type SecurityConfig struct {
	// Listeners are Kafka's listeners, at most one per security protocol;
	// empty: one PLAINTEXT listener on Kafka.Addr.
	Listeners []security.Listener
	// AdvertisedListeners are what Metadata and FindCoordinator tell the
	// clients of each listener; a listener missing here advertises its bound
	// address (the first one Kafka.AdvertisedAddr when set).
	AdvertisedListeners []security.Listener
	// SASLMechanisms are the mechanisms SASL listeners accept; nil: all.
	SASLMechanisms []string
	// Authorizer turns ACL checks on; off, every request is allowed.
	Authorizer bool
	// SuperUsers skip every ACL check.
	SuperUsers []security.Principal
	// ScramUsersFile holds "user:password" lines: the leader creates a
	// SCRAM-SHA-256 and a SCRAM-SHA-512 credential for each user that has
	// none yet (the first superuser of a new cluster). The passwords are
	// read, salted and forgotten; only the salted keys are replicated.
	ScramUsersFile string
}

func (s SecurityConfig) validate(c Config) error {
	var errs []error
	for _, l := range s.listeners(c) {
		if err := validateAddr(l.Addr); err != nil {
			errs = append(errs, fmt.Errorf("listener %s: %w", l, err))
		}
		if l.Protocol.TLS() && !c.TLS.Kafka {
			errs = append(errs, fmt.Errorf("listener %s needs TLS on the Kafka link (a certificate, a key and --tls-links kafka)", l))
		}
	}
	for _, l := range s.AdvertisedListeners {
		if err := validateAddr(l.Addr); err != nil {
			errs = append(errs, fmt.Errorf("advertised listener %s: %w", l, err))
		}
	}
	for _, m := range s.SASLMechanisms {
		if !slicesContains(security.Mechanisms, m) {
			errs = append(errs, fmt.Errorf("SASL mechanism %q: want one of %s", m, strings.Join(security.Mechanisms, ", ")))
		}
	}
	if s.ScramUsersFile != "" {
		if _, err := readScramUsers(s.ScramUsersFile); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// listeners returns the configured listeners, or the single one on
// Kafka.Addr: SSL with TLS on the Kafka link, PLAINTEXT otherwise. With
// listeners, TLS on the Kafka link applies to the SSL and SASL_SSL ones.
func (s SecurityConfig) listeners(c Config) []security.Listener {
	if len(s.Listeners) > 0 {
		return s.Listeners
	}
	p := security.Plaintext
	if c.TLS.Kafka {
		p = security.SSL
	}
	return []security.Listener{{Protocol: p, Addr: c.Kafka.Addr}}
}

func (n *Node) firstListener() string {
	return string(n.cfg.Security.listeners(n.cfg)[0].Protocol)
}

// advertisedListeners maps each listener's protocol to its advertised address.
func (n *Node) advertisedListeners() map[string]string {
	out := map[string]string{}
	for i, l := range n.kafkas {
		p := n.cfg.Security.listeners(n.cfg)[i].Protocol
		addr := l.Addr().String()
		if i == 0 && n.cfg.Kafka.AdvertisedAddr != "" {
			addr = n.cfg.Kafka.AdvertisedAddr
		}
		for _, a := range n.cfg.Security.AdvertisedListeners {
			if a.Protocol == p {
				addr = a.Addr
			}
		}
		out[string(p)] = addr
	}
	return out
}

// kafkaAddrOf is a registered node's address on the named listener; nodes
// registered before listeners existed have only their Kafka address.
func kafkaAddrOf(reg *raftpb.NodeRegister, listener string) string {
	if a, ok := reg.GetKafkaListeners()[listener]; ok {
		return a
	}
	return reg.GetKafkaAddr()
}

// startKafka binds one Kafka listener per security protocol and serves them.
func (n *Node) startKafka(base kafka.Config) error {
	store := n.raft.FSM.Security()
	var authz *security.Authorizer
	if n.cfg.Security.Authorizer {
		authz = security.NewAuthorizer(store, n.cfg.Security.SuperUsers)
	}
	for i, ln := range n.cfg.Security.listeners(n.cfg) {
		name := string(ln.Protocol)
		kcfg := base
		kcfg.Addr = ln.Addr
		if i > 0 {
			kcfg.AdvertisedAddr = ""
			kcfg.Metrics = nil // the series are the first listener's
		}
		for _, a := range n.cfg.Security.AdvertisedListeners {
			if a.Protocol == ln.Protocol {
				kcfg.AdvertisedAddr = a.Addr
			}
		}
		if !ln.Protocol.TLS() {
			kcfg.TLS = nil
		}
		kcfg.Coordinator = func(key string) (kafka.Broker, int16) { return n.coordinatorFor(key, name) }
		kcfg.Brokers = func() ([]kafka.Broker, int32) { return n.brokers(name) }
		kcfg.Security = &kafka.Security{
			SASL: ln.Protocol.SASL(), Mechanisms: n.cfg.Security.SASLMechanisms,
			Store: store, Authorizer: authz, Admin: n,
		}
		l, err := kafka.New(kcfg, n.groups(), n.raft.Catalog, n.log.With("component", "kafka", "protocol", name))
		if err != nil {
			for _, l := range n.kafkas {
				l.Close()
			}
			return err
		}
		n.kafkas = append(n.kafkas, l)
	}
	n.kafka = n.kafkas[0]
	var kctx context.Context
	kctx, n.stopKafka = context.WithCancel(context.Background())
	n.kafkaDone = make(chan error, 1)
	var wg sync.WaitGroup
	errs := make([]error, len(n.kafkas))
	for i, l := range n.kafkas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Serve(kctx)
		}()
	}
	go func() {
		wg.Wait()
		n.kafkaDone <- errors.Join(errs...)
	}()
	return nil
}

// KafkaListenerAddr is the bound address of the listener of a protocol, ""
// without one.
func (n *Node) KafkaListenerAddr(p security.Protocol) string {
	for i, l := range n.cfg.Security.listeners(n.cfg) {
		if l.Protocol == p && i < len(n.kafkas) {
			return n.kafkas[i].Addr().String()
		}
	}
	return ""
}

// ChangeScram applies a SCRAM credential change (kafka.SecurityAdmin).
func (n *Node) ChangeScram(ctx context.Context, c *securitypb.ScramChange) error {
	return n.changeSecurity(ctx, c)
}

// ChangeACL applies an ACL change (kafka.SecurityAdmin).
func (n *Node) ChangeACL(ctx context.Context, c *securitypb.AclChange) error {
	return n.changeSecurity(ctx, c)
}

// changeSecurity applies a change through the log on the leader, or
// forwards it to the leader and waits until this node applied it too.
func (n *Node) changeSecurity(ctx context.Context, c proto.Message) error {
	if n.raft.IsLeader() {
		return n.proposeSecurity(ctx, c)
	}
	addr := n.leaderRemote()
	if addr == "" {
		return fmt.Errorf("no leader to forward the change to: %w", coordinator.ErrStoreNotLeader)
	}
	timeout := adminTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := n.system.Root.RequestFuture(actor.NewPID(addr, AdminName), c, timeout).Result()
	if err != nil {
		return fmt.Errorf("forward the change to the leader: %w", coordinator.ErrStoreTimeout)
	}
	r, ok := res.(*securitypb.SecurityChangeResponse)
	if !ok {
		return fmt.Errorf("unexpected answer %T", res)
	}
	if r.GetError() != "" {
		return errors.New(r.GetError())
	}
	for ctx.Err() == nil && !n.raft.Holds(r.GetAppliedIndex()) {
		time.Sleep(5 * time.Millisecond)
	}
	return ctx.Err()
}

func (n *Node) proposeSecurity(ctx context.Context, c proto.Message) error {
	switch c := c.(type) {
	case *securitypb.ScramChange:
		return n.raft.ProposeScram(ctx, c)
	case *securitypb.AclChange:
		return n.raft.ProposeACL(ctx, c)
	}
	return fmt.Errorf("unknown security change %T", c)
}

// onSecurityChange applies a change forwarded by another node.
func (n *Node) onSecurityChange(c proto.Message) *securitypb.SecurityChangeResponse {
	if !n.raft.IsLeader() {
		return &securitypb.SecurityChangeResponse{Error: "not the leader"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := n.proposeSecurity(ctx, c); err != nil {
		return &securitypb.SecurityChangeResponse{Error: err.Error()}
	}
	return &securitypb.SecurityChangeResponse{AppliedIndex: n.raft.AppliedIndex()}
}

type scramUser struct{ name, password string }

// readScramUsers reads "user:password" lines; blank lines and lines
// starting with # are skipped. Errors name the line, never its content.
func readScramUsers(path string) ([]scramUser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("scram users file: %w", err)
	}
	defer f.Close()
	var out []scramUser
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		user, pass, ok := strings.Cut(t, ":")
		if !ok || user == "" || pass == "" {
			return nil, fmt.Errorf("scram users file %s line %d: want user:password", path, line)
		}
		out = append(out, scramUser{user, pass})
	}
	return out, sc.Err()
}

// bootstrapScram creates the users of the ScramUsersFile that have no
// credential yet (the leader does it once it leads).
func (n *Node) bootstrapScram(ctx context.Context) {
	if n.cfg.Security.ScramUsersFile == "" {
		return
	}
	users, err := readScramUsers(n.cfg.Security.ScramUsersFile)
	if err != nil {
		n.log.Error("bootstrap scram users", "err", err)
		return
	}
	store := n.raft.FSM.Security()
	change := &securitypb.ScramChange{}
	var names []string
	for _, u := range users {
		for _, m := range []securitypb.ScramMechanism{securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_256, securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512} {
			if _, ok := store.Credential(u.name, m); ok {
				continue
			}
			c, err := security.NewCredential(u.name, m, u.password, security.DefaultIterations)
			if err != nil {
				n.log.Error("bootstrap scram users", "user", u.name, "err", err)
				return
			}
			change.Upserts = append(change.Upserts, c)
			names = append(names, u.name+"/"+security.MechanismName(m))
		}
	}
	if len(change.Upserts) == 0 {
		return
	}
	if err := n.raft.ProposeScram(ctx, change); err != nil {
		n.log.Error("bootstrap scram users", "err", err)
		return
	}
	n.log.Info("created scram users from the users file", "credentials", strings.Join(names, ","))
}
