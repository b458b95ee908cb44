package node

import (
	"cmp"
	"errors"
	"slices"
	"time"
)

// Leader placement. Each node moves leadership of the shards it leads, one
// at a time, until every live node leads ⌊S/N⌋ or ⌈S/N⌉ shards: a node
// that leads at least two more shards than the live node leading fewest
// hands one of its shards to that node. Every node applies the same rule to
// the leaders it sees, so the spread converges with no coordinator of its
// own. A node is live for placement when every shard this node leads has
// seen its heartbeats answered for peerSettle (a node that just came back
// has mostly caught up by then, and the transfer's own catch-up finishes
// it). A shard that moved (this node took it over from a leader it had
// heard from, by a transfer or an election) is not moved again within
// Config.ShardMoveInterval of this node becoming its leader, and a node has
// at most one transfer in flight: no flapping, and a move costs each group
// of the shard no more than a failover does (the takeover window keeps
// generations). A shard this node leads from its first election (after a
// bootstrap, or a start of the whole cluster) never moved: the first
// placement spreads it at once. One move follows another as soon as the
// first is done and this node sees the new leader.

// peerSettle is how long a peer's heartbeats must have been answered
// before leadership is handed to it.
const peerSettle = 3 * time.Second

// nextMoveWait bounds how long, after a move, this node waits to see the
// shard's new leader before it plans the next move (else the next tick
// does).
const nextMoveWait = 500 * time.Millisecond

// DefaultShardMoveInterval is Config.ShardMoveInterval's default.
const DefaultShardMoveInterval = time.Minute

// placement is the leaders per live node as this node sees them.
type placement struct {
	counts map[string]int
	live   []string // sorted
}

// seePlacement counts the shards each live voter leads; ok is false while
// a shard has no known leader (nothing moves then).
func (n *Node) seePlacement() (p placement, ok bool) {
	me := n.raft.ID()
	p.counts = map[string]int{}
	for _, id := range n.raft.Voters() {
		live := true
		if id != me {
			// Every led shard is asked (no early exit): each starts timing
			// a peer it has not seen from the first time it is asked.
			for _, gs := range n.shards {
				if gs.rep.IsLeader() && !gs.rep.PeerSettled(id, peerSettle) {
					live = false
				}
			}
		}
		if live {
			p.counts[id] = 0
			p.live = append(p.live, id)
		}
	}
	slices.Sort(p.live)
	for _, gs := range n.shards {
		l := gs.rep.LeaderID()
		if l == "" {
			return p, false
		}
		if _, live := p.counts[l]; live {
			p.counts[l]++
		}
	}
	return p, true
}

// moveFrom returns the node a shard should move to from node from, or ""
// when from leads no more than one shard above the least loaded live node.
func (p placement) moveFrom(from string) string {
	if len(p.live) < 2 {
		return ""
	}
	to := slices.MinFunc(p.live, func(a, b string) int {
		return cmp.Or(cmp.Compare(p.counts[a], p.counts[b]), cmp.Compare(a, b))
	})
	if p.counts[from]-p.counts[to] < 2 {
		return ""
	}
	return to
}

// balanceNow moves shards from this node until placement is even as this
// node sees it, without waiting for the move interval (cohortctl cluster
// balance asks every node), or until timeout.
func (n *Node) balanceNow(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for n.moving.Load() {
			time.Sleep(20 * time.Millisecond)
		}
		if !n.balanceOnce(true) {
			for n.moving.Load() {
				time.Sleep(20 * time.Millisecond)
			}
			return nil
		}
	}
	return errors.New("balance: still moving when the time ran out")
}

// balance hands one shard this node leads to the least loaded live node,
// when placement calls for it.
func (n *Node) balance() { n.balanceOnce(false) }

// balanceOnce starts one move when placement calls for it, and reports
// whether it did. force moves a shard whatever the move interval says.
func (n *Node) balanceOnce(force bool) bool {
	if len(n.shards) < 2 || !n.moving.CompareAndSwap(false, true) {
		return false
	}
	p, ok := n.seePlacement()
	to := ""
	if ok {
		to = p.moveFrom(n.raft.ID())
	}
	var move *groupShard
	if to != "" {
		for _, gs := range n.shards {
			since := gs.ledSince.Load()
			if gs.active.Load() && since != 0 && (force || gs.firstLed.Load() || time.Since(time.Unix(0, since)) >= n.shardMoveInterval()) {
				move = gs
				break
			}
		}
	}
	if move == nil {
		n.moving.Store(false)
		return false
	}
	n.log.Info("moving shard leadership to balance leaders", "shard", move.id, "to", to, "leaders", p.counts)
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		start := time.Now()
		err := move.handOver(to)
		n.metrics.moved(err)
		n.moving.Store(false)
		if err != nil {
			n.log.Warn("shard leadership move failed", "shard", move.id, "to", to, "err", err)
			return
		}
		n.log.Info("shard leadership moved", "shard", move.id, "to", to, "took", time.Since(start))
		if !force {
			n.nextMove()
		}
	}()
	return true
}

// nextMove starts the next move once this node sees the moved shard's new
// leader (placement counts nothing while a shard has no known leader),
// rather than on the next tick: a first placement of 16 shards is a
// dozen moves of tens of milliseconds each.
func (n *Node) nextMove() {
	deadline := time.Now().Add(nextMoveWait)
	for time.Now().Before(deadline) {
		select {
		case <-n.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		if _, ok := n.seePlacement(); ok {
			n.balance()
			return
		}
	}
}

func (n *Node) shardMoveInterval() time.Duration {
	return cmp.Or(n.cfg.ShardMoveInterval, DefaultShardMoveInterval)
}
