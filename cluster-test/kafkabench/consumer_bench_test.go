package kafkabench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The consumer group protocol (KIP-848) measured as the classic one is,
// against kfake in the same run:
//
//	go -C cluster-test test -run '^$' -bench 'Consumer' -benchtime 1x -count 5 ./kafkabench/
//
// BenchmarkConsumerHeartbeat forms COHORT_BENCH_GROUPS groups (10,000) of
// 10 members on each server, over ConsumerGroupHeartbeat and over the
// classic JoinGroup/SyncGroup, then sends closed-loop heartbeats of each
// kind: server CPU per heartbeat, KIP-848's against the classic one's and
// against kfake's. BenchmarkConsumerFormation forms
// COHORT_BENCH_FORM_GROUPS groups (10,000) of 5 members from nothing over
// each protocol: server CPU per group. BenchmarkConsumerScaleOut grows a
// group of COHORT_BENCH_SCALE_MEMBERS (1,000) members by a tenth: the time
// until every member holds its share.

// cgMember is a consumer-protocol member as the benchmarks drive it.
type cgMember struct {
	group, id string
	epoch     int32
	topicID   [16]byte
	owned     []int32 // sorted
	changed   bool    // the last answer changed what it owns
	retried   string  // the last coordinator error answered
}

// cgRequests counts the ConsumerGroupHeartbeats the formations send, and
// cgRetries those answered with a coordinator error.
var cgRequests, cgRetries atomic.Int64

// cgHeartbeat is m's next ConsumerGroupHeartbeat: a full join at epoch 0,
// then what it owns at its epoch (a keepalive would leave the owned
// partitions out; a member that just received an assignment reports it, as
// clients do).
func cgHeartbeat(m *cgMember, topic string) *kmsg.ConsumerGroupHeartbeatRequest {
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.SetVersion(1)
	r.Group, r.MemberID, r.MemberEpoch = m.group, m.id, m.epoch
	if m.epoch == 0 {
		r.RebalanceTimeoutMillis = 60_000
		r.SubscribedTopicNames = []string{topic}
		r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		return r
	}
	r.Topics = []kmsg.ConsumerGroupHeartbeatRequestTopic{}
	if len(m.owned) > 0 {
		t := kmsg.NewConsumerGroupHeartbeatRequestTopic()
		t.TopicID, t.Partitions = m.topicID, m.owned
		r.Topics = append(r.Topics, t)
	}
	return r
}

// adopt takes a heartbeat's answer as a client does: a coordinator error
// (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS)
// leaves the member as it was, to send the same heartbeat again.
func (m *cgMember) adopt(r *kmsg.ConsumerGroupHeartbeatResponse) error {
	switch r.ErrorCode {
	case 14, 15, 16:
		cgRetries.Add(1)
		m.retried = fmt.Sprintf("error %d %v", r.ErrorCode, r.ErrorMessage)
		if r.ErrorMessage != nil {
			m.retried = fmt.Sprintf("error %d %s", r.ErrorCode, *r.ErrorMessage)
		}
		return nil
	}
	if r.ErrorCode != 0 {
		msg := ""
		if r.ErrorMessage != nil {
			msg = *r.ErrorMessage
		}
		return fmt.Errorf("member %s of %s: error %d %s", m.id, m.group, r.ErrorCode, msg)
	}
	m.epoch, m.changed = r.MemberEpoch, false
	if r.Assignment == nil {
		return nil
	}
	var owned []int32
	for _, t := range r.Assignment.Topics {
		m.topicID = t.TopicID
		owned = append(owned, t.Partitions...)
	}
	slices.Sort(owned)
	m.changed = !slices.Equal(owned, m.owned)
	m.owned = owned
	return nil
}

// settled reports whether every member is at one epoch and the members
// hold every one of partitions partitions, each once, as evenly as they
// can be shared.
func settled(ms []*cgMember, partitions int) bool {
	seen := make([]bool, partitions)
	lo, hi, n := partitions, 0, 0
	for _, m := range ms {
		if m.epoch != ms[0].epoch || m.changed {
			return false
		}
		for _, p := range m.owned {
			if int(p) >= partitions || seen[p] {
				return false
			}
			seen[p] = true
		}
		n += len(m.owned)
		lo, hi = min(lo, len(m.owned)), max(hi, len(m.owned))
	}
	return n == partitions && hi-lo <= 1
}

