package coordinator

import (
	"cmp"
	"slices"
	"time"

	"github.com/cohort-coord/cohort/internal/seededbug"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"google.golang.org/protobuf/proto"
)

func commitErrors(req *pb.OffsetCommitRequest, code int32) *pb.OffsetCommitResponse {
	return commitAnswer(req, partitionsIn(req), code, nil)
}

// partitionsIn counts the partitions a commit names.
func partitionsIn(req *pb.OffsetCommitRequest) int {
	n := 0
	for _, t := range req.GetTopics() {
		n += len(t.GetPartitions())
	}
	return n
}

// oneAnswer holds every message of the answer to a commit of one partition.
type oneAnswer struct {
	resp pb.OffsetCommitResponse
	te   [1]pb.TopicPartitionErrors
	pe   [1]pb.PartitionError
	tp   [1]*pb.TopicPartitionErrors
	pp   [1]*pb.PartitionError
}

// commitAnswer is commitErrors for a commit of n partitions. The answer to a
// commit of one partition is built in one, or in a block of its own when one
// is nil.
func commitAnswer(req *pb.OffsetCommitRequest, n int, code int32, one *oneAnswer) *pb.OffsetCommitResponse {
	topics := req.GetTopics()
	// The answer's messages are allocated together: one block for the
	// usual commit of one partition, one array per kind otherwise.
	var (
		resp  *pb.OffsetCommitResponse
		tes   []pb.TopicPartitionErrors
		pes   []pb.PartitionError
		tptrs []*pb.TopicPartitionErrors
		pptrs []*pb.PartitionError
	)
	if len(topics) == 1 && n == 1 {
		b := one
		if b == nil {
			b = new(oneAnswer)
		}
		resp, tes, pes, tptrs, pptrs = &b.resp, b.te[:], b.pe[:], b.tp[:0], b.pp[:0]
	} else {
		resp = &pb.OffsetCommitResponse{}
		tes, pes = make([]pb.TopicPartitionErrors, len(topics)), make([]pb.PartitionError, n)
		tptrs, pptrs = make([]*pb.TopicPartitionErrors, 0, len(topics)), make([]*pb.PartitionError, 0, n)
	}
	for i, t := range topics {
		te := &tes[i]
		te.Name = t.GetName()
		start := len(pptrs)
		for _, p := range t.GetPartitions() {
			pe := &pes[len(pptrs)]
			pe.Partition, pe.ErrorCode = p.GetPartition(), code
			pptrs = append(pptrs, pe)
		}
		te.Partitions = pptrs[start:len(pptrs):len(pptrs)]
		tptrs = append(tptrs, te)
	}
	resp.Topics = tptrs
	return resp
}

