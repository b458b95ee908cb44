package node

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/internal/seededbug"
	"github.com/cohort-coord/cohort/kafka"
	"github.com/cohort-coord/cohort/raftfsm"
)

// groupShard is one shard of the cluster's groups as this node runs it: the
// shard's replica, its group service (active while this node leads the
// shard), and the leader lease that fences the service's answers. With one
// shard its replica is the meta group's.
type groupShard struct {
	n     *Node
	id    int
	rep   *raftfsm.Replica
	svc   *actors.Service
	lease *leaderLease
	// active is whether svc coordinates the shard's groups now.
	active atomic.Bool
	// ledSince is when this node last became the shard's leader (unix
	// nanoseconds; 0 while it does not lead): a shard that just moved is
	// not moved again before moveMute.
	ledSince atomic.Int64
	// firstLed is whether this node leads the shard from the first
	// election it knows of (it had heard from no leader before): the shard
	// never moved, and placement may move it at once.
	firstLed atomic.Bool
	// handedOver is set when this node hands the shard's leadership over on
	// purpose, and cleared when it leads the shard again: until then its
	// requests are forwarded to the leader (forward.go).
	handedOver atomic.Bool
}

// isPeer reports whether addr is another node's native API address: a
// request answered there was forwarded by that node (forward.go).
func (n *Node) isPeer(addr string) bool {
	return addr != "" && addr != n.remoteAddr && n.raft.FSM.HasNodeAt(addr)
}

// startShards starts a group service per shard, fenced until this node
// leads the shard.
func (n *Node) startShards() error {
	reps := n.raft.Shards()
	for k, rep := range reps {
		gs := &groupShard{n: n, id: k, rep: rep, lease: newLeaderLease(rep.HeartbeatTimeout())}
		opts := actors.Options{Config: n.cfg.Group, Store: rep.Store, Logger: n.log, Fenced: true, Observer: n.observer, Lease: gs.leaseHeld,
			Consumer: n.consumerConfig(), ConsumerGroups: n.consumerGroupsAllowed(rep), Topics: n.topicPartitions}
		if len(reps) > 1 {
			opts.Name = fmt.Sprintf("%s-s%02d", actors.RouterName, k)
			opts.Logger = n.log.With("shard", k)
			opts.Peer = n.isPeer
		}
		svc, err := actors.Start(n.system, opts)
		if err != nil {
			return err
		}
		gs.svc = svc
		rep.Store.WatchQuorum(&raftfsm.QuorumWatch{Begin: gs.lease.begin, Confirmed: gs.lease.renew})
		n.shards = append(n.shards, gs)
	}
	n.service = n.shards[0].svc
	if len(n.shards) > 1 {
		n.router = &groupRouter{n: n, shards: n.shards}
		if n.observer != nil {
			n.observer.DescribeWith(n.router.Describe)
			n.observer.DescribeConsumerWith(n.router.DescribeConsumer)
		}
	}
	return nil
}

// groups is what the listeners send group requests to.
func (n *Node) groups() kafka.Groups {
	if n.router != nil {
		return n.router
	}
	return n.service
}

// shardOf returns the shard that holds a group.
func (n *Node) shardOf(groupID string) *groupShard {
	if len(n.shards) == 1 {
		return n.shards[0]
	}
	return n.router.of(groupID)
}

// watch runs the shard's group service while this node leads the shard: on
// gaining leadership it waits until every earlier entry is applied
// (barrier), then loads every group of the shard, its members' sessions
// carried over from the previous leader (coordinator.TakeoverSessions); on
// losing it, it stops them at once.
func (gs *groupShard) watch() {
	n := gs.n
	defer n.bg.Done()
	for {
		select {
		case <-n.stop:
			return
		case leader := <-gs.rep.Leadership():
			if leader {
				gs.onLeader()
				continue
			}
			gs.ledSince.Store(0)
			if seededbug.On("stale-leader") {
				continue
			}
			gs.lease.drop()
			gs.active.Store(false)
			n.log.Info("leadership lost: group service fenced", gs.attrs()...)
			if err := gs.svc.Deactivate(activateTimeout); err != nil {
				n.log.Error("fence group service", append(gs.attrs(), "err", err)...)
			}
		}
	}
}

// attrs are the log attributes that name the shard (none with one shard).
func (gs *groupShard) attrs() []any {
	if len(gs.n.shards) > 1 {
		return []any{"shard", gs.id}
	}
	return nil
}

