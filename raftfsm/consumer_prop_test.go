package raftfsm

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/coordinator"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// cgDriver runs a coordinator.ConsumerGroup through its exported API with
// random clients (joins, heartbeats that report what the last answer gave,
// lost answers, leaves, static leaves and rejoins, crashes, catalog changes
// and timers), as consumer_prop_test.go in coordinator/ does, and hands
// over the records each call writes.
type cgDriver struct {
	r       *rand.Rand
	cfg     coordinator.ConsumerConfig
	g       *coordinator.ConsumerGroup
	topics  map[string]int32
	now     time.Time
	timers  map[cgTimer]time.Time
	clients []*cgClient
	next    int
}

type cgTimer struct {
	kind   coordinator.ConsumerTimerKind
	member string
}

type cgClient struct {
	id, instance string
	epoch        int32
	joined, gone bool
	topics       []string
	owned        []assignor.TopicPartitions
}

var cgTopicNames = []string{"t0", "t1", "t2", "t3"}

func newCGDriver(id string, seed uint64) *cgDriver {
	d := &cgDriver{
		r: rand.New(rand.NewPCG(seed, 848)), cfg: coordinator.DefaultConsumerConfig(),
		topics: map[string]int32{"t0": 6, "t1": 4, "t2": 3},
		now:    time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), timers: map[cgTimer]time.Time{},
	}
	d.g = coordinator.NewConsumerGroup(id, &d.cfg, d.topics)
	return d
}

// effects notes fx's timers and returns its records.
func (d *cgDriver) effects(fx *coordinator.ConsumerEffects) []coordinator.ConsumerRecord {
	for _, op := range fx.Timers {
		k := cgTimer{op.Kind, op.Member}
		if op.Cancel {
			delete(d.timers, k)
		} else {
			d.timers[k] = d.now.Add(op.After)
		}
	}
	return fx.Records
}

func (d *cgDriver) randomTopics() []string {
	var out []string
	for _, n := range cgTopicNames {
		if d.r.IntN(3) > 0 {
			out = append(out, n)
		}
	}
	return out
}

func (d *cgDriver) heartbeat(c *cgClient) []coordinator.ConsumerRecord {
	req := &coordinator.ConsumerHeartbeatRequest{
		Version: 1, GroupID: d.g.ID(), MemberID: c.id, MemberEpoch: c.epoch, RebalanceTimeoutMs: -1,
		Topics: slices.Clone(c.owned), ClientID: "client-" + c.id, ClientHost: "/10.0.0.1",
	}
	if !c.joined {
		req.MemberEpoch, req.RebalanceTimeoutMs = coordinator.EpochJoin, int32(5000+d.r.IntN(20000))
		req.SubscribedTopicNames, req.Topics = slices.Clone(c.topics), []assignor.TopicPartitions{}
	} else if d.r.IntN(15) == 0 {
		c.topics = d.randomTopics()
		req.SubscribedTopicNames = slices.Clone(c.topics)
	}
	if c.instance != "" {
		req.InstanceID = &c.instance
	}
	if d.r.IntN(5) == 0 {
		a := []string{"uniform", "range"}[d.r.IntN(2)]
		req.ServerAssignor = &a
	}
	if d.r.IntN(6) == 0 {
		rack := fmt.Sprint("rack-", d.r.IntN(3))
		req.RackID = &rack
	}
	var fx coordinator.ConsumerEffects
	resp := d.g.Heartbeat(req, d.now, &fx)
	if d.r.IntN(12) == 0 {
		return d.effects(&fx) // the answer is lost
	}
	switch resp.ErrorCode {
	case coordinator.ErrNone:
		c.joined, c.epoch = true, resp.MemberEpoch
		if resp.HasAssignment {
			c.owned = resp.Assignment
		}
	case coordinator.ErrFencedMemberEpoch, coordinator.ErrUnknownMemberID:
		c.joined, c.epoch, c.owned = false, 0, nil
	default:
		c.gone = true
	}
	return d.effects(&fx)
}

