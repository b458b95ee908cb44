package raftfsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// Store writes group records through the Raft log (actors.Store). Writes of
// many groups are batched into one entry (group commit): while maxInFlight
// entries are being replicated, new writes queue up and leave together in
// the next entry. A write is reported done only once its entry is applied.
type Store struct {
	raft    *raft.Raft
	fsm     *FSM
	timeout time.Duration

	mu      sync.Mutex
	queue   []pending
	arena   []raftpb.GroupWrite // the writes' messages, handed out in order
	closed  bool
	wake    chan struct{}
	slots   chan struct{}
	stop    chan struct{}
	stopped sync.WaitGroup
	scratch []byte // the batching loop's compression buffer
	quorum  atomic.Pointer[QuorumWatch]
}

// QuorumWatch hears of the quorums that confirm this replica's leadership
// through its writes: a committed entry was acknowledged by a quorum after
// it was proposed, so leadership was confirmed as of the proposal. Begin is
// called just before an entry is proposed and returns its marks;
// Confirmed gets them back once the entry committed. A leader lease
// renewed this way needs no rounds of its own while writes flow.
type QuorumWatch struct {
	Begin     func() (at int64, epoch uint64)
	Confirmed func(at int64, epoch uint64)
}

// WatchQuorum sets the store's QuorumWatch.
func (s *Store) WatchQuorum(w *QuorumWatch) { s.quorum.Store(w) }

type pending struct {
	w    *raftpb.GroupWrite
	done func(error)
}

const (
	maxInFlight  = 4
	maxBatchSize = 1024
	// minPipelined is the fewest writes an entry leaves with while another
	// entry is in flight. A write to an idle store leaves at once; the
	// writes that queue behind an entry leave together when it completes,
	// rather than in small entries of their own, each of which costs every
	// node a log write, an fsync and a round of replication (Raft writes a
	// node's log one entry batch at a time anyway). Only a queue this long
	// is worth a second entry in flight. Measured with kafka's
	// BenchmarkCommit: 1,024 commits in flight leave in entries of about
	// 420 writes instead of 175, for less CPU per commit on every node, at
	// 16 and 64 in flight too (kafka/BENCHMARKS.md, "Tried and not kept",
	// has the variants that were no better).
	minPipelined = maxBatchSize / 2
	// arenaWrites is how many writes' messages are allocated together (one
	// allocation of the ten a commit made, when each write had its own). A
	// block lives until the last of its writes is applied: a few entries.
	arenaWrites = 256
)

// NewStore returns a Store that proposes through r and reads fsm. timeout
// bounds one entry's replication (Kafka's offsets.commit.timeout.ms).
func NewStore(r *raft.Raft, fsm *FSM, timeout time.Duration) *Store {
	s := &Store{raft: r, fsm: fsm, timeout: timeout, wake: make(chan struct{}, 1), slots: make(chan struct{}, maxInFlight), stop: make(chan struct{})}
	s.stopped.Add(1)
	go s.run()
	return s
}

// Append implements actors.Store. It never blocks.
func (s *Store) Append(groupID string, recs []*pb.Record, fence *pb.WriteFence, done func(error)) {
	if len(recs) == 1 && recs[0].GetMemberSessions() != nil && s.fsm.LogFormat() < LogFormatSessions {
		// Some node may not read it yet: the group's sessions are not
		// carried over a takeover until the cluster's format allows it.
		done(nil)
		return
	}
	if s.refuseConsumerBelowFormat(groupID, recs, done) {
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		done(coordinator.ErrStoreNotLeader)
		return
	}
	if len(s.arena) == 0 {
		s.arena = make([]raftpb.GroupWrite, arenaWrites)
	}
	w := &s.arena[0]
	s.arena = s.arena[1:]
	w.GroupId, w.Records, w.Fence = groupID, recs, fence
	s.queue = append(s.queue, pending{w: w, done: done})
	s.mu.Unlock()
	s.poke()
}