// Commit handles OffsetCommit. The answer is sent once the offsets are
// written; the committed offsets become visible to OffsetFetch only then.
func (g *Group) Commit(now time.Time, req *pb.OffsetCommitRequest, to ReplyTo, fx *Effects) {
	if code := g.validateCommit(req); code != ErrNone {
		fx.reply(to, commitErrors(req, code))
		return
	}
	if m := g.members.get(req.GetMemberId()); m != nil && (g.state == Stable || g.state == PreparingRebalance) {
		g.extendSession(now, m, fx)
	}
	n := partitionsIn(req)
	// A commit's records and their wrappers are allocated together, in the
	// write itself, with its answer, for the usual commit of one partition.
	// Each offset is an allocation of its own: the leader's store keeps it as
	// the committed offset, and it must not keep the rest of the write alive.
	op := &commitWrite{reply: to}
	resp := commitAnswer(req, n, ErrNone, &op.answer)
	op.resp = resp
	nowMs := now.UnixMilli()
	expireMs := int64(-1)
	if r := req.GetRetentionTimeMs(); r > 0 {
		expireMs = nowMs + r
	}
	var records []pb.Record
	var kinds []pb.Record_Offset
	var recs []*pb.Record
	if n == 1 {
		records, kinds, recs, op.written = op.record[:], op.kind[:], op.rec[:0], op.one[:0]
	} else {
		records, kinds = make([]pb.Record, n), make([]pb.Record_Offset, n)
		recs, op.written = make([]*pb.Record, 0, n), make([]writtenOffset, 0, n)
	}
	for ti, t := range req.GetTopics() {
		for pi, p := range t.GetPartitions() {
			if len(p.GetMetadata()) > g.cfg.OffsetMetadataMaxBytes {
				resp.Topics[ti].Partitions[pi].ErrorCode = ErrOffsetMetadataTooLarge
				continue
			}
			commitMs := p.GetCommitTimestampMs()
			if commitMs <= 0 {
				commitMs = nowMs
			}
			rec := &pb.OffsetRecord{
				GroupId:           g.id,
				Topic:             t.GetName(),
				Partition:         p.GetPartition(),
				Offset:            p.GetOffset(),
				LeaderEpoch:       p.GetLeaderEpoch(),
				Metadata:          p.GetMetadata(),
				CommitTimestampMs: commitMs,
				ExpireTimestampMs: expireMs,
			}
			i := len(recs)
			kinds[i].Offset = rec
			records[i].Kind = &kinds[i]
			recs = append(recs, &records[i])
			op.written = append(op.written, writtenOffset{ti, pi, rec})
		}
	}
	if len(recs) == 0 {
		fx.reply(to, resp)
		return
	}
	g.persist(fx, op, recs...)
	if seededbug.On("ack-before-apply") {
		fx.reply(to, proto.CloneOf(resp))
		op.reply = nil
	}
	// A consumer group's member epochs are checked above, against the
	// machine whose records this node writes: the fence is the classic
	// generation's.
	if gen := req.GetGenerationId(); gen >= 0 && g.consumer == nil {
		if g.convertedAt(req.GetMemberId(), gen) {
			// A member behind the generation after a downgrade commits at
			// its own: the store's fence is the group's.
			gen = g.generation
		}
		op.fence.Generation, op.fence.MemberId = gen, req.GetMemberId()
		fx.Persists[len(fx.Persists)-1].Fence = &op.fence
	}
}

// validateCommit is Kafka's validateOffsetCommit for an existing group.
func (g *Group) validateCommit(req *pb.OffsetCommitRequest) int32 {
	if g.state == Dead {
		return ErrCoordinatorNotAvailable
	}
	if g.consumer != nil {
		return g.validateConsumerCommit(req)
	}
	gen := req.GetGenerationId()
	switch {
	case gen < 0 && g.state == Empty:
		return ErrNone // an admin or storage-only commit: no member check
	case gen >= 0 || req.GetMemberId() != "" || req.GroupInstanceId != nil:
		m, code := g.validateMember(req.GetMemberId(), req.GroupInstanceId)
		if code != ErrNone {
			return code
		}
		if !g.isGeneration(m.id, gen) && !seededbug.On("no-generation-check") {
			return ErrIllegalGeneration
		}
	default:
		return ErrUnknownMemberID
	}
	if g.state == CompletingRebalance {
		return ErrRebalanceInProgress
	}
	return ErrNone
}

type writtenOffset struct {
	topic, partition int
	rec              *pb.OffsetRecord
}

type commitWrite struct {
	resp    *pb.OffsetCommitResponse
	reply   ReplyTo
	written []writtenOffset
	fence   pb.WriteFence
	// The lists and the answer of a one-partition commit.
	answer oneAnswer
	one    [1]writtenOffset
	rec    [1]*pb.Record
	record [1]pb.Record
	kind   [1]pb.Record_Offset
}

