package member_test

import (
	"fmt"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/internal/testmember"
)

// The member tests against running clusters and kfake live in the
// cluster-test module (cluster-test/member), which has the same timing.

// timing is the members' timeouts for tests (testmember.Timing).
func timing() []member.Opt { return testmember.Timing() }

// flatten lists assigned partitions as topic/partition.
func flatten(ps []assignor.TopicPartitions) []string {
	var out []string
	for _, t := range ps {
		for _, p := range t.Partitions {
			out = append(out, fmt.Sprintf("%s/%d", t.Topic, p))
		}
	}
	return out
}
