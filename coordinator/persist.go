package coordinator

import (
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// persistOp is what the machine does when a write it asked for completes.
type persistOp interface {
	done(g *Group, now time.Time, err error, fx *Effects)
}

// abandoner is implemented by writes whose waiting request must be answered
// when the group is unloaded before the write completes.
type abandoner interface {
	abandon(fx *Effects)
}

func (g *Group) persist(fx *Effects, op persistOp, recs ...*pb.Record) {
	g.nextToken++
	g.inflight[g.nextToken] = op
	fx.Persists = append(fx.Persists, Persist{Token: g.nextToken, Records: recs})
}

// OnPersisted reports the outcome of the write with the given token.
func (g *Group) OnPersisted(now time.Time, token uint64, err error, fx *Effects) {
	op, ok := g.inflight[token]
	if !ok {
		return
	}
	delete(g.inflight, token)
	op.done(g, now, err, fx)
	if g.state == Dead && g.deleting && len(g.inflight) == 0 {
		fx.Gone = true
	}
}

// InFlight returns the number of writes not yet reported back.
func (g *Group) InFlight() int { return len(g.inflight) }

// groupRecord is the durable image of the group (GroupMetadataValue).
// assignments overrides the members' current assignments when not nil.
func (g *Group) groupRecord(now time.Time, assignments map[string][]byte) *pb.Record {
	rec := &pb.GroupRecord{
		GroupId:          g.id,
		ProtocolType:     g.protocolType,
		Generation:       g.generation,
		ProtocolName:     cloneOpt(g.protocolName),
		StateTimestampMs: g.stateTime.UnixMilli(),
		Members:          make([]*pb.MemberRecord, 0, len(g.order)),
	}
	if g.floor > g.generation {
		rec.GenerationFloor = g.floor
	}
	// Withheld partitions wait for a follow-up rebalance: a coordinator
	// that loads this record starts it at once (see the package doc).
	rec.RebalancePending = g.guardPending()

	if g.leader != "" {
		l := g.leader
		rec.Leader = &l
	}
	for _, m := range g.order {
		a := m.assignment
		if assignments != nil {
			a = assignments[m.id]
		}
		rec.Members = append(rec.Members, &pb.MemberRecord{
			MemberId:           m.id,
			GroupInstanceId:    cloneOpt(m.instanceID),
			ClientId:           m.clientID,
			ClientHost:         m.clientHost,
			RebalanceTimeoutMs: durationMs(m.rebalanceTimeout()),
			SessionTimeoutMs:   durationMs(m.sessionTimeout()),
			Subscription:       g.memberMetadata(m),
			Assignment:         a,
		})
	}
	return &pb.Record{Kind: &pb.Record_Group{Group: rec}}
}

// emptyGroupWrite records the group turning Empty; nobody waits for it.
type emptyGroupWrite struct{}

func (*emptyGroupWrite) done(*Group, time.Time, error, *Effects) {}

// replyWrite sends a prepared answer once the write completes; onError, when
// set, rewrites the answer for a failed write.
type replyWrite struct {
	reply   ReplyTo
	msg     proto.Message
	onError func(code int32)
	// groupWrite: the write is a group record (errors map as group writes).
	groupWrite bool
}

func (w *replyWrite) done(g *Group, now time.Time, err error, fx *Effects) {
	if w.reply == nil {
		return
	}
	if err != nil && w.onError != nil {
		if w.groupWrite {
			w.onError(groupWriteError(err))
		} else {
			w.onError(offsetWriteError(err))
		}
	}
	fx.reply(w.reply, w.msg)
}

func (w *replyWrite) abandon(fx *Effects) {
	if w.reply == nil {
		return
	}
	if w.onError != nil {
		w.onError(ErrNotCoordinator)
	}
	fx.reply(w.reply, w.msg)
}

// persistMembership writes the group after members left or expired outside
// a completed rebalance, so a coordinator that takes over neither brings
// them back nor serves their old assignment (the record asks for a
// rebalance). Empty and Dead groups were written by their own transition.
func (g *Group) persistMembership(now time.Time, fx *Effects, op persistOp) bool {
	if g.state == Empty || g.state == Dead {
		return false
	}
	rec := g.groupRecord(now, nil)
	rec.GetGroup().RebalancePending = true
	g.persist(fx, op, rec)
	return true
}