func (w *commitWrite) done(g *Group, now time.Time, err error, fx *Effects) {
	code := offsetWriteError(err)
	for _, o := range w.written {
		tp := topicPartition{o.rec.Topic, o.rec.Partition}
		if err != nil {
			w.resp.Topics[o.topic].Partitions[o.partition].ErrorCode = code
			continue
		}
		if g.state != Dead {
			g.offsets[tp] = offsetEntry{
				offset:      o.rec.Offset,
				leaderEpoch: o.rec.LeaderEpoch,
				metadata:    o.rec.Metadata,
				commitMs:    o.rec.CommitTimestampMs,
				expireMs:    o.rec.ExpireTimestampMs,
			}
		}
	}
	if w.reply != nil {
		fx.reply(w.reply, w.resp)
	}
}

// committing returns the partitions whose commits are being written (nil
// when none is). Kafka keeps a count per partition beside the offsets; here
// the writes in flight are the record, so a commit does not pay two map
// updates for a set that only require_stable fetches and the retention check
// read.
func (g *Group) committing() map[topicPartition]bool {
	var set map[topicPartition]bool
	for _, op := range g.inflight {
		w, ok := op.(*commitWrite)
		if !ok {
			continue
		}
		for _, o := range w.written {
			if set == nil {
				set = map[topicPartition]bool{}
			}
			set[topicPartition{o.rec.Topic, o.rec.Partition}] = true
		}
	}
	return set
}

func (w *commitWrite) abandon(fx *Effects) {
	for _, o := range w.written {
		w.resp.Topics[o.topic].Partitions[o.partition].ErrorCode = ErrNotCoordinator
	}
	if w.reply != nil {
		fx.reply(w.reply, w.resp)
	}
}

// Fetch handles OffsetFetch for this group (stored offsets are returned in
// any state).
func (g *Group) Fetch(req *pb.OffsetFetchRequest) *pb.OffsetFetchResponse {
	if g.state == Dead {
		return AbsentFetch(req)
	}
	if code := g.validateConsumerFetch(req); code != ErrNone {
		return &pb.OffsetFetchResponse{ErrorCode: code}
	}
	resp := &pb.OffsetFetchResponse{}
	var unstable map[topicPartition]bool
	if req.GetRequireStable() {
		unstable = g.committing()
	}
	if req.GetAllTopics() {
		tps := make([]topicPartition, 0, len(g.offsets))
		for tp := range g.offsets {
			tps = append(tps, tp)
		}
		slices.SortFunc(tps, func(a, b topicPartition) int {
			return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
		})
		var cur *pb.OffsetFetchTopic
		for _, tp := range tps {
			if cur == nil || cur.Name != tp.topic {
				cur = &pb.OffsetFetchTopic{Name: tp.topic}
				resp.Topics = append(resp.Topics, cur)
			}
			cur.Partitions = append(cur.Partitions, g.fetchOne(tp, unstable))
		}
		return resp
	}
	for _, t := range req.GetTopics() {
		ft := &pb.OffsetFetchTopic{Name: t.GetName(), Partitions: make([]*pb.OffsetFetchPartition, 0, len(t.GetPartitions()))}
		for _, p := range t.GetPartitions() {
			ft.Partitions = append(ft.Partitions, g.fetchOne(topicPartition{t.GetName(), p}, unstable))
		}
		resp.Topics = append(resp.Topics, ft)
	}
	return resp
}

// fetchOne is the fetched offset of tp; unstable holds the partitions whose
// commits are being written (asked for with require_stable).
func (g *Group) fetchOne(tp topicPartition, unstable map[topicPartition]bool) *pb.OffsetFetchPartition {
	if unstable[tp] {
		return &pb.OffsetFetchPartition{Partition: tp.partition, Offset: -1, LeaderEpoch: -1, ErrorCode: ErrUnstableOffsetCommit}
	}
	o, ok := g.offsets[tp]
	if !ok {
		return &pb.OffsetFetchPartition{Partition: tp.partition, Offset: -1, LeaderEpoch: -1}
	}
	return &pb.OffsetFetchPartition{Partition: tp.partition, Offset: o.offset, LeaderEpoch: o.leaderEpoch, Metadata: o.metadata}
}

