// Package testnode starts in-process cohort nodes for tests and benchmarks
// of the packages above node (the Kafka listener's, the member library's,
// cohortctl's).
package testnode

import (
	"log/slog"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/node"
)

// Config returns a single-node configuration for a test: a fresh data
// directory, Kafka and Raft on ephemeral 127.0.0.1 ports, no native API (a
// process has at most one protoactor remote), no initial rebalance delay, a
// 1 s minimum session timeout and its log discarded.
func Config(tb testing.TB) node.Config {
	cfg := node.DefaultConfig()
	cfg.DataDir, cfg.RemoteAddr = tb.TempDir(), ""
	cfg.Kafka.Addr, cfg.Raft.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Group.InitialRebalanceDelay, cfg.Group.MinSessionTimeout = 0, time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	return cfg
}

// Start starts a node with cfg, closes it when tb ends, and waits until it
// serves groups.
func Start(tb testing.TB, cfg node.Config) *node.Node {
	tb.Helper()
	n, err := node.Start(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { n.Close() })
	if err := n.WaitActive(30 * time.Second); err != nil {
		tb.Fatal(err)
	}
	return n
}
