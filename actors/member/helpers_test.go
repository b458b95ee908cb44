package member_test

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
)

// The member tests against running clusters and kfake live in the
// cluster-test module (cluster-test/member), which has the same timing.

// timing is the members' timeouts for tests; COHORT_MEMBER_DEBUG logs at
// debug level.
func timing() []member.Opt {
	var debug []member.Opt
	if os.Getenv("COHORT_MEMBER_DEBUG") != "" {
		debug = append(debug, member.Logger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	return append(debug,
		member.SessionTimeout(6*time.Second),
		member.HeartbeatInterval(300*time.Millisecond),
		member.RebalanceTimeout(15*time.Second),
		member.RetryBackoff(50*time.Millisecond, time.Second),
		member.RequestTimeout(5*time.Second),
	)
}

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
