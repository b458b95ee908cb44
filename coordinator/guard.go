package coordinator

import (
	"strconv"
	"strings"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// The ownership guard (see the package doc): a SyncGroup answer of a
// "consumer" group never gives a member a partition that another member
// still listed as owned when it joined this generation, until that owner has
// released it. Withheld partitions are handed over by a follow-up rebalance
// once every owner that blocks them has released.

// GuardStats counts what the ownership guard did.
type GuardStats struct {
	// Withheld is the number of partitions left out of SyncGroup answers
	// because another member still owned them.
	Withheld uint64
	// FollowUps is the number of rebalances the guard started to hand
	// withheld partitions over.
	FollowUps uint64
}

// GuardStats returns the guard's counters for this group.
func (g *Group) GuardStats() GuardStats { return g.guardStats }

// guardState is the guard's part of a Group, valid for generation gen.
type guardState struct {
	gen      int32 // generation the withholding happened in; 0: none
	blockers int   // members of gen whose release is still awaited
}

// guardActive reports whether the guard applies to this group now.
func (g *Group) guardActive() bool {
	return g.cfg.OwnershipGuard && g.protocolType == "consumer"
}

// ownedClaims returns what m listed as owned in its JoinGroup metadata: the
// union of the owned partitions of every protocol it listed (a client puts
// them only in the metadata of its cooperative assignors, while the group may
// have selected another). Claims outside the assignment m was last answered
// are dropped: m released everything else when it acknowledged that answer,
// and a stale claim must not withhold a partition forever.
func ownedClaims(d *assignor.Decoder, m *member) map[topicPartition]struct{} {
	var out map[topicPartition]struct{}
	var last map[topicPartition]struct{} // decoded when the first claim is seen
	var s assignor.Subscription
	for _, p := range m.protocols {
		md := p.GetMetadata()
		// Owned partitions exist from version 1 on.
		if len(md) < 2 || (md[0] == 0 && md[1] == 0) {
			continue
		}
		if d.DecodeSubscription(md, &s) != nil {
			continue
		}
		for _, tp := range s.OwnedPartitions {
			if last == nil && m.answered != nil && len(tp.Partitions) > 0 {
				last = decodeAssigned(d, m.answered)
			}
			for _, p := range tp.Partitions {
				k := topicPartition{tp.Topic, p}
				if last != nil {
					if _, ok := last[k]; !ok {
						continue
					}
				}
				if out == nil {
					out = map[topicPartition]struct{}{}
				}
				out[k] = struct{}{}
			}
		}
	}
	return out
}

// decodeAssigned returns the partitions of a ConsumerProtocol assignment
// (empty for undecodable bytes).
func decodeAssigned(d *assignor.Decoder, b []byte) map[topicPartition]struct{} {
	out := map[topicPartition]struct{}{}
	var a assignor.Assignment
	if d.DecodeAssignment(b, &a) != nil {
		return out
	}
	for _, tp := range a.Topics {
		for _, p := range tp.Partitions {
			out[topicPartition{tp.Topic, p}] = struct{}{}
		}
	}
	return out
}

// guardAssignments applies the guard to the leader's assignment of this
// generation and returns what each member is actually given. It marks the
// owners whose release the follow-up rebalance waits for. byMember is
// modified in place.
func (g *Group) guardAssignments(byMember map[string][]byte, fx *Effects) (withheld int) {
	g.guard = guardState{}
	for _, m := range g.order {
		m.blocksGen = 0
	}
	if !g.guardActive() {
		return 0
	}
	var d assignor.Decoder
	owners := map[topicPartition][]*member{}
	for _, m := range g.order {
		for tp := range ownedClaims(&d, m) {
			owners[tp] = append(owners[tp], m)
		}
	}
	if len(owners) == 0 {
		return 0 // eager members list nothing: nothing to guard
	}
	type given struct {
		a     assignor.Assignment
		ok    bool
		parts map[topicPartition]struct{}
	}
	plan := make(map[string]*given, len(g.order))
	for _, m := range g.order {
		gv := &given{parts: map[topicPartition]struct{}{}}
		if err := d.DecodeAssignment(byMember[m.id], &gv.a); err == nil {
			gv.ok = true
			for _, tp := range gv.a.Topics {
				for _, p := range tp.Partitions {
					gv.parts[topicPartition{tp.Topic, p}] = struct{}{}
				}
			}
		}
		plan[m.id] = gv
	}
	// The event names at most maxGuardNotes partitions, so that a large
	// group does not log one huge line.
	const maxGuardNotes = 16
	var notes []string
	for _, b := range g.order {
		gv := plan[b.id]
		if !gv.ok {
			continue
		}
		var kept []assignor.TopicPartitions
		held := 0
		for _, tp := range gv.a.Topics {
			keep := make([]int32, 0, len(tp.Partitions))
			for _, p := range tp.Partitions {
				k := topicPartition{tp.Topic, p}
				var blocking []*member
				for _, a := range owners[k] {
					if a != b {
						blocking = append(blocking, a)
					}
				}
				if len(blocking) == 0 {
					keep = append(keep, p)
					continue
				}
				withheld++
				held++
				if len(notes) < maxGuardNotes {
					who := make([]string, len(blocking))
					for i, a := range blocking {
						who[i] = a.id
					}
					notes = append(notes, b.id+" not given "+tp.Topic+"-"+strconv.Itoa(int(p))+" (owned by "+strings.Join(who, ",")+")")
				}
				for _, a := range blocking {
					if _, keeps := plan[a.id].parts[k]; keeps {
						// The leader gave it to its owner too: the owner
						// keeps it and nobody is waited for.
						continue
					}
					if a.blocksGen != g.generation {
						a.blocksGen = g.generation
						g.guard.blockers++
					}
				}
			}
			if len(keep) > 0 {
				kept = append(kept, assignor.TopicPartitions{Topic: tp.Topic, Partitions: keep})
			}
		}
		if held == 0 {
			continue
		}
		out := assignor.Assignment{Version: gv.a.Version, Topics: kept, UserData: gv.a.UserData}
		byMember[b.id] = out.AppendTo(nil)
	}
	if withheld == 0 {
		return 0
	}
	if g.guard.blockers > 0 {
		g.guard.gen = g.generation
	}
	g.guardStats.Withheld += uint64(withheld)
	detail := strings.Join(notes, "; ")
	if withheld > len(notes) {
		detail += "; and " + strconv.Itoa(withheld-len(notes)) + " more"
	}
	fx.event(Event{Kind: EventWithheld, Generation: g.generation, Count: withheld, Detail: detail})
	return withheld
}

// guardAnswered records that m was sent its SyncGroup answer of this
// generation.
func (g *Group) guardAnswered(m *member) {
	m.syncedGen = g.generation
	m.answered = m.assignment
}

// guardRelease is a release event of m (a Heartbeat or JoinGroup after its
// own SyncGroup answer of this generation). When it was the last owner the
// withheld partitions waited for, the follow-up rebalance starts and
// guardRelease reports true.
func (g *Group) guardRelease(now time.Time, m *member, fx *Effects) bool {
	if g.guard.gen == 0 || g.guard.gen != g.generation || m.blocksGen != g.generation || m.syncedGen != g.generation {
		return false
	}
	m.blocksGen = 0
	g.guard.blockers--
	if g.guard.blockers > 0 || g.state != Stable {
		return false
	}
	g.guard = guardState{}
	g.guardStats.FollowUps++
	fx.event(Event{Kind: EventFollowUp, Generation: g.generation, Detail: "released by " + m.id})
	g.prepareRebalance(now, fx)
	return true
}

// guardOnJoin runs before a JoinGroup is handled: a JoinGroup of a member
// (by member id, or a static member's instance id) is a release event.
func (g *Group) guardOnJoin(now time.Time, req *pb.JoinGroupRequest, fx *Effects) {
	if g.guard.gen == 0 {
		return
	}
	m := g.members.get(req.GetMemberId())
	if m == nil && req.GroupInstanceId != nil {
		m = g.members.get(g.static[req.GetGroupInstanceId()])
	}
	if m != nil {
		g.guardRelease(now, m, fx)
	}
}

// guardRemoved is the removal (leave, expiry) of m: it no longer blocks. The
// removal starts a rebalance of its own, which hands the partitions over.
func (g *Group) guardRemoved(m *member) {
	if m.blocksGen != 0 && m.blocksGen == g.guard.gen {
		g.guard.blockers--
		if g.guard.blockers == 0 {
			g.guard = guardState{}
		}
	}
	m.blocksGen = 0
}

// guardPending reports whether withheld partitions of this generation still
// wait for a follow-up rebalance.
func (g *Group) guardPending() bool {
	return g.guard.gen != 0 && g.guard.gen == g.generation && g.guard.blockers > 0
}

// FeatureExclusiveOwnership names the guard as a coordinator feature
// (version 1), in ApiVersions v3+ and in CoordinatorFeaturesResponse.
const FeatureExclusiveOwnership = "cohort.exclusive-ownership"

// Features answers CoordinatorFeatures: the cohort extensions cfg turns on.
func Features(cfg *Config) *pb.CoordinatorFeaturesResponse {
	resp := &pb.CoordinatorFeaturesResponse{}
	if cfg.OwnershipGuard {
		resp.ExclusiveOwnership = true
		resp.Features = append(resp.Features, &pb.CoordinatorFeature{Name: FeatureExclusiveOwnership, MinVersion: 1, MaxVersion: 1})
	}
	return resp
}