// OffsetDelete handles OffsetDelete (KIP-496).
func (g *Group) OffsetDelete(now time.Time, req *pb.OffsetDeleteRequest, to ReplyTo, fx *Effects) {
	if g.state == Dead {
		fx.reply(to, &pb.OffsetDeleteResponse{ErrorCode: ErrGroupIDNotFound})
		return
	}
	if g.state != Empty && g.protocolType != "consumer" {
		fx.reply(to, &pb.OffsetDeleteResponse{ErrorCode: ErrNonEmptyGroup})
		return
	}
	resp := &pb.OffsetDeleteResponse{}
	del := map[topicPartition]bool{}
	for _, t := range req.GetTopics() {
		te := &pb.TopicPartitionErrors{Name: t.GetName()}
		code := ErrNone
		if g.state != Empty {
			if _, sub := g.subscribed[t.GetName()]; sub || !g.subscribedKnown {
				code = ErrGroupSubscribedToTopic
			}
		}
		for _, p := range t.GetPartitions() {
			te.Partitions = append(te.Partitions, &pb.PartitionError{Partition: p, ErrorCode: code})
			if code == ErrNone {
				del[topicPartition{t.GetName(), p}] = true
			}
		}
		resp.Topics = append(resp.Topics, te)
	}
	recs := g.offsetTombstones(func(tp topicPartition) bool { return del[tp] })
	for tp := range del {
		delete(g.offsets, tp)
	}
	if len(recs) == 0 {
		fx.reply(to, resp)
		return
	}
	g.persist(fx, &replyWrite{reply: to, msg: resp, onError: func(code int32) {
		resp.ErrorCode = code
		resp.Topics = nil
	}}, recs...)
}

// offsetTombstones returns tombstones, in a stable order, for the stored
// offsets that keep selects.
func (g *Group) offsetTombstones(keep func(topicPartition) bool) []*pb.Record {
	var tps []topicPartition
	for tp := range g.offsets {
		if keep(tp) {
			tps = append(tps, tp)
		}
	}
	slices.SortFunc(tps, func(a, b topicPartition) int {
		return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
	})
	recs := make([]*pb.Record, 0, len(tps))
	for _, tp := range tps {
		recs = append(recs, &pb.Record{Kind: &pb.Record_OffsetTombstone{OffsetTombstone: &pb.OffsetTombstone{GroupId: g.id, Topic: tp.topic, Partition: tp.partition}}})
	}
	return recs
}

// expireOffsets is the periodic retention check (KIP-211 rules). An Empty
// group left without offsets dies.
func (g *Group) expireOffsets(now time.Time, fx *Effects) {
	if g.state == Dead || g.consumerHeld() {
		return
	}
	nowMs := now.UnixMilli()
	retention := g.cfg.OffsetsRetention.Milliseconds()
	committing := g.committing()
	expired := func(tp topicPartition) bool {
		if committing[tp] {
			return false
		}
		o := g.offsets[tp]
		if o.expireMs >= 0 {
			return nowMs >= o.expireMs
		}
		switch {
		case g.protocolType != "" && g.state == Empty:
			return nowMs-g.stateTime.UnixMilli() >= retention
		case g.protocolType == "consumer" && g.state == Stable && g.subscribedKnown:
			_, sub := g.subscribed[tp.topic]
			return !sub && nowMs-o.commitMs >= retention
		case g.protocolType == "":
			return nowMs-o.commitMs >= retention
		}
		return false
	}
	recs := g.offsetTombstones(expired)
	for _, r := range recs {
		t := r.GetOffsetTombstone()
		delete(g.offsets, topicPartition{t.Topic, t.Partition})
	}
	if g.state == Empty && len(g.offsets) == 0 && len(committing) == 0 && len(g.pending) == 0 {
		recs = append(recs, &pb.Record{Kind: &pb.Record_GroupTombstone{GroupTombstone: &pb.GroupTombstone{GroupId: g.id}}})
		g.die(now, fx)
	}
	if len(recs) > 0 {
		g.persist(fx, &replyWrite{}, recs...)
	}
}
