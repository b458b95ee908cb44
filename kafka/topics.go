package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
)

const (
	clusterID = "cohort"
	// maxFetchWait caps how long an empty Fetch is held (clients ask for up
	// to MaxWaitMillis; holding it keeps idle consumers from spinning).
	maxFetchWait = 2 * time.Second
	// produceRejected explains the Produce answer.
	produceRejected = "cohort is a group coordinator and stores no records"
)

func (l *Listener) coordinator(key string) (Broker, int16) {
	if l.cfg.Coordinator != nil {
		return l.cfg.Coordinator(key)
	}
	return l.self, errNone
}

func (l *Listener) findCoordinator(ctx context.Context, r *request, req *kmsg.FindCoordinatorRequest) kmsg.Response {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	caughtUp := l.cfg.CaughtUp == nil || l.cfg.CaughtUp(ctx, 0)
	answer := func(key string) (Broker, int16, *string) {
		if r.version >= 1 && req.CoordinatorType != 0 {
			// Transactions are not coordinated here.
			msg := "cohort coordinates consumer groups only"
			return Broker{NodeID: -1, Port: -1}, kerr.CoordinatorNotAvailable.Code, &msg
		}
		if !r.groupAllowed(kmsg.ACLOperationDescribe, key) {
			return Broker{NodeID: -1, Port: -1}, groupDenied, nil
		}
		if !caughtUp {
			msg := "this node is catching up with the cluster"
			return Broker{NodeID: -1, Port: -1}, kerr.CoordinatorNotAvailable.Code, &msg
		}
		b, code := l.coordinator(key)
		if code != errNone {
			return Broker{NodeID: -1, Port: -1}, code, nil
		}
		return b, errNone, nil
	}
	if r.version >= 4 {
		for _, key := range req.CoordinatorKeys {
			b, code, msg := answer(key)
			c := kmsg.NewFindCoordinatorResponseCoordinator()
			c.Key, c.NodeID, c.Host, c.Port, c.ErrorCode, c.ErrorMessage = key, b.NodeID, b.Host, b.Port, code, msg
			resp.Coordinators = append(resp.Coordinators, c)
		}
		return resp
	}
	b, code, msg := answer(req.CoordinatorKey)
	resp.NodeID, resp.Host, resp.Port, resp.ErrorCode, resp.ErrorMessage = b.NodeID, b.Host, b.Port, code, msg
	return resp
}