// cgForm brings the members of one group to a settled assignment through
// c: each heartbeats in turn, a member whose assignment just changed at
// once and the others every poll, until the group is settled.
func cgForm(c *pconn, ms []*cgMember, topic string, partitions int, poll time.Duration) error {
	deadline := time.Now().Add(2 * time.Minute)
	for !settled(ms, partitions) {
		if time.Now().After(deadline) {
			var state []string
			for _, m := range ms {
				state = append(state, fmt.Sprintf("%s epoch %d owns %v changed %v last retried on %s", m.id, m.epoch, m.owned, m.changed, m.retried))
			}
			return fmt.Errorf("group %s: not settled in time: %s", ms[0].group, strings.Join(state, "; "))
		}
		var wg sync.WaitGroup
		errs := make([]error, len(ms))
		for i, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cgRequests.Add(1)
				r, err := c.do(cgHeartbeat(m, topic))
				if err == nil {
					err = m.adopt(r.(*kmsg.ConsumerGroupHeartbeatResponse))
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if !slices.ContainsFunc(ms, func(m *cgMember) bool { return m.changed }) {
			time.Sleep(poll)
		}
	}
	return nil
}

// cgFormGroups forms groups groups of members members over KIP-848,
// parallel at a time, each worker on one pipelined connection.
func cgFormGroups(b *testing.B, addr, prefix string, groups, members, parallel int) []*cgMember {
	b.Helper()
	jobs := make(chan int)
	results := make([][]*cgMember, groups)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range min(parallel, groups) {
		c, err := dialP(addr)
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.close()
			for g := range jobs {
				ms := make([]*cgMember, members)
				for i := range ms {
					ms[i] = &cgMember{group: fmt.Sprintf("%s-%05d", prefix, g), id: fmt.Sprintf("%s-%05d-m%02d", prefix, g, i)}
				}
				if err := cgForm(c, ms, benchTopic, benchMembers, joinPoll); err != nil {
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				results[g] = ms
			}
		}()
	}
	for g := range groups {
		jobs <- g
	}
	close(jobs)
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	var all []*cgMember
	for _, ms := range results {
		all = append(all, ms...)
	}
	return all
}

// cgKeepalive is a member's keepalive heartbeat: nothing changed.
func cgKeepalive(m member) kmsg.Request {
	r := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	r.SetVersion(1)
	r.Group, r.MemberID, r.MemberEpoch = m.group, m.id, m.gen
	return r
}

func cgKeepaliveOK(r kmsg.Response) bool {
	h := r.(*kmsg.ConsumerGroupHeartbeatResponse)
	return h.ErrorCode == 0 && h.Assignment == nil
}

func BenchmarkConsumerHeartbeat(b *testing.B) {
	groups := benchCount("COHORT_BENCH_GROUPS", 10000, 20)
	for _, name := range benchServers("cohort", "kfake") {
		s := startBenchServer(b, name)
		createBenchTopic(b, s.addr)
		start := time.Now()
		cms := cgFormGroups(b, s.addr, "cg", groups, benchMembers, setupParallel)
		b.Logf("%s: %d consumer-protocol members in %d groups in %v", name, len(cms), groups, time.Since(start).Round(time.Millisecond))
		ms := make([]member, len(cms))
		for i, m := range cms {
			ms[i] = member{group: m.group, id: m.id, gen: m.epoch}
		}
		classic := joinAll(b, s.addr)
		b.Run(name+"/consumer-heartbeat", func(b *testing.B) { load(b, s, "cgheartbeat."+name, ms, cgKeepalive, cgKeepaliveOK) })
		b.Run(name+"/classic-heartbeat", func(b *testing.B) { load(b, s, "heartbeat."+name, classic, heartbeat, heartbeatOK) })
		s.stop()
	}
}

// formMembersSmall is the group size of the formation comparison.
const formMembersSmall = 5

func BenchmarkConsumerFormation(b *testing.B) {
	groups := benchCount("COHORT_BENCH_FORM_GROUPS", 10000, 50)
	parallel := benchCount("COHORT_BENCH_FORM_PARALLEL", 200, 10)
	for _, name := range benchServers("cohort", "kfake") {
		s := startBenchServer(b, name)
		createBenchTopic(b, s.addr)
		for _, protocol := range []string{"consumer", "classic"} {
			b.Run(name+"/"+protocol, func(b *testing.B) {
				defer s.profile("formation-" + protocol + "." + name)()
				var cpu, took time.Duration
				r0, rr0 := cgRequests.Load(), cgRetries.Load()
				j0, s0, h0 := formRequests.joins.Load(), formRequests.syncs.Load(), formRequests.heartbeats.Load()
				m0 := readMachineTimes()
				for range b.N {
					prefix := fmt.Sprintf("%s%d", protocol, formRuns.Add(1))
					cpu0, t0 := s.cpu(), time.Now()
					if protocol == "consumer" {
						cgFormGroups(b, s.addr, prefix, groups, formMembersSmall, parallel)
					} else {
						formGroups(b, s.addr, prefix, groups, formMembersSmall, parallel)
					}
					cpu += s.cpu() - cpu0
					took += time.Since(t0)
				}
				reportMachine(b, m0)
				n := float64(groups * b.N)
				b.ReportMetric(float64(cpu.Microseconds())/n, "server-cpu-µs/group")
				b.ReportMetric(n/took.Seconds(), "groups/s")
				if protocol == "consumer" {
					b.ReportMetric(float64(cgRequests.Load()-r0)/n, "heartbeats/group")
					b.ReportMetric(float64(cgRetries.Load()-rr0)/n, "retried/group")
				} else {
					b.ReportMetric(float64(formRequests.joins.Load()-j0+formRequests.syncs.Load()-s0+formRequests.heartbeats.Load()-h0)/n, "requests/group")
				}
			})
		}
		s.stop()
	}
}

// scaleTopic is the topic of the scale-out benchmark; it has a partition
// per member after the scale-out, and as many again.
const scaleTopic = "scale"

func BenchmarkConsumerScaleOut(b *testing.B) {
	members := benchCount("COHORT_BENCH_SCALE_MEMBERS", 1000, 50)
	added := members / 10
	partitions := 2 * (members + added)
	for _, name := range benchServers("cohort", "kfake") {
		s := startBenchServer(b, name)
		createTopic(b, s.addr, scaleTopic, int32(partitions))
		b.Run(name, func(b *testing.B) {
			var took time.Duration
			var cpu time.Duration
			for range b.N {
				// A name per run: the benchmark's function runs more than
				// once on one server, and the members of a run stay.
				group := fmt.Sprintf("scale-%d", formRuns.Add(1))
				ms := make([]*cgMember, members+added)
				for k := range ms {
					ms[k] = &cgMember{group: group, id: fmt.Sprintf("%s-m%05d", group, k)}
				}
				c, err := dialP(s.addr)
				if err != nil {
					b.Fatal(err)
				}
				if err := cgFormScale(c, ms[:members], partitions); err != nil {
					b.Fatal(err)
				}
				cpu0, t0 := s.cpu(), time.Now()
				if err := cgFormScale(c, ms, partitions); err != nil {
					b.Fatal(err)
				}
				took += time.Since(t0)
				cpu += s.cpu() - cpu0
				c.close()
			}
			b.ReportMetric(took.Seconds()/float64(b.N), "s-to-settle")
			b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "server-cpu-ms")
		})
		s.stop()
	}
}

// cgFormScale is cgForm for a big group: members heartbeat in rounds, every
// member once a round (pipelined on one connection), a round every
// scalePoll unless some member's assignment just changed.
func cgFormScale(c *pconn, ms []*cgMember, partitions int) error {
	return cgForm(c, ms, scaleTopic, partitions, scalePoll)
}

// scalePoll is how often the members of the scale-out heartbeat when
// nothing changed for them.
const scalePoll = 100 * time.Millisecond

// createTopic creates a topic of the given partitions (one that exists is
// fine).
func createTopic(b *testing.B, addr, topic string, partitions int32) {
	c, err := dialP(addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.close()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.SetVersion(4)
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, t)
	r, err := c.do(req)
	if err != nil {
		b.Fatal(err)
	}
	if code := r.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != 0 && code != 36 { // 36: already exists
		b.Fatalf("create topic %s: error %d", topic, code)
	}
}
