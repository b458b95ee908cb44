package membership

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// maxStaleRetries bounds how often a commit answered STALE_MEMBER_EPOCH is
// sent again with a newer epoch (franz-go's bound).
const maxStaleRetries = 10

// consumerCommit is a commit in flight or parked until the next heartbeat
// answer.
type consumerCommit struct {
	token   uint64
	offsets map[string]map[int32]int64
	epoch   int32
	closing bool // Close's own commit: its answer moves Close on
	tries   int
	dropped int // partitions left out of a retry: no longer the member's
}

// Commit starts a commit of offsets (topic -> partition -> offset), or of
// the marked offsets when offsets is nil, at the member's epoch. The result
// comes back in a CommitResult with token; an error returned here means
// nothing was sent.
//
// An answer STALE_MEMBER_EPOCH (the epoch moved on while the commit was on
// its way) parks the commit until the next heartbeat answer, which carries
// the new epoch; it is then sent again at that epoch without the partitions
// the member no longer owns (they may be another member's), at most
// maxStaleRetries times. Partitions left out make the result an
// ErrCommitFailed error, although the rest was committed.
func (m *Consumer) Commit(now time.Time, token uint64, offsets map[string]map[int32]int64, fx *Effects) error {
	if m.classic != nil {
		return m.classic.Commit(now, token, offsets, fx)
	}
	m.now = now
	switch {
	case m.phase == Stopped || m.phase == Closing || m.phase == Idle:
		return ErrIllegalState
	case m.phase == Discovering:
		return ErrCoordinatorNotAvailable
	case m.epoch <= 0:
		return ErrRebalanceInProgress // joining: nothing to commit in
	}
	if offsets == nil {
		offsets = m.markedOffsets()
	}
	c := &consumerCommit{token: token, offsets: offsets}
	if m.sendCommit(fx, c) == 0 {
		fx.Commits = append(fx.Commits, CommitResult{Token: token})
	}
	return nil
}

// sendCommit sends c at the member's epoch; 0 when it holds nothing.
func (m *Consumer) sendCommit(fx *Effects, c *consumerCommit) uint64 {
	req := commitRequest(&m.cfg, m.epoch, m.memberID, c.offsets)
	if len(req.Topics) == 0 {
		return 0
	}
	c.epoch = m.epoch
	id := m.send(fx, req)
	m.commits[id] = c
	return id
}

// Mark records an offset to commit with the next Commit(nil) or at Close.
func (m *Consumer) Mark(topic string, partition int32, offset int64) {
	if m.classic != nil {
		m.classic.Mark(topic, partition, offset)
		return
	}
	m.marks[TopicPartition{topic, partition}] = offset
}

func (m *Consumer) markedOffsets() map[string]map[int32]int64 { return byTopic(m.marks) }

func (m *Consumer) onCommit(c *consumerCommit, res any, err error, fx *Effects) {
	r, _ := res.(*pb.OffsetCommitResponse)
	if err != nil || r == nil {
		if m.phase == Stable {
			m.rediscover(fx)
		}
		m.finish(fx, c, fmt.Errorf("%w: %v", ErrCoordinatorNotAvailable, err))
		return
	}
	code := firstCode(r)
	switch {
	case code == 0:
		if c.dropped > 0 {
			m.finish(fx, c, fmt.Errorf("%w: %d partitions left out, no longer the member's after %w", ErrCommitFailed, c.dropped, kerr.StaleMemberEpoch))
			return
		}
		m.finish(fx, c, nil)
	case code == kerr.StaleMemberEpoch.Code:
		c.tries++
		if c.tries > maxStaleRetries {
			m.finish(fx, c, fmt.Errorf("%w: %w after %d retries", ErrCommitFailed, kerr.StaleMemberEpoch, maxStaleRetries))
			return
		}
		m.parked = append(m.parked, c)
		if c.epoch != m.epoch {
			m.retryParked(fx) // the heartbeat that moved the epoch was answered first
			return
		}
		m.sendHeartbeat(fx) // learn the new epoch now (unless a heartbeat is in flight)
	case code == kerr.UnknownMemberID.Code || code == kerr.FencedMemberEpoch.Code ||
		code == kerr.IllegalGeneration.Code || code == kerr.GroupIDNotFound.Code:
		// The member's heartbeat learns of the fencing and rejoins.
		m.finish(fx, c, fmt.Errorf("%w: %w", ErrCommitFailed, kerr.ErrorForCode(code)))
	case code == kerr.RebalanceInProgress.Code:
		m.finish(fx, c, fmt.Errorf("%w: %w", ErrRebalanceInProgress, kerr.RebalanceInProgress))
	case code == kerr.FencedInstanceID.Code:
		if !c.closing {
			m.stop(fx, fmt.Errorf("%w (commit): %w", ErrFenced, kerr.FencedInstanceID))
		}
		m.finish(fx, c, fmt.Errorf("%w: %w", ErrFenced, kerr.FencedInstanceID))
	case coordinatorMoved(code):
		if m.phase == Stable {
			m.rediscover(fx)
		}
		m.finish(fx, c, fmt.Errorf("%w: %w", ErrCoordinatorNotAvailable, kerr.ErrorForCode(code)))
	default:
		m.finish(fx, c, &CodeError{Op: "commit", Code: code})
	}
}

// finish reports c's result, or moves Close on for its own commit.
func (m *Consumer) finish(fx *Effects, c *consumerCommit, err error) {
	if c.closing {
		if m.phase == Closing {
			m.closeStep(fx)
		}
		return
	}
	if m.phase != Stopped {
		fx.Commits = append(fx.Commits, CommitResult{Token: c.token, Err: err})
	}
}

// retryParked sends the parked commits again at the member's epoch (after
// a heartbeat answer). A commit but Close's leaves out the partitions the
// member no longer owns; Close's commits what the member held until then,
// which the coordinator has not given to anyone while it heartbeats.
func (m *Consumer) retryParked(fx *Effects) {
	parked := m.parked
	m.parked = nil
	for _, c := range parked {
		if m.epoch <= 0 {
			m.finish(fx, c, fmt.Errorf("%w: the member was fenced", ErrCommitFailed))
			continue
		}
		if !c.closing {
			kept := map[string]map[int32]int64{}
			for t, ps := range c.offsets {
				for p, o := range ps {
					if _, ok := m.owned[TopicPartition{t, p}]; !ok {
						c.dropped++
						continue
					}
					if kept[t] == nil {
						kept[t] = map[int32]int64{}
					}
					kept[t][p] = o
				}
			}
			c.offsets = kept
		}
		if m.sendCommit(fx, c) == 0 {
			m.finish(fx, c, fmt.Errorf("%w: %w, and no partition of the commit is the member's any more", ErrCommitFailed, kerr.StaleMemberEpoch))
		}
	}
}

// failParked ends the parked commits with err.
func (m *Consumer) failParked(fx *Effects, err error) {
	parked := m.parked
	m.parked = nil
	for _, c := range parked {
		if c.closing {
			continue // Close goes on without it (its commit step is done)
		}
		fx.Commits = append(fx.Commits, CommitResult{Token: c.token, Err: err})
	}
}