// step runs one random call and returns the records it wrote.
func (d *cgDriver) step() []coordinator.ConsumerRecord {
	var live []*cgClient
	for _, c := range d.clients {
		if !c.gone {
			live = append(live, c)
		}
	}
	switch op := d.r.IntN(100); {
	case op < 12 || len(live) == 0:
		d.next++
		c := &cgClient{id: fmt.Sprintf("%s-c%03d", d.g.ID(), d.next), topics: d.randomTopics()}
		if d.r.IntN(4) == 0 {
			c.instance = fmt.Sprint("i", d.r.IntN(4))
		}
		d.clients = append(d.clients, c)
		return d.heartbeat(c)
	case op < 75:
		return d.heartbeat(live[d.r.IntN(len(live))])
	case op < 80:
		c := live[d.r.IntN(len(live))]
		if !c.joined {
			return nil
		}
		epoch := coordinator.EpochLeave
		if c.instance != "" && d.r.IntN(2) == 0 {
			epoch = coordinator.EpochStaticLeave
		}
		req := &coordinator.ConsumerHeartbeatRequest{Version: 1, GroupID: d.g.ID(), MemberID: c.id, MemberEpoch: epoch, RebalanceTimeoutMs: -1}
		if c.instance != "" {
			req.InstanceID = &c.instance
		}
		var fx coordinator.ConsumerEffects
		d.g.Heartbeat(req, d.now, &fx)
		c.gone = true
		if epoch == coordinator.EpochStaticLeave {
			// It comes back later under a new member id.
			d.next++
			d.clients = append(d.clients, &cgClient{id: fmt.Sprintf("%s-c%03d", d.g.ID(), d.next), instance: c.instance, topics: c.topics})
		}
		return d.effects(&fx)
	case op < 83:
		live[d.r.IntN(len(live))].gone = true // crashed: silent until its session ends
		return nil
	case op < 86:
		next := map[string]int32{}
		for _, n := range cgTopicNames {
			if d.r.IntN(5) > 0 {
				next[n] = max(d.topics[n], int32(1+d.r.IntN(4))) + int32(d.r.IntN(2))
			}
		}
		d.topics = next
		var fx coordinator.ConsumerEffects
		d.g.SetTopics(next, d.now, &fx)
		return d.effects(&fx)
	default:
		return d.advance(time.Duration(1+d.r.IntN(10)) * time.Second)
	}
}

// advance moves time on, firing due timers in deadline order.
func (d *cgDriver) advance(by time.Duration) []coordinator.ConsumerRecord {
	end := d.now.Add(by)
	var recs []coordinator.ConsumerRecord
	for {
		var next *cgTimer
		for k, at := range d.timers {
			if at.After(end) {
				continue
			}
			if n := next; n == nil || at.Before(d.timers[*n]) || at.Equal(d.timers[*n]) && (k.kind < n.kind || k.kind == n.kind && k.member < n.member) {
				next = &k
			}
		}
		if next == nil {
			break
		}
		d.now = d.timers[*next]
		delete(d.timers, *next)
		var fx coordinator.ConsumerEffects
		d.g.OnTimer(next.kind, next.member, d.now, &fx)
		recs = append(recs, d.effects(&fx)...)
	}
	d.now = end
	return recs
}

// cgView is what a rebuilt group must have as the live one has it.
type cgView struct {
	Epoch, AssignmentEpoch int32
	State, Assignor        string
	Members                []coordinator.ConsumerMemberView
}

func viewOf(g *coordinator.ConsumerGroup) cgView {
	return cgView{Epoch: g.Epoch(), AssignmentEpoch: g.AssignmentEpoch(), State: g.State(), Assignor: g.AssignorName(), Members: g.Members()}
}

// rebuilt is the group a new leader rebuilds from f's records.
func rebuilt(f *FSM, d *cgDriver) *coordinator.ConsumerGroup {
	recs := coordinator.ConsumerRecordsFromProto(f.ConsumerRecords(d.g.ID()))
	return coordinator.RestoreConsumerGroup(d.g.ID(), &d.cfg, d.topics, recs)
}

func sameGroup(t *testing.T, what string, d *cgDriver, f *FSM) {
	t.Helper()
	if got, want := viewOf(rebuilt(f, d)), viewOf(d.g); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: group %s rebuilt from the FSM's records differs:\n got %+v\nwant %+v", what, d.g.ID(), got, want)
	}
}

// atConsumerFormat returns an FSM whose log format carries consumer
// records, and the index of its next entry.
func atConsumerFormat(t testing.TB) (*FSM, uint64) {
	t.Helper()
	f := NewFSM(catalog.New(), quiet)
	if res := applyAt(f, 1, mustCommand(t, raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT, &raftpb.LogFormat{Format: LogFormatConsumer})); res.Err != nil {
		t.Fatal(res.Err)
	}
	return f, 2
}