// poke wakes the batching loop.
func (s *Store) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Load implements actors.Store (reads this node's applied state).
func (s *Store) Load(groupID string) (*pb.GroupRecord, []*pb.OffsetRecord, error) {
	return s.fsm.Load(groupID)
}

// Sessions implements actors.SessionStore.
func (s *Store) Sessions(groupID string) *pb.MemberSessions { return s.fsm.Sessions(groupID) }

// Groups implements actors.Store.
func (s *Store) Groups() ([]string, error) { return s.fsm.Groups() }

// Close stops batching; queued writes, and writes appended after Close,
// fail with ErrStoreNotLeader. Closing again does nothing.
func (s *Store) Close() {
	s.mu.Lock()
	closed := s.closed
	s.closed = true
	s.mu.Unlock()
	if closed {
		return
	}
	close(s.stop)
	s.stopped.Wait()
	for _, p := range s.take(-1, false) {
		p.done(coordinator.ErrStoreNotLeader)
	}
}

// take removes up to n queued writes (all for n < 0); with pipelined (other
// entries in flight), none unless at least minPipelined are queued.
func (s *Store) take(n int, pipelined bool) []pending {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pipelined && len(s.queue) < minPipelined {
		return nil
	}
	if n < 0 || n > len(s.queue) {
		n = len(s.queue)
	}
	batch := s.queue[:n:n]
	s.queue = s.queue[n:]
	if len(s.queue) == 0 {
		s.queue = nil
	}
	return batch
}

func (s *Store) run() {
	defer s.stopped.Done()
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		}
		for {
			select {
			case s.slots <- struct{}{}:
			case <-s.stop:
				return
			}
			// An entry completing wakes this loop again.
			batch := s.take(maxBatchSize, len(s.slots) > 1)
			if len(batch) == 0 {
				<-s.slots
				break
			}
			s.propose(batch)
		}
	}
}

// propose sends one entry and completes its writes from a goroutine that
// waits for the entry to be applied.
func (s *Store) propose(batch []pending) {
	writes := make([]*raftpb.GroupWrite, len(batch))
	for i, p := range batch {
		writes[i] = p.w
	}
	data, ws, failed := encodeGroupWrites(writes)
	if failed != nil {
		// A write that cannot be encoded fails alone; the others go on.
		kept := batch[:0:0]
		for i, p := range batch {
			if failed[i] != nil {
				p.done(fmt.Errorf("%w: %v", coordinator.ErrRecordInvalid, failed[i]))
				continue
			}
			kept = append(kept, p)
		}
		if batch = kept; len(batch) == 0 {
			<-s.slots
			return
		}
	}
	if s.fsm.LogFormat() >= LogFormatCompressed {
		if c := compressEntry(data, &s.scratch); c != nil {
			data = c
		}
	}
	seq := s.fsm.proposed(data, ws)
	watch := s.quorum.Load()
	var at int64
	var epoch uint64
	if watch != nil {
		at, epoch = watch.Begin()
	}
	f := s.raft.Apply(data, s.timeout)
	go func() {
		err := f.Error()
		if err == nil && watch != nil {
			watch.Confirmed(at, epoch)
		}
		s.fsm.forget(seq)
		<-s.slots
		s.poke() // writes held back for a fuller entry may leave now
		var res *ApplyResult
		if err == nil {
			res, _ = f.Response().(*ApplyResult)
			if res == nil {
				err = fmt.Errorf("%w: no apply result", ErrBadCommand)
			} else if res.Err != nil {
				err = res.Err
			}
		}
		for i, p := range batch {
			switch {
			case err != nil:
				p.done(storeError(err))
			case i < len(res.Errs):
				p.done(res.Errs[i])
			default:
				p.done(nil)
			}
		}
	}()
}

// appendEnvelope returns a command's Envelope up to its payload, which is
// size bytes long, with room for the payload (an empty payload is not
// written: proto3 leaves out an empty bytes field).
func appendEnvelope(t raftpb.CommandType, size int) []byte {
	b := make([]byte, 0, 3*binary.MaxVarintLen64+size)
	if t != 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), uint64(t))
	}
	b = protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.VarintType), CommandVersion)
	if size > 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.BytesType), uint64(size))
	}
	return b
}

// storeError maps a raft failure to the coordinator's store errors. A lost
// leadership or a timeout leaves the outcome unknown: never a success.
func storeError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %v", coordinator.ErrStoreNotLeader, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", coordinator.ErrStoreTimeout, err)
	case errors.Is(err, ErrBadCommand):
		return fmt.Errorf("%w: %v", coordinator.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("%w: %v", coordinator.ErrStoreUnavailable, err)
}

// encodeCommand returns the bytes of Envelope{Type: t, Version:
// CommandVersion, Payload: payload's encoding}, as deterministic.Marshal
// writes them, with the payload encoded in place rather than encoded and
// then copied into the envelope.
func encodeCommand(t raftpb.CommandType, payload proto.Message) ([]byte, error) {
	size := deterministic.Size(payload)
	b := appendEnvelope(t, size)
	if size == 0 {
		return b, nil
	}
	start := len(b)
	b, err := deterministic.MarshalAppend(b, payload)
	if err != nil {
		return nil, err
	}
	if len(b)-start != size {
		return nil, fmt.Errorf("payload encoded to %d bytes, sized %d", len(b)-start, size)
	}
	return b, nil
}
