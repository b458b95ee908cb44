package raftfsm

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// The topic catalog's commands (catalog.Command): TOPIC_CREATE,
// TOPIC_DELETE and, from log format 5 on, TOPIC_GROW, applied to the
// catalog under the FSM's lock, in the meta group only.

// ProposeTopic applies a catalog command through the log. Leader only. A
// GrowTopic is refused (catalog.ErrUnsupported, ErrLogFormatTooLow) while
// the cluster's log format is below LogFormatTopicGrow: a node that does not
// know the entry would halt on it.
func (n *Node) ProposeTopic(ctx context.Context, cmd catalog.Command) error {
	switch c := cmd.(type) {
	case catalog.CreateTopic:
		return n.apply(ctx, raftpb.CommandType_COMMAND_TYPE_TOPIC_CREATE, &raftpb.TopicCreate{Name: c.Name, Id: c.ID[:], Partitions: c.Partitions})
	case catalog.DeleteTopic:
		return n.apply(ctx, raftpb.CommandType_COMMAND_TYPE_TOPIC_DELETE, &raftpb.TopicDelete{Name: c.Name})
	case catalog.GrowTopic:
		if format := n.FSM.LogFormat(); format < LogFormatTopicGrow {
			return topicGrowFormatError(format)
		}
		g := &raftpb.TopicGrow{Name: c.Name, Partitions: c.Partitions}
		if c.ID != ([16]byte{}) {
			g.Id = c.ID[:]
		}
		return n.apply(ctx, raftpb.CommandType_COMMAND_TYPE_TOPIC_GROW, g)
	}
	return fmt.Errorf("%w: catalog command %T", ErrBadCommand, cmd)
}

// topicGrowFormatError is the error of a TopicGrow while the cluster's log
// format is below LogFormatTopicGrow.
func topicGrowFormatError(format uint32) error {
	return fmt.Errorf("growing a topic needs log format %d, the cluster's is %d (raised once every node runs a version that applies it): %w: %w",
		LogFormatTopicGrow, max(format, LogFormatPlain), catalog.ErrUnsupported, ErrLogFormatTooLow)
}

func (f *FSM) applyTopicCreate(payload []byte) *ApplyResult {
	var t raftpb.TopicCreate
	if err := proto.Unmarshal(payload, &t); err != nil {
		return &ApplyResult{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	cmd := catalog.CreateTopic{Name: t.GetName(), Partitions: t.GetPartitions()}
	copy(cmd.ID[:], t.GetId())
	f.mu.Lock()
	defer f.mu.Unlock()
	return &ApplyResult{Err: f.catalog.Apply(cmd)}
}

func (f *FSM) applyTopicDelete(payload []byte) *ApplyResult {
	var t raftpb.TopicDelete
	if err := proto.Unmarshal(payload, &t); err != nil {
		return &ApplyResult{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return &ApplyResult{Err: f.catalog.Apply(catalog.DeleteTopic{Name: t.GetName()})}
}

// applyTopicGrow grows a topic. Below LogFormatTopicGrow, which no leader
// writes it at (ProposeTopic), it is refused and changes nothing, as on a
// node of an older version, which halts on it.
func (f *FSM) applyTopicGrow(payload []byte) *ApplyResult {
	var t raftpb.TopicGrow
	if err := proto.Unmarshal(payload, &t); err != nil {
		return &ApplyResult{Err: fmt.Errorf("%w: %v", ErrBadCommand, err)}
	}
	cmd := catalog.GrowTopic{Name: t.GetName(), Partitions: t.GetPartitions()}
	copy(cmd.ID[:], t.GetId())
	f.mu.Lock()
	defer f.mu.Unlock()
	if format := f.format.Load(); format < LogFormatTopicGrow {
		return &ApplyResult{Err: topicGrowFormatError(format)}
	}
	return &ApplyResult{Err: f.catalog.Apply(cmd)}
}
