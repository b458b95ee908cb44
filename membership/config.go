package membership

import (
	"fmt"
	"regexp"
	"time"

	"github.com/cohort-coord/cohort/assignor"
)

// Defaults, as Kafka's consumer has them (session timeout of Kafka 3.0+).
const (
	DefaultSessionTimeout    = 45 * time.Second
	DefaultRebalanceTimeout  = 60 * time.Second
	DefaultHeartbeatInterval = 3 * time.Second
	DefaultRetryBackoff      = 100 * time.Millisecond
	DefaultMaxRetryBackoff   = time.Second // retry.backoff.max.ms (KIP-580)
	DefaultMetadataMaxAge    = 5 * time.Minute
)

// DefaultBalancers is the assignor list of a member that sets none:
// cooperative-sticky first, then range (KIP-726's cooperative default).
func DefaultBalancers() []assignor.Balancer {
	return []assignor.Balancer{assignor.CooperativeSticky(), assignor.Range()}
}

// Config is what a member is started with. Zero durations and a nil
// Balancers take the defaults (see Validate).
type Config struct {
	Group  string
	Topics []string
	// TopicRegex subscribes, with the consumer protocol only, to every
	// topic whose whole name the regular expression matches (Kafka's
	// SubscriptionPattern: RE2 syntax, resolved by the coordinator, which
	// assigns topics created later too). With Topics, the subscription is
	// the union.
	TopicRegex string
	// Balancers in preference order.
	Balancers []assignor.Balancer
	// InstanceID makes the member static (KIP-345).
	InstanceID        string
	Rack              string
	SessionTimeout    time.Duration
	RebalanceTimeout  time.Duration
	HeartbeatInterval time.Duration
	RetryBackoff      time.Duration
	MaxRetryBackoff   time.Duration
	// Partitions sizes topics for the leader's assignment; topics missing
	// here are asked for with a MetadataRequest.
	Partitions map[string]int32
	// ClientID is sent with every request where the protocol has one.
	ClientID string
	// ServerAssignor is the assignor a consumer-protocol member asks the
	// coordinator for (KIP-848: "uniform" or "range"); "" leaves the choice
	// to the coordinator. The classic protocol ignores it.
	ServerAssignor string
	// MetadataMaxAge is how often the leader asks for the partition counts
	// of the topics it assigned from Metadata (metadata.max.age.ms) and
	// rejoins when one changed.
	MetadataMaxAge time.Duration
}

// Validate fills in defaults and checks c.
func (c *Config) Validate() error {
	if c.Group == "" {
		return fmt.Errorf("%w: group id is empty", ErrConfig)
	}
	if len(c.Topics) == 0 && c.TopicRegex == "" {
		return fmt.Errorf("%w: no topics to subscribe to", ErrConfig)
	}
	if c.TopicRegex != "" {
		if _, err := regexp.Compile(c.TopicRegex); err != nil {
			return fmt.Errorf("%w: topic regex: %v", ErrConfig, err)
		}
	}
	for _, t := range c.Topics {
		if t == "" {
			return fmt.Errorf("%w: empty topic name", ErrConfig)
		}
	}
	if len(c.Balancers) == 0 {
		c.Balancers = DefaultBalancers()
	}
	seen := map[string]bool{}
	for _, b := range c.Balancers {
		if b == nil {
			return fmt.Errorf("%w: nil balancer", ErrConfig)
		}
		if seen[b.ProtocolName()] {
			return fmt.Errorf("%w: balancer %q listed twice", ErrConfig, b.ProtocolName())
		}
		seen[b.ProtocolName()] = true
	}
	if _, ok := assignor.CommonProtocol(c.Balancers...); !ok {
		return fmt.Errorf("%w: the balancers share no rebalance protocol", ErrConfig)
	}
	def := func(d *time.Duration, v time.Duration, name string) error {
		if *d < 0 {
			return fmt.Errorf("%w: negative %s %v", ErrConfig, name, *d)
		}
		if *d == 0 {
			*d = v
		}
		return nil
	}
	for _, f := range []struct {
		d    *time.Duration
		v    time.Duration
		name string
	}{
		{&c.SessionTimeout, DefaultSessionTimeout, "session timeout"},
		{&c.RebalanceTimeout, DefaultRebalanceTimeout, "rebalance timeout"},
		{&c.HeartbeatInterval, DefaultHeartbeatInterval, "heartbeat interval"},
		{&c.RetryBackoff, DefaultRetryBackoff, "retry backoff"},
		{&c.MaxRetryBackoff, DefaultMaxRetryBackoff, "max retry backoff"},
		{&c.MetadataMaxAge, DefaultMetadataMaxAge, "metadata max age"},
	} {
		if err := def(f.d, f.v, f.name); err != nil {
			return err
		}
	}
	if c.HeartbeatInterval >= c.SessionTimeout {
		return fmt.Errorf("%w: heartbeat interval %v must be below the session timeout %v", ErrConfig, c.HeartbeatInterval, c.SessionTimeout)
	}
	if c.MaxRetryBackoff < c.RetryBackoff {
		c.MaxRetryBackoff = c.RetryBackoff
	}
	for t, n := range c.Partitions {
		if n <= 0 {
			return fmt.Errorf("%w: topic %q has %d partitions", ErrConfig, t, n)
		}
	}
	return nil
}
