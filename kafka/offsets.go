package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

type tp struct {
	topic     string
	partition int32
}

// prepareCommit checks an OffsetCommit's group, topics and partitions and
// builds the native request of the partitions that pass; the others have
// their error codes kept for the answer.
func (l *Listener) prepareCommit(r *request, req *kmsg.OffsetCommitRequest, one *commitOne) *commitBlocks {
	total := 0
	for _, t := range req.Topics {
		total += len(t.Partitions)
	}
	b := newCommitBlocks(len(req.Topics), total, one)
	b.kreq = req
	n := b.req
	n.GroupId, n.GenerationId, n.MemberId, n.RetentionTimeMs = req.Group, req.Generation, req.MemberID, -1
	// The coordinator answers by version (Kafka's rules for a group that
	// does not exist and for consumer-protocol members).
	b.version = int32(r.version)
	n.ApiVersion = &b.version
	if r.version < 1 {
		n.GenerationId = -1
		n.MemberId = ""
	}
	if r.version >= 2 && r.version <= 4 {
		n.RetentionTimeMs = req.RetentionTimeMillis
	}
	if r.version >= 7 {
		n.GroupInstanceId = req.InstanceID
	}
	// KafkaApis answers unknown topics and partitions itself; only known
	// ones reach the coordinator. A node that does not coordinate now lets
	// the coordinator answer (NOT_COORDINATOR): its catalog may still be
	// catching up, and clients must look the coordinator up again.
	check := l.coordinating(req.Group)
	groupOK := r.groupAllowed(kmsg.ACLOperationRead, req.Group)
	for _, t := range req.Topics {
		denied := errNone
		if !groupOK {
			denied = groupDenied
		} else if !r.topicAllowed(kmsg.ACLOperationRead, t.Topic) {
			denied = topicDenied
		}
		first := len(b.partPtrs)
		for _, p := range t.Partitions {
			if denied != errNone {
				b.refuse(t.Topic, p.Partition, denied)
				continue
			}
			if check && !l.hasPartition(t.Topic, p.Partition) {
				b.refuse(t.Topic, p.Partition, kerr.UnknownTopicOrPartition.Code)
				continue
			}
			np := b.partition()
			np.Partition, np.Offset, np.LeaderEpoch, np.Metadata, np.CommitTimestampMs = p.Partition, p.Offset, -1, p.Metadata, -1
			if r.version >= 6 {
				np.LeaderEpoch = p.LeaderEpoch
			}
			if r.version == 1 {
				np.CommitTimestampMs = p.Timestamp
			}
		}
		if len(b.partPtrs) > first {
			b.topic(t.Topic, b.partPtrs[first:len(b.partPtrs):len(b.partPtrs)])
		}
	}
	return b
}

// answer is the Kafka answer to the OffsetCommit b was prepared for, given
// the coordinator's answer m to its native request n (or the call's error;
// n is nil when no call was made). It is an asyncCall.
func (b *commitBlocks) answer(l *Listener, n, m proto.Message, err error) kmsg.Response {
	req := b.kreq
	var out *grouppb.OffsetCommitResponse
	if n != nil {
		out, err = expect[*grouppb.OffsetCommitResponse](l, n, m, err)
	}
	code := func(topic string, partition int32) int16 {
		if c, ok := b.refused[tp{topic, partition}]; ok {
			return c
		}
		if err != nil {
			return callErrorCode(err)
		}
		if c, ok := b.answered(out, topic, partition); ok {
			return c
		}
		return kerr.UnknownServerError.Code
	}
	resp := b.resp
	resp.Topics = b.respTopics[:0:len(req.Topics)]
	for _, t := range req.Topics {
		resp.Topics = resp.Topics[:len(resp.Topics)+1]
		rt := &resp.Topics[len(resp.Topics)-1]
		rt.Default()
		rt.Topic = t.Topic
		rt.Partitions = b.respParts[:len(t.Partitions):len(t.Partitions)]
		b.respParts = b.respParts[len(t.Partitions):]
		for i, p := range t.Partitions {
			rp := &rt.Partitions[i]
			rp.Default()
			rp.Partition = p.Partition
			rp.ErrorCode = code(t.Topic, p.Partition)
		}
	}
	return resp
}

// answered is the coordinator's code for one partition. Its answer lists the
// native request's partitions in order, so the next one is tried first.
func (b *commitBlocks) answered(out *grouppb.OffsetCommitResponse, topic string, partition int32) (int16, bool) {
	ts := out.GetTopics()
	for range 2 {
		for ; b.at.topic < len(ts); b.at.topic, b.at.partition = b.at.topic+1, 0 {
			t := ts[b.at.topic]
			if t.GetName() != topic {
				continue
			}
			for ; b.at.partition < len(t.GetPartitions()); b.at.partition++ {
				if p := t.GetPartitions()[b.at.partition]; p.GetPartition() == partition {
					b.at.partition++
					return int16(p.GetErrorCode()), true
				}
			}
		}
		b.at.topic, b.at.partition = 0, 0 // out of order: look from the start
	}
	return 0, false
}

