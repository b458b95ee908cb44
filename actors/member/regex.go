package member

import (
	"fmt"

	"github.com/cohort-coord/cohort/membership"
)

// Regex subscribes to every topic whose whole name the regular expression
// matches (RE2 syntax, as Kafka's SubscriptionPattern), with the consumer
// group protocol only (ConsumerProtocol): the coordinator resolves it and
// assigns the topics created or deleted later as well. With Topics, the
// subscription is the union. A coordinator that does not serve the
// consumer protocol stops the member with an error wrapping
// ErrUnsupported (the classic protocol has no regex subscription).
func Regex(expr string) Opt {
	return func(c *config) { c.m.TopicRegex = expr }
}

// checkRegex refuses a regex subscription with the classic protocol.
func checkRegex(c *config) error {
	if c.m.TopicRegex != "" && c.protocol != membership.ConsumerProtocol {
		return fmt.Errorf("%w: a regex subscription needs the consumer group protocol (ConsumerProtocol)", ErrConfig)
	}
	return nil
}