func (gs *groupShard) onLeader() {
	n := gs.n
	start := time.Now()
	gs.ledSince.Store(start.UnixNano())
	gs.handedOver.Store(false)
	// The last time this node heard from the previous leader: the
	// coordinator it takes over from was alive then (zero when this node
	// has heard from no leader since it started).
	previousAlive := gs.rep.LastLeaderContact()
	gs.firstLed.Store(previousAlive.IsZero())
	// The barrier's commit is a quorum's confirmation too: the lease holds
	// from the moment it was sent.
	at, epoch := gs.lease.begin()
	if err := gs.rep.Barrier(activateTimeout); err != nil {
		n.log.Warn("leader barrier failed", append(gs.attrs(), "err", err)...)
		return
	}
	if !gs.rep.IsLeader() {
		return
	}
	gs.lease.renew(at, epoch)
	if err := gs.svc.ActivateAfter(activateTimeout, previousAlive); err != nil {
		n.log.Error("activate group service", append(gs.attrs(), "err", err)...)
		return
	}
	gs.active.Store(true)
	groups, _ := gs.rep.FSM.Groups()
	n.log.Info("leader: group service active", append(gs.attrs(), "groups", len(groups), "took", time.Since(start))...)
	if len(n.shards) == 1 {
		n.onMetaLeader() // the one shard's replica is the meta group's
	}
}

// leaseHeld is the shard's group service fence: answers from local state
// only under the lease. The stale-leader seeded bug answers regardless.
func (gs *groupShard) leaseHeld(now time.Time) bool {
	return gs.lease.Held(now) || seededbug.On("stale-leader")
}

// handOver moves the shard's leadership to node id (any up-to-date voter
// when empty), on purpose: the shard's requests reaching this node are
// forwarded to the new leader from now on (forward.go).
func (gs *groupShard) handOver(id string) error {
	if len(gs.n.shards) > 1 {
		gs.handedOver.Store(true)
	}
	err := gs.withoutLease(func() error { return gs.rep.TransferLeadership(id) })
	if err != nil && gs.rep.IsLeader() {
		gs.handedOver.Store(false)
	}
	return err
}

// withoutLease runs a leadership hand-over of the shard with its lease
// dropped, so no answer is given from this node's state once another node
// may lead.
func (gs *groupShard) withoutLease(f func() error) error {
	resume := gs.lease.suspend()
	defer resume()
	return f()
}

// watchMeta does the meta group leader's work on a node with several
// shards (with one, the shard's watch does it).
func (n *Node) watchMeta() {
	defer n.bg.Done()
	for {
		select {
		case <-n.stop:
			return
		case leader := <-n.raft.Leadership():
			if !leader {
				continue
			}
			if err := n.raft.Barrier(activateTimeout); err != nil {
				n.log.Warn("meta leader barrier failed", "err", err)
				continue
			}
			n.log.Info("leader of the meta group")
			n.onMetaLeader()
		}
	}
}

// onMetaLeader registers this node and bootstraps SCRAM credentials, as the
// leader of the meta group.
func (n *Node) onMetaLeader() {
	ctx, cancel := context.WithTimeout(context.Background(), activateTimeout)
	defer cancel()
	if err := n.raft.Register(ctx, n.self()); err != nil {
		n.log.Warn("register self", "err", err)
	}
	n.bootstrapScram(ctx)
}

// keepShards runs, every second, the upkeep of the shards this node leads:
// their voters follow the meta group's (every shard on every voter), their
// log format rises once every voter applies the newest, and their leaders
// are spread over the nodes (balance.go).
func (n *Node) keepShards() {
	defer n.bg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		member := slices.Contains(n.raft.Voters(), n.raft.ID())
		for _, gs := range n.shards {
			if !gs.rep.IsLeader() {
				continue
			}
			if !member && len(n.shards) > 1 {
				// Removed from the cluster: the shards it still leads go
				// to voters that stay, whose leaders then remove this node.
				if err := gs.handOver(""); err != nil {
					n.log.Warn("hand over a shard of a node removed from the cluster", "shard", gs.id, "err", err)
				}
				continue
			}
			added, removed, err := n.raft.ReconcileVoters(gs.rep)
			if err != nil {
				n.log.Warn("shard voters", "shard", gs.id, "err", err)
			}
			if len(added)+len(removed) > 0 {
				n.log.Info("shard voters follow the cluster's", "shard", gs.id, "added", added, "removed", removed)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			n.raft.RaiseShardLogFormat(ctx, gs.rep)
			cancel()
		}
		n.balance()
	}
}