// refuse keeps the code of a partition that does not reach the coordinator.
func (b *commitBlocks) refuse(topic string, partition int32, code int16) {
	if b.refused == nil {
		b.refused = make(map[tp]int16)
	}
	b.refused[tp{topic, partition}] = code
}

// commitBlocks holds the messages of one OffsetCommit: the native request
// and the Kafka answer, allocated together (in one block for the usual
// commit of one partition, an array per kind otherwise) rather than one
// allocation per topic and partition.
type commitBlocks struct {
	kreq       *kmsg.OffsetCommitRequest
	refused    map[tp]int16 // partitions that do not reach the coordinator
	at         struct{ topic, partition int }
	version    int32 // the request's version, which req points to
	req        *grouppb.OffsetCommitRequest
	topics     []grouppb.OffsetCommitTopic
	parts      []grouppb.OffsetCommitPartition
	partPtrs   []*grouppb.OffsetCommitPartition
	resp       *kmsg.OffsetCommitResponse
	respTopics []kmsg.OffsetCommitResponseTopic
	respParts  []kmsg.OffsetCommitResponseTopicPartition
}

// commitOne holds every message of the usual commit of one partition in one
// block.
type commitOne struct {
	b         commitBlocks
	req       grouppb.OffsetCommitRequest
	topic     [1]grouppb.OffsetCommitTopic
	topicPtr  [1]*grouppb.OffsetCommitTopic
	part      [1]grouppb.OffsetCommitPartition
	partPtr   [1]*grouppb.OffsetCommitPartition
	resp      kmsg.OffsetCommitResponse
	respTopic [1]kmsg.OffsetCommitResponseTopic
	respPart  [1]kmsg.OffsetCommitResponseTopicPartition
}

// blocks empties one (it may have held an earlier commit) and returns its
// commitBlocks.
func (one *commitOne) blocks() *commitBlocks {
	*one = commitOne{}
	one.req.Topics = one.topicPtr[:0]
	one.resp.Default()
	one.b = commitBlocks{req: &one.req, topics: one.topic[:0], parts: one.part[:0], partPtrs: one.partPtr[:0],
		resp: &one.resp, respTopics: one.respTopic[:], respParts: one.respPart[:]}
	return &one.b
}

// newCommitBlocks returns the blocks of a commit of partitions partitions
// in topics topics; one, when not nil, is used for a commit of one.
func newCommitBlocks(topics, partitions int, one *commitOne) *commitBlocks {
	if topics == 1 && partitions == 1 {
		if one == nil {
			one = new(commitOne)
		}
		return one.blocks()
	}
	resp := kmsg.NewPtrOffsetCommitResponse()
	return &commitBlocks{
		req:        &grouppb.OffsetCommitRequest{Topics: make([]*grouppb.OffsetCommitTopic, 0, topics)},
		topics:     make([]grouppb.OffsetCommitTopic, 0, topics),
		parts:      make([]grouppb.OffsetCommitPartition, 0, partitions),
		partPtrs:   make([]*grouppb.OffsetCommitPartition, 0, partitions),
		resp:       resp,
		respTopics: make([]kmsg.OffsetCommitResponseTopic, topics),
		respParts:  make([]kmsg.OffsetCommitResponseTopicPartition, partitions),
	}
}

// partition returns the next partition of the native request (the arrays
// were sized for every partition, so no pointer taken moves).
func (b *commitBlocks) partition() *grouppb.OffsetCommitPartition {
	b.parts = b.parts[:len(b.parts)+1]
	p := &b.parts[len(b.parts)-1]
	b.partPtrs = append(b.partPtrs, p)
	return p
}

// topic adds a topic with the given partitions to the native request.
func (b *commitBlocks) topic(name string, parts []*grouppb.OffsetCommitPartition) {
	b.topics = b.topics[:len(b.topics)+1]
	t := &b.topics[len(b.topics)-1]
	t.Name, t.Partitions = name, parts
	b.req.Topics = append(b.req.Topics, t)
}

// fetchOffsets runs one native OffsetFetch; on failure it reports the error
// as the top-level code.
func (l *Listener) fetchOffsets(ctx context.Context, n *grouppb.OffsetFetchRequest) *grouppb.OffsetFetchResponse {
	out, err := call[*grouppb.OffsetFetchResponse](ctx, l, callTimeout, n)
	if err != nil {
		return &grouppb.OffsetFetchResponse{ErrorCode: int32(callErrorCode(err))}
	}
	return out
}