// Randomized runs of two consumer groups, their records written through
// the FSM as replicated entries (some compressed, some batching both
// groups, next to a classic group and offsets of the same ids): after
// every entry, the records read back rebuild each group as the live
// machine has it (epochs, members, targets, current assignments); and so
// do they from a snapshot restored into a fresh FSM, which the run then
// goes on with.
func TestConsumerGroupsSurviveApplySnapshotRestore(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	var stats struct{ records, tombstones, restores, members int }
	for seed := range uint64(seeds) {
		f, index := atConsumerFormat(t)
		ds := []*cgDriver{newCGDriver("orders", seed), newCGDriver("payments", seed+1000)}
		// The same ids have offsets, and a classic group of another id
		// shares the FSM; neither changes the consumer records.
		classic := writeOf("classic", nil, groupRecord("classic", 1, "m1"), offsetRecord("orders", "t0", 0, 42))
		applyAt(f, index, writesCmd(t, classic))
		index++
		var buf []byte
		for step := range 300 {
			var ws []*raftpb.GroupWrite
			for _, d := range ds {
				if d.r.IntN(2) == 0 && step > 0 {
					continue
				}
				recs := d.step()
				for _, r := range recs {
					if c, ok := r.(coordinator.ConsumerMemberRecord); ok && c.Deleted {
						stats.tombstones++
					}
				}
				stats.records += len(recs)
				if len(recs) > 0 {
					ws = append(ws, writeOf(d.g.ID(), nil, coordinator.ConsumerRecordsToProto(d.g.ID(), recs)...))
				}
			}
			if len(ws) == 0 {
				continue
			}
			data := writesCmd(t, ws...)
			if step%3 == 0 {
				if c := compressEntry(data, &buf); c != nil {
					data = c
				}
			}
			res := applyAt(f, index, data)
			index++
			if res.Err != nil || slices.ContainsFunc(res.Errs, func(err error) bool { return err != nil }) {
				t.Fatalf("seed %d step %d: %v %v", seed, step, res.Err, res.Errs)
			}
			for _, d := range ds {
				sameGroup(t, fmt.Sprintf("seed %d step %d", seed, step), d, f)
				stats.members += len(d.g.Members())
			}
			if step%25 == 24 {
				snap := encoded(t, f)
				g := NewFSM(catalog.New(), quiet)
				if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
					t.Fatal(err)
				}
				if g.Hash() != f.Hash() || !bytes.Equal(encoded(t, g), snap) {
					t.Fatalf("seed %d step %d: the restored FSM differs", seed, step)
				}
				for _, d := range ds {
					sameGroup(t, fmt.Sprintf("seed %d step %d, restored", seed, step), d, g)
				}
				f = g
				stats.restores++
			}
		}
		if rec, offs, _ := f.Load("classic"); rec.GetGeneration() != 1 || len(offs) != 0 {
			t.Fatalf("seed %d: the classic group: %v, %d offsets", seed, rec, len(offs))
		}
		if rec, offs, _ := f.Load("orders"); rec != nil || len(offs) != 1 || offs[0].GetOffset() != 42 {
			t.Fatalf("seed %d: orders: classic record %v, offsets %v", seed, rec, offs)
		}
	}
	t.Logf("%+v", stats)
	if stats.tombstones == 0 || stats.restores == 0 || stats.members < 1000 {
		t.Fatalf("the runs exercised too little: %+v", stats)
	}
}

// Records read back are copies: changing them changes nothing in the FSM.
func TestConsumerRecordsReadBackAreCopies(t *testing.T) {
	f, index := atConsumerFormat(t)
	d := newCGDriver("g", 7)
	for range 20 {
		if recs := d.step(); len(recs) > 0 {
			applyAt(f, index, writesCmd(t, writeOf("g", nil, coordinator.ConsumerRecordsToProto("g", recs)...)))
			index++
		}
	}
	before := f.Hash()
	for _, r := range f.ConsumerRecords("g") {
		if m := r.GetConsumerMemberMetadata(); m != nil {
			m.MemberId, m.SubscribedTopicNames = "changed", nil
		}
		if c := r.GetConsumerCurrentAssignment(); c != nil {
			c.MemberEpoch = -7
		}
	}
	if f.Hash() != before {
		t.Fatal("changing records read back changed the FSM's state")
	}
	sameGroup(t, "after changing copies", d, f)
	if len(f.ConsumerRecords("g")) == 0 || f.ConsumerRecords("unknown") != nil {
		t.Fatal("records of g missing, or of an unknown group present")
	}
}

// consumerEntries returns the entries of a randomized consumer group run:
// the LOG_FORMAT entry that allows its records, then n group-writes
// entries of its records (seeds for the fuzz targets).
func consumerEntries(t testing.TB, seed uint64, n int) [][]byte {
	out := [][]byte{mustCommand(t, raftpb.CommandType_COMMAND_TYPE_LOG_FORMAT, &raftpb.LogFormat{Format: LogFormatConsumer})}
	d := newCGDriver("g", seed)
	for len(out) <= n {
		if recs := d.step(); len(recs) > 0 {
			out = append(out, writesCmd(t, writeOf("g", nil, coordinator.ConsumerRecordsToProto("g", recs)...)))
		}
	}
	return out
}

// consumerPayloads returns the GROUP_WRITES payloads of consumerEntries.
func consumerPayloads(t testing.TB, seed uint64, n int) [][]byte {
	var out [][]byte
	for _, e := range consumerEntries(t, seed, n)[1:] {
		env, err := parseEnvelope(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env.payload)
	}
	return out
}