func (l *Listener) metadata(ctx context.Context, r *request, req *kmsg.MetadataRequest) kmsg.Response {
	resp := kmsg.NewPtrMetadataResponse()
	brokers, controller := []Broker{l.self}, l.self.NodeID
	if l.cfg.Brokers != nil {
		brokers, controller = l.cfg.Brokers()
	}
	for _, br := range brokers {
		b := kmsg.NewMetadataResponseBroker()
		b.NodeID, b.Host, b.Port = br.NodeID, br.Host, br.Port
		resp.Brokers = append(resp.Brokers, b)
	}
	resp.ClusterID = kmsg.StringPtr(clusterID)
	resp.ControllerID = controller

	all := req.Topics == nil || (r.version == 0 && len(req.Topics) == 0)
	autoCreate := l.autoOn && (r.version < 4 || req.AllowAutoTopicCreation || !l.cfg.AutoCreateOnlyWhenAllowed)
	add := func(t catalog.Topic, code int16, name *string) {
		if name != nil && all && !r.may(kmsg.ACLOperationDescribe, kmsg.ACLResourceTypeTopic, *name) {
			return // Kafka leaves out what the caller may not describe
		}
		if name != nil && !all && !r.topicAllowed(kmsg.ACLOperationDescribe, *name) {
			t, code = catalog.Topic{}, topicDenied
		}
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic, mt.TopicID, mt.ErrorCode = name, t.ID, code
		if r.version >= 8 && req.IncludeTopicAuthorizedOperations {
			mt.AuthorizedOperations = r.topicOperations(t.Name)
		}
		if code == errNone {
			mt.Partitions = l.partitions(t)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	if !l.caughtUpFor(ctx, all, req.Topics) {
		// Not caught up: no topic may look missing or smaller than a client
		// already saw it, so none is answered yet.
		if all {
			for _, t := range l.topics.List() {
				add(t, kerr.LeaderNotAvailable.Code, kmsg.StringPtr(t.Name))
			}
		}
		for _, rt := range req.Topics {
			add(catalog.Topic{ID: rt.TopicID}, kerr.LeaderNotAvailable.Code, rt.Topic)
		}
		return resp
	}
	if l.cfg.ReadBarrier != nil {
		l.cfg.ReadBarrier(ctx)
	}
	if all {
		for _, t := range l.topics.List() {
			add(t, errNone, kmsg.StringPtr(t.Name))
		}
		return resp
	}
	for _, rt := range req.Topics {
		if rt.Topic == nil { // lookup by id (v10+)
			t, ok := l.topics.GetByID(rt.TopicID)
			if !ok {
				add(catalog.Topic{ID: rt.TopicID}, kerr.UnknownTopicID.Code, nil)
				continue
			}
			add(t, errNone, kmsg.StringPtr(t.Name))
			continue
		}
		name := *rt.Topic
		t, ok := l.topics.Get(name)
		if !ok && autoCreate && r.createAllowed(name) {
			var code int16
			t, code = l.createTopic(ctx, name, l.cfg.DefaultPartitions)
			switch code {
			case kerr.TopicAlreadyExists.Code: // raced with another creator
				t, ok = l.topics.Get(name)
				code = errNone
				if !ok {
					code = kerr.UnknownTopicOrPartition.Code
				}
			case kerr.RequestTimedOut.Code, kerr.NotController.Code:
				// Kafka's answer while an auto-created topic is not
				// ready yet: clients retry their metadata request.
				code = kerr.LeaderNotAvailable.Code
			}
			add(t, code, kmsg.StringPtr(name))
			continue
		}
		if !ok {
			code := kerr.UnknownTopicOrPartition.Code
			if catalog.ValidateName(name) != nil {
				code = kerr.InvalidTopicException.Code
			}
			add(catalog.Topic{}, code, kmsg.StringPtr(name))
			continue
		}
		add(t, errNone, kmsg.StringPtr(name))
	}
	return resp
}

// caughtUpFor reports whether a Metadata request may be answered from the
// catalog: always on a node that has caught up (Config.CaughtUp), at once
// when every topic it names is known, and otherwise once the node caught
// up within MetadataCatchUpWait.
func (l *Listener) caughtUpFor(ctx context.Context, all bool, topics []kmsg.MetadataRequestTopic) bool {
	if l.cfg.CaughtUp == nil || l.cfg.CaughtUp(ctx, 0) || (!all && l.allKnown(topics)) {
		return true
	}
	return l.cfg.CaughtUp(ctx, MetadataCatchUpWait)
}

// allKnown reports whether every topic a Metadata request names is in the
// catalog. A node that has not caught up answers those at once: what the
// catalog holds of a topic is current, or the topic was deleted since
// (which shows it a moment too long rather than too short), or grown since
// (CreatePartitions), which shows the partitions it had until the node
// applies the grow, as a Kafka broker's metadata cache lags its
// controller's.
func (l *Listener) allKnown(topics []kmsg.MetadataRequestTopic) bool {
	for _, rt := range topics {
		if rt.Topic == nil {
			if _, ok := l.topics.GetByID(rt.TopicID); !ok {
				return false
			}
			continue
		}
		if _, ok := l.topics.Get(*rt.Topic); !ok {
			return false
		}
	}
	return true
}

func (l *Listener) partitions(t catalog.Topic) []kmsg.MetadataResponseTopicPartition {
	ps := make([]kmsg.MetadataResponseTopicPartition, t.Partitions)
	for i := range ps {
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Partition, p.Leader, p.LeaderEpoch = int32(i), l.self.NodeID, 0
		p.Replicas, p.ISR = []int32{l.self.NodeID}, []int32{l.self.NodeID}
		ps[i] = p
	}
	return ps
}

// createTopic proposes a new topic and maps the outcome to a Kafka code.
func (l *Listener) createTopic(ctx context.Context, name string, partitions int32) (catalog.Topic, int16) {
	cmd := catalog.CreateTopic{Name: name, ID: catalog.NewTopicID(), Partitions: partitions}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if code := catalogErrorCode(l.topics.Propose(ctx, cmd)); code != errNone {
		return catalog.Topic{}, code
	}
	return catalog.Topic(cmd), errNone
}

// catalogErrorCode maps the outcome of a catalog change to a Kafka code. A
// change that found no leader to take it answers NOT_CONTROLLER, which
// clients retry after refreshing metadata; one whose outcome is unknown
// answers REQUEST_TIMED_OUT, as Kafka's controller does.
func catalogErrorCode(err error) int16 {
	switch {
	case err == nil:
		return errNone
	case errors.Is(err, catalog.ErrTopicExists):
		return kerr.TopicAlreadyExists.Code
	case errors.Is(err, catalog.ErrInvalidTopic):
		return kerr.InvalidTopicException.Code
	case errors.Is(err, catalog.ErrInvalidPartitions):
		return kerr.InvalidPartitions.Code
	case errors.Is(err, catalog.ErrUnknownTopic):
		return kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, coordinator.ErrStoreNotLeader):
		return kerr.NotController.Code
	default:
		return kerr.RequestTimedOut.Code
	}
}

func (l *Listener) createTopics(ctx context.Context, r *request, req *kmsg.CreateTopicsRequest) kmsg.Response {
	resp := kmsg.NewPtrCreateTopicsResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		parts := t.NumPartitions
		if parts == -1 && len(t.ReplicaAssignment) > 0 {
			parts = int32(len(t.ReplicaAssignment))
		} else if parts == -1 {
			parts = l.cfg.DefaultPartitions
		}
		var code int16
		var msg string
		switch {
		case !r.createAllowed(t.Topic):
			code, msg = topicDenied, "not authorized to create the topic"
		case catalog.ValidateName(t.Topic) != nil:
			code, msg = kerr.InvalidTopicException.Code, "invalid topic name"
		case parts <= 0 || parts > catalog.MaxPartitions:
			code, msg = kerr.InvalidPartitions.Code, "partition count must be between 1 and 65536"
		case t.ReplicationFactor != -1 && t.ReplicationFactor != 1 && len(t.ReplicaAssignment) == 0:
			code, msg = kerr.InvalidReplicationFactor.Code, "this cluster has one broker: replication factor must be 1 or -1"
		case req.ValidateOnly:
			if _, ok := l.topics.Get(t.Topic); ok {
				code, msg = kerr.TopicAlreadyExists.Code, "topic already exists"
			}
		default:
			var topic catalog.Topic
			topic, code = l.createTopic(ctx, t.Topic, parts)
			rt.TopicID = topic.ID
			switch code {
			case kerr.TopicAlreadyExists.Code:
				msg = "topic already exists"
			case kerr.RequestTimedOut.Code:
				msg = "catalog update did not complete"
			case kerr.NotController.Code:
				msg = "no Raft leader to take the catalog update"
			}
		}
		rt.ErrorCode = code
		if code != errNone && r.version >= 1 {
			rt.ErrorMessage = kmsg.StringPtr(msg)
		}
		if code == errNone {
			rt.NumPartitions, rt.ReplicationFactor = parts, 1
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (l *Listener) deleteTopics(ctx context.Context, r *request, req *kmsg.DeleteTopicsRequest) kmsg.Response {
	resp := kmsg.NewPtrDeleteTopicsResponse()
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	if r.version >= 6 {
		for _, t := range req.Topics {
			targets = append(targets, target{t.Topic, t.TopicID})
		}
	} else {
		for _, n := range req.TopicNames {
			targets = append(targets, target{name: kmsg.StringPtr(n)})
		}
	}
	for _, tg := range targets {
		rt := kmsg.NewDeleteTopicsResponseTopic()
		rt.Topic, rt.TopicID = tg.name, tg.id
		var t catalog.Topic
		var ok bool
		if tg.name != nil {
			t, ok = l.topics.Get(*tg.name)
		} else {
			t, ok = l.topics.GetByID(tg.id)
		}
		if !ok {
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			if tg.name == nil {
				rt.ErrorCode = kerr.UnknownTopicID.Code
			}
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		rt.Topic, rt.TopicID = kmsg.StringPtr(t.Name), t.ID
		if !r.topicAllowed(kmsg.ACLOperationDelete, t.Name) {
			rt.ErrorCode = topicDenied
			resp.Topics = append(resp.Topics, rt)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := l.topics.Propose(cctx, catalog.DeleteTopic{Name: t.Name})
		cancel()
		rt.ErrorCode = catalogErrorCode(err)
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// listOffsets answers every catalog partition as empty: earliest and latest
// are offset 0.
func (l *Listener) listOffsets(_ context.Context, r *request, req *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := kmsg.NewPtrListOffsetsResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition = p.Partition
			switch {
			case !l.topics.HasPartition(t.Topic, p.Partition):
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case r.version == 0:
				rp.OldStyleOffsets = []int64{0}
			default:
				rp.Offset, rp.Timestamp, rp.LeaderEpoch = 0, -1, 0
				if p.Timestamp >= 0 { // by time: no record has that timestamp
					rp.Offset = -1
				}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// fetch answers catalog partitions with no records. The log is empty at every
// offset a consumer holds (its committed offset), so the high watermark is the
// fetch offset and nothing is ever out of range. An empty fetch is held for
// the client's MaxWaitMillis (capped), as a broker with no new data would.
func (l *Listener) fetch(ctx context.Context, r *request, req *kmsg.FetchRequest) kmsg.Response {
	resp := kmsg.NewPtrFetchResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.Partition = p.Partition
			if !l.topics.HasPartition(t.Topic, p.Partition) {
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
			} else {
				end := max(p.FetchOffset, 0)
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = end, end, 0
				rp.RecordBatches = []byte{}
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if wait := min(time.Duration(req.MaxWaitMillis)*time.Millisecond, maxFetchWait); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return resp
}

// produce rejects every batch: cohort stores no records. Acks 0 gets no
// answer, as in Kafka.
func (l *Listener) produce(_ context.Context, r *request, req *kmsg.ProduceRequest) kmsg.Response {
	if req.Acks == 0 {
		return nil
	}
	resp := kmsg.NewPtrProduceResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = kerr.InvalidRequest.Code
			rp.BaseOffset = -1
			if r.version >= 8 {
				rp.ErrorMessage = kmsg.StringPtr(produceRejected)
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
