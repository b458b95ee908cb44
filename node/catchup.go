package node

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/cohort-coord/cohort/raftfsm"
)

// catchUp tracks whether this node's replicated state is at least as new as
// everything it had acknowledged before it started: the entries already in
// its Raft log when it opened it. Until then (right after a start or a
// restart, before a leader has told it which of those entries are
// committed) its catalog and registry may lack what clients already saw, so
// Metadata waits for it (bounded) and FindCoordinator refuses rather than
// answer from an older state: a restarted node that answered an existing
// topic with no partitions was enough to make librdkafka consumers
// rebalance.
//
// Once caught up a node stays so: Raft applies entries in order, so its
// state never goes back, and later entries reach it as on any follower.
type catchUp struct {
	raft   *raftfsm.Replica
	target uint64 // last log index at start
	done   atomic.Bool
}

func newCatchUp(r *raftfsm.Replica) *catchUp {
	return &catchUp{raft: r, target: r.LastIndex()}
}

// check re-evaluates the condition: a leader is known and the node's state
// holds every entry it had at start (applied by the FSM, not only handed to
// it).
func (c *catchUp) check() bool {
	if c.done.Load() {
		return true
	}
	if c.raft.LeaderID() == "" || !c.raft.Holds(c.target) {
		return false
	}
	c.done.Store(true)
	return true
}

// Ready reports whether the node has caught up.
func (c *catchUp) Ready() bool { return c.check() }

// Wait waits until the node has caught up, ctx ends or max passes, and
// reports whether it has.
func (c *catchUp) Wait(ctx context.Context, max time.Duration) bool {
	if ok := c.check(); ok || max <= 0 {
		return ok
	}
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return c.check()
		case <-tick.C:
			if c.check() {
				return true
			}
		}
	}
}
