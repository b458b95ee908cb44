package membership

import (
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Commit starts a commit of offsets (topic -> partition -> offset), or of the
// marked offsets when offsets is nil. The result comes back in a
// CommitResult with token; an error returned here means nothing was sent.
func (m *Machine) Commit(now time.Time, token uint64, offsets map[string]map[int32]int64, fx *Effects) error {
	m.now = now
	switch {
	case m.phase == Stopped || m.phase == Closing || m.phase == Idle:
		return ErrIllegalState
	case m.phase == Joining || m.phase == Assigning || m.phase == Downgrading || m.phase == Syncing:
		return ErrRebalanceInProgress
	case m.generation < 0:
		return ErrRebalanceInProgress // joining: nothing to commit in
	case m.phase == Discovering:
		return ErrCoordinatorNotAvailable
	}
	if offsets == nil {
		offsets = m.markedOffsets()
	}
	req := m.commitRequest(offsets)
	if len(req.Topics) == 0 {
		fx.Commits = append(fx.Commits, CommitResult{Token: token})
		return nil
	}
	id := m.send(fx, req)
	m.commits[id] = commitInFlight{token: token, generation: m.generation}
	return nil
}

// Mark records an offset to commit with the next Commit(nil) or at Close.
func (m *Machine) Mark(topic string, partition int32, offset int64) {
	m.marks[TopicPartition{topic, partition}] = offset
}

func (m *Machine) markedOffsets() map[string]map[int32]int64 { return byTopic(m.marks) }

// byTopic groups marked offsets by topic.
func byTopic(marks map[TopicPartition]int64) map[string]map[int32]int64 {
	out := map[string]map[int32]int64{}
	for tp, o := range marks {
		if out[tp.Topic] == nil {
			out[tp.Topic] = map[int32]int64{}
		}
		out[tp.Topic][tp.Partition] = o
	}
	return out
}

func (m *Machine) commitRequest(offsets map[string]map[int32]int64) *pb.OffsetCommitRequest {
	return commitRequest(&m.cfg, m.generation, m.memberID, offsets)
}

// commitRequest builds an OffsetCommit of offsets in generation (a consumer
// member's epoch), topics and partitions sorted.
func commitRequest(cfg *Config, generation int32, memberID string, offsets map[string]map[int32]int64) *pb.OffsetCommitRequest {
	req := &pb.OffsetCommitRequest{GroupId: cfg.Group, GenerationId: generation, MemberId: memberID, RetentionTimeMs: -1}
	if cfg.InstanceID != "" {
		req.GroupInstanceId = &cfg.InstanceID
	}
	topics := make([]string, 0, len(offsets))
	for t := range offsets {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	for _, t := range topics {
		ps := offsets[t]
		if len(ps) == 0 {
			continue
		}
		ot := &pb.OffsetCommitTopic{Name: t}
		parts := make([]int32, 0, len(ps))
		for p := range ps {
			parts = append(parts, p)
		}
		slices.Sort(parts)
		for _, p := range parts {
			ot.Partitions = append(ot.Partitions, &pb.OffsetCommitPartition{Partition: p, Offset: ps[p], LeaderEpoch: -1})
		}
		req.Topics = append(req.Topics, ot)
	}
	return req
}

// firstCode returns the first partition error of a commit answer (0: none).
func firstCode(r *pb.OffsetCommitResponse) int16 {
	for _, t := range r.GetTopics() {
		for _, p := range t.GetPartitions() {
			if p.GetErrorCode() != 0 {
				return int16(p.GetErrorCode())
			}
		}
	}
	return 0
}

func (m *Machine) onCommit(c commitInFlight, r *pb.OffsetCommitResponse, err error, fx *Effects) {
	res := m.commitOutcome(c, r, err, fx)
	if !c.closing {
		fx.Commits = append(fx.Commits, CommitResult{Token: c.token, Err: res})
	} else {
		m.closeStep(fx)
	}
}

func (m *Machine) commitOutcome(c commitInFlight, r *pb.OffsetCommitResponse, err error, fx *Effects) error {
	if err != nil || r == nil {
		if m.phase == Stable {
			m.rediscover(fx, Stable)
		}
		return fmt.Errorf("%w: %v", ErrCoordinatorNotAvailable, err)
	}
	code := firstCode(r)
	if code == 0 {
		m.answered(fx)
		return nil
	}
	current := c.generation == m.generation && !c.closing
	switch {
	case code == kerr.RebalanceInProgress.Code:
		if current && m.phase == Stable {
			m.startJoin(fx)
		}
		return fmt.Errorf("%w: %w", ErrRebalanceInProgress, kerr.RebalanceInProgress)
	case code == kerr.IllegalGeneration.Code || code == kerr.UnknownMemberID.Code:
		if current && m.phase == Stable {
			m.resetAndRejoin(fx, code == kerr.IllegalGeneration.Code)
		}
		return fmt.Errorf("%w: %w", ErrCommitFailed, kerr.ErrorForCode(code))
	case code == kerr.FencedInstanceID.Code:
		if !c.closing {
			m.stop(fx, fmt.Errorf("%w (commit): %w", ErrFenced, kerr.FencedInstanceID))
		}
		return fmt.Errorf("%w: %w", ErrFenced, kerr.FencedInstanceID)
	case coordinatorMoved(code):
		if m.phase == Stable {
			m.rediscover(fx, Stable)
		}
		return fmt.Errorf("%w: %w", ErrCoordinatorNotAvailable, kerr.ErrorForCode(code))
	}
	return &CodeError{Op: "commit", Code: code}
}