func (l *Listener) offsetFetch(ctx context.Context, r *request, req *kmsg.OffsetFetchRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetFetchResponse()
	if r.version >= 8 {
		resp.Groups = make([]kmsg.OffsetFetchResponseGroup, len(req.Groups))
		parallel(len(req.Groups), func(i int) {
			g := req.Groups[i]
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group = g.Group
			if !r.groupAllowed(kmsg.ACLOperationDescribe, g.Group) {
				rg.ErrorCode = groupDenied
				resp.Groups[i] = rg
				return
			}
			n := &grouppb.OffsetFetchRequest{GroupId: g.Group, AllTopics: g.Topics == nil, RequireStable: req.RequireStable, MemberEpoch: -1}
			if r.version >= 9 {
				n.MemberId, n.MemberEpoch = g.MemberID, g.MemberEpoch
			}
			for _, t := range g.Topics {
				n.Topics = append(n.Topics, &grouppb.TopicPartitions{Name: t.Topic, Partitions: t.Partitions})
			}
			out := r.filterOffsets(l.fetchOffsets(ctx, n))
			rg.ErrorCode = int16(out.ErrorCode)
			for _, t := range out.Topics {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = t.Name
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
					rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, int16(p.ErrorCode)
					rp.Metadata = kmsg.StringPtr(p.Metadata)
					rt.Partitions = append(rt.Partitions, rp)
				}
				rg.Topics = append(rg.Topics, rt)
			}
			resp.Groups[i] = rg
		})
		return resp
	}
	all := r.version >= 2 && req.Topics == nil
	n := &grouppb.OffsetFetchRequest{GroupId: req.Group, AllTopics: all, MemberEpoch: -1}
	if r.version >= 7 {
		n.RequireStable = req.RequireStable
	}
	for _, t := range req.Topics {
		n.Topics = append(n.Topics, &grouppb.TopicPartitions{Name: t.Topic, Partitions: t.Partitions})
	}
	var out *grouppb.OffsetFetchResponse
	if r.groupAllowed(kmsg.ACLOperationDescribe, req.Group) {
		out = r.filterOffsets(l.fetchOffsets(ctx, n))
	} else {
		out = &grouppb.OffsetFetchResponse{ErrorCode: int32(groupDenied)}
	}
	top := int16(out.ErrorCode)
	if r.version >= 2 {
		resp.ErrorCode = top
	}
	if top != errNone && r.version < 2 {
		// v0-1 have no top-level error: every requested partition carries it.
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, top
				rp.Metadata = kmsg.StringPtr("")
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	for _, t := range out.Topics {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Name
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetFetchResponseTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch, rp.ErrorCode = p.Partition, p.Offset, p.LeaderEpoch, int16(p.ErrorCode)
			rp.Metadata = kmsg.StringPtr(p.Metadata)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (l *Listener) offsetDelete(ctx context.Context, r *request, req *kmsg.OffsetDeleteRequest) kmsg.Response {
	resp := kmsg.NewPtrOffsetDeleteResponse()
	if !r.groupAllowed(kmsg.ACLOperationDelete, req.Group) {
		resp.ErrorCode = groupDenied
		return resp
	}
	n := &grouppb.OffsetDeleteRequest{GroupId: req.Group}
	check := l.coordinating(req.Group)
	codes := make(map[tp]int16)
	for _, t := range req.Topics {
		var nt *grouppb.TopicPartitions
		readOK := r.topicAllowed(kmsg.ACLOperationRead, t.Topic)
		for _, p := range t.Partitions {
			if !readOK {
				codes[tp{t.Topic, p.Partition}] = topicDenied
				continue
			}
			if check && !l.hasPartition(t.Topic, p.Partition) {
				codes[tp{t.Topic, p.Partition}] = kerr.UnknownTopicOrPartition.Code
				continue
			}
			if nt == nil {
				nt = &grouppb.TopicPartitions{Name: t.Topic}
				n.Topics = append(n.Topics, nt)
			}
			nt.Partitions = append(nt.Partitions, p.Partition)
		}
	}
	out, err := call[*grouppb.OffsetDeleteResponse](ctx, l, callTimeout, n)
	if err != nil {
		resp.ErrorCode = callErrorCode(err)
		return resp
	}
	resp.ErrorCode = int16(out.ErrorCode)
	for _, t := range out.Topics {
		for _, p := range t.Partitions {
			codes[tp{t.Name, p.Partition}] = int16(p.ErrorCode)
		}
	}
	if resp.ErrorCode != errNone {
		return resp
	}
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = codes[tp{t.Topic, p.Partition}]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// hasPartition reports whether the catalog has the partition, giving a
// catalog that may lag (Config.AwaitTopic) the chance to catch up first.
func (l *Listener) hasPartition(topic string, p int32) bool {
	if l.topics.HasPartition(topic, p) {
		return true
	}
	return l.cfg.AwaitTopic != nil && l.cfg.AwaitTopic(topic) && l.topics.HasPartition(topic, p)
}
