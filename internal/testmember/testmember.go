// Package testmember holds what the member library's tests share across
// modules (actors/member and cluster-test/member): the members' timing.
package testmember

import (
	"log/slog"
	"os"
	"time"

	"github.com/cohort-coord/cohort/actors/member"
)

// Timing is the members' timeouts for tests; COHORT_MEMBER_DEBUG logs at
// debug level.
func Timing() []member.Opt {
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
