package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/catalog"
)

// createPartitions grows topics (CreatePartitions), with Kafka's rules and
// answers (its controller's, ReplicationControlManager.createPartitions): a
// topic named twice is INVALID_REQUEST, once; without ALTER on the topic
// TOPIC_AUTHORIZATION_FAILED; an unknown topic UNKNOWN_TOPIC_OR_PARTITION;
// a count that is not an increase, or above catalog.MaxPartitions,
// INVALID_PARTITIONS. Manual assignments are checked as Kafka checks them
// (one per new partition, each of one registered broker: every partition
// here has one replica) and then have nothing to place. validate_only
// checks everything and changes nothing. Each grow goes through the Raft
// leader (from any node) with CreateTopics' timeout and answers.
func (l *Listener) createPartitions(ctx context.Context, r *request, req *kmsg.CreatePartitionsRequest) kmsg.Response {
	resp := kmsg.NewPtrCreatePartitionsResponse()
	named := map[string]int{}
	for _, t := range req.Topics {
		named[t.Topic]++
	}
	for _, t := range req.Topics {
		if named[t.Topic] == 0 {
			continue // a duplicate already answered
		}
		rt := kmsg.NewCreatePartitionsResponseTopic()
		rt.Topic = t.Topic
		var msg string
		switch {
		case named[t.Topic] > 1:
			rt.ErrorCode, msg = kerr.InvalidRequest.Code, "Duplicate topic name."
			named[t.Topic] = 0
		case !r.topicAllowed(kmsg.ACLOperationAlter, t.Topic):
			rt.ErrorCode = topicDenied
		default:
			rt.ErrorCode, msg = l.growTopic(ctx, t, req.ValidateOnly)
		}
		if msg != "" {
			rt.ErrorMessage = kmsg.StringPtr(msg)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// growTopic checks one topic's grow and, unless validateOnly, proposes it.
// It returns the topic's error code and message (empty where Kafka sends
// none).
func (l *Listener) growTopic(ctx context.Context, t kmsg.CreatePartitionsRequestTopic, validateOnly bool) (int16, string) {
	topic, ok := l.topics.Get(t.Topic)
	if !ok {
		return kerr.UnknownTopicOrPartition.Code, ""
	}
	if err := catalog.CheckGrow(topic, t.Count); err != nil {
		return kerr.InvalidPartitions.Code, err.Error()
	}
	if t.Assignment != nil {
		if msg := l.checkAssignments(t.Assignment, t.Count-topic.Partitions); msg != "" {
			return kerr.InvalidReplicaAssignment.Code, msg
		}
	}
	if validateOnly {
		return errNone, ""
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	err := l.topics.Propose(cctx, catalog.GrowTopic{Name: topic.Name, ID: topic.ID, Partitions: t.Count})
	cancel()
	switch {
	case err == nil:
		return errNone, ""
	case errors.Is(err, catalog.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code, "" // deleted (or created again) meanwhile
	case errors.Is(err, catalog.ErrInvalidPartitions):
		// Grown meanwhile. A refusal forwarded from the leader carries no
		// text: the catalog has caught up with it (see Node.proposeTopic).
		if now, ok := l.topics.Get(t.Topic); ok {
			if cerr := catalog.CheckGrow(now, t.Count); cerr != nil {
				return kerr.InvalidPartitions.Code, cerr.Error()
			}
		}
		return kerr.InvalidPartitions.Code, err.Error()
	case errors.Is(err, catalog.ErrUnsupported):
		return kerr.UnsupportedVersion.Code, "not every node of the cluster runs a version that can grow topics yet"
	}
	code := catalogErrorCode(err)
	switch code {
	case kerr.NotController.Code:
		return code, "no Raft leader to take the catalog update"
	case kerr.RequestTimedOut.Code:
		return code, "catalog update did not complete"
	}
	return code, err.Error()
}

// checkAssignments checks CreatePartitions' manual assignments as Kafka's
// controller does, in its order and words, and returns why they are
// refused, or "". Every partition here has one replica, and the brokers
// are the nodes Metadata lists.
func (l *Listener) checkAssignments(as []kmsg.CreatePartitionsRequestTopicAssignment, added int32) string {
	if int32(len(as)) != added {
		return fmt.Sprintf("Attempted to add %d additional partition(s), but only %d assignment(s) were specified.", added, len(as))
	}
	brokers := []Broker{l.self}
	if l.cfg.Brokers != nil {
		brokers, _ = l.cfg.Brokers()
	}
	for _, a := range as {
		if len(a.Replicas) == 0 {
			return "The manual partition assignment includes an empty replica list."
		}
		ids := slices.Sorted(slices.Values(a.Replicas))
		for i, id := range ids {
			if !slices.ContainsFunc(brokers, func(b Broker) bool { return b.NodeID == id }) {
				return fmt.Sprintf("The manual partition assignment includes broker %d, but no such broker is registered.", id)
			}
			if i > 0 && ids[i-1] == id {
				return fmt.Sprintf("The manual partition assignment includes the broker %d more than once.", id)
			}
		}
		if len(ids) != 1 {
			return fmt.Sprintf("The manual partition assignment includes a partition with %d replica(s), but this is not consistent with previous partitions, which have 1 replica(s).", len(ids))
		}
	}
	return ""
}
