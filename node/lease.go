package node

import (
	"sync"
	"sync/atomic"
	"time"
)

// leaderLease fences the answers a leader gives from its own state
// (heartbeats, offset fetches, descriptions, a stable group's SyncGroup):
// they are given only while a quorum has confirmed this node's leadership
// recently enough that no other node can have been elected since.
//
// Raft alone does not give that. A leader that was stopped (SIGSTOP, a long
// GC or VM pause) for longer than the election timeout resumes believing it
// leads: its connections' readers run before its Raft goroutine notices the
// newer term, and answer requests that were queued in the kernel from a
// state the new leader has since changed (a member it expired, an offset
// committed since). Writes are safe (they fail to commit), reads are not.
//
// A follower starts an election only after it has not heard from its leader
// for a heartbeat timeout. So when a round of heartbeats sent at t is
// answered by a quorum, no other leader exists before t + heartbeat timeout;
// the lease lasts 90% of that (margin for clock-rate drift). It is renewed
// every fifth of the heartbeat timeout with raft's VerifyLeader, measured on
// the monotonic clock (which keeps running while the process is stopped),
// and dropped before this node hands leadership over on purpose (a transfer
// elects the target at once, without waiting for a timeout).
type leaderLease struct {
	base     time.Time
	validity time.Duration
	until    atomic.Int64 // nanoseconds since base; 0: not held

	mu    sync.Mutex
	epoch uint64 // bumped by every drop: a renewal begun before it is void
	held  int    // drops in progress (transfers); no renewal while > 0
}

func newLeaderLease(heartbeatTimeout time.Duration) *leaderLease {
	return &leaderLease{base: time.Now(), validity: heartbeatTimeout * 9 / 10}
}

// Held reports whether this node may answer from its own state at now, a
// reading of the monotonic clock taken just before the answer is decided
// (the group actor's reading for the request, so that a request costs one
// clock reading rather than two).
func (l *leaderLease) Held(now time.Time) bool {
	return int64(now.Sub(l.base)) < l.until.Load()
}

// renew records a quorum confirmation of leadership begun at start (a time
// from l.now) unless a drop happened since epoch was read.
func (l *leaderLease) renew(start int64, epoch uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epoch == epoch && l.held == 0 {
		if u := start + int64(l.validity); u > l.until.Load() {
			l.until.Store(u)
		}
	}
}

// renewedWithin reports whether a renewal that began within d of now is in
// force (a write's commit renewed it, say), so a round of its own would add
// nothing.
func (l *leaderLease) renewedWithin(d time.Duration) bool {
	return l.until.Load()-int64(l.validity) > int64(time.Since(l.base)-d)
}

// begin returns the time and epoch a renewal attempt starts at.
func (l *leaderLease) begin() (int64, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(time.Since(l.base)), l.epoch
}

// drop ends the lease at once (leadership lost).
func (l *leaderLease) drop() {
	l.mu.Lock()
	l.epoch++
	l.until.Store(0)
	l.mu.Unlock()
}

// suspend drops the lease and keeps it from being renewed until the
// returned function is called (a leadership transfer and its outcome).
func (l *leaderLease) suspend() (resume func()) {
	l.mu.Lock()
	l.epoch++
	l.held++
	l.until.Store(0)
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.held--
			l.mu.Unlock()
		})
	}
}

// renewLease keeps the shard's lease while this node leads it: the commit
// of every write the shard's store proposes renews it (a quorum
// acknowledged the entry after it was proposed, see raftfsm.QuorumWatch),
// and a VerifyLeader round every fifth of the heartbeat timeout when no
// commit did within that time (an idle shard, or heartbeats only). A round that
// takes longer than a heartbeat timeout renews nothing (the lease runs out
// meanwhile), and the next one starts only after it is answered; the
// node's stop never waits for one (a round is not always answered once
// Raft shuts down).
func (gs *groupShard) renewLease() {
	n := gs.n
	defer n.bg.Done()
	every := gs.rep.HeartbeatTimeout() / 5
	t := time.NewTicker(every)
	defer t.Stop()
	var pending chan error // the round in flight, if any
	var start int64
	var epoch uint64
	for {
		var answered <-chan error
		if pending != nil {
			answered = pending
		}
		select {
		case <-n.stop:
			return
		case err := <-answered:
			pending = nil
			if err == nil {
				gs.lease.renew(start, epoch)
			}
			continue
		case <-t.C:
		}
		if pending != nil || !gs.rep.IsLeader() || gs.lease.renewedWithin(every) {
			continue
		}
		start, epoch = gs.lease.begin()
		pending = make(chan error, 1)
		go func(ch chan error) { ch <- gs.rep.VerifyLeader() }(pending)
	}
}
