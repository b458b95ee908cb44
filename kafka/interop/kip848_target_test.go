package interop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The targets of the KIP-848 scenarios. Each scenario runs once per target,
// as subtests named after it, so that a difference between kfake (a peer
// implementation, in process) and cohort (a cohortd process) shows side by
// side.

const (
	targetKfake  = "kfake"
	targetCohort = "cohort"
)

var targets848 = []string{targetKfake, targetCohort}

// The group timing the targets are given: kgo heartbeats at the interval
// the coordinator answers (Kafka's default is 5 s), and a static member
// keeps its seat for the session timeout after it leaves.
const (
	heartbeat848 = 250 * time.Millisecond
	session848   = 10 * time.Second
	// wait848 bounds every wait of the scenarios.
	wait848 = 30 * time.Second
)

// cohortFlags848 are the cohortd flags of the "cohort" target beyond the
// harness's own: the same group timing kfake is given.
var cohortFlags848 = []string{
	"--group-consumer-heartbeat-interval", heartbeat848.String(),
	"--group-consumer-session-timeout", session848.String(),
}

type target848 struct {
	name  string
	addr  string
	admin *kgo.Client
	adm   *kadm.Client

	ids map[string][16]byte // topic ids from Metadata
	// unnamed: ConsumerGroupDescribe named a topic by id only (Kafka
	// fills TopicName too).
	unnamed bool
}

// forEachTarget runs the scenario as one subtest per target.
func forEachTarget(t *testing.T, scenario func(t *testing.T, tg *target848)) {
	if testing.Short() {
		t.Skip("interop tests run without -short")
	}
	for _, name := range targets848 {
		t.Run(name, func(t *testing.T) {
			tg := startTarget848(t, name)
			scenario(t, tg)
			if tg.unnamed {
				t.Logf("%s: ConsumerGroupDescribe names the topic by id only (Kafka also fills TopicName)", name)
			}
		})
	}
}

func startTarget848(t *testing.T, name string) *target848 {
	t.Helper()
	var addr string
	switch name {
	case targetKfake:
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.BrokerConfigs(map[string]string{
			"group.consumer.heartbeat.interval.ms": strconv.Itoa(int(heartbeat848.Milliseconds())),
			"group.consumer.session.timeout.ms":    strconv.Itoa(int(session848.Milliseconds())),
		}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		addr = c.ListenAddrs()[0]
	case targetCohort:
		addr = startCohort(t, cohortFlags848...).addr
	default:
		t.Fatalf("unknown target %q", name)
	}
	tg := &target848{name: name, addr: addr, admin: adminClient(t, addr)}
	tg.adm = kadm.NewClient(tg.admin)
	tg.require848(t)
	return tg
}

// require848 checks that the target serves what the scenarios need (see
// missing848). cohortd that does not serve ConsumerGroupHeartbeat v1 skips
// the test; anything else missing fails it.
func (tg *target848) require848(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait848)
	defer cancel()
	hbServed, why := missing848(ctx, tg.admin)
	switch {
	case why == "":
	case !hbServed && tg.name == targetCohort:
		t.Skipf("cohortd does not serve ConsumerGroupHeartbeat (%s)", why)
	default:
		t.Fatalf("%s: %s", tg.name, why)
	}
}

// missing848 says what the broker lacks ("" if nothing): kgo uses the
// consumer group protocol only if ApiVersions lists ConsumerGroupHeartbeat
// (key 68) at v1 or above, and otherwise silently runs the classic one; the
// scenarios check the group with ConsumerGroupDescribe (key 69). hbServed
// reports whether ConsumerGroupHeartbeat v1 is served.
func missing848(ctx context.Context, cl *kgo.Client) (hbServed bool, why string) {
	req := kmsg.NewPtrApiVersionsRequest()
	req.ClientSoftwareName, req.ClientSoftwareVersion = "interop", "1"
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return false, fmt.Sprintf("ApiVersions: %v", err)
	}
	served := map[int16][2]int16{}
	for _, k := range resp.ApiKeys {
		served[k.ApiKey] = [2]int16{k.MinVersion, k.MaxVersion}
	}
	hb, ok := served[kmsg.ConsumerGroupHeartbeat.Int16()]
	if !ok || hb[1] < 1 {
		return false, fmt.Sprintf("ApiVersions lists key 68: %v, versions %v; kgo needs v1", ok, hb)
	}
	if _, ok := served[kmsg.ConsumerGroupDescribe.Int16()]; !ok {
		return true, fmt.Sprintf("ConsumerGroupHeartbeat %v served but not ConsumerGroupDescribe", hb)
	}
	return true, ""
}

// groupView is a Stable consumer group as ConsumerGroupDescribe shows it.
type groupView struct {
	epoch   int32
	members map[string][]int32 // member id -> partitions of the topic
	static  map[string]string  // instance id -> member id
}

var errNotFound = errors.New("not found")

// byInstance returns the partitions of the member with the instance id.
func (v groupView) byInstance(id string) ([]int32, error) {
	m, ok := v.static[id]
	if !ok {
		return nil, fmt.Errorf("instance %s: %w", id, errNotFound)
	}
	return v.members[m], nil
}

// waitStable848 waits until the group is a consumer group (KIP-848) that
// is Stable at an epoch > 0, whose members are exactly the live consumers,
// each at the group epoch with its target assignment reached; every
// partition of the topic is assigned to exactly one member; each consumer's
// own view (its callbacks) is what the coordinator says it has; and the
// ownership log has every partition held by exactly that consumer. It fails
// the test after wait848, with what was not reached.
func waitStable848(t *testing.T, tg *target848, group, topic string, n int32, live []*consumer848, log *ownLog, step string) groupView {
	t.Helper()
	deadline := time.Now().Add(wait848)
	var why string
	for {
		for _, c := range live {
			if c.fellBack.Load() {
				t.Fatalf("%s: %s: %s fell back to the classic group protocol: the target answered ConsumerGroupHeartbeat with UNSUPPORTED_VERSION", tg.name, step, c.name)
			}
		}
		var v groupView
		v, why = checkStable848(tg, group, topic, n, live, log)
		if why == "" {
			return v
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	var views []string
	for _, c := range live {
		member, epoch := c.cl.GroupMetadata()
		views = append(views, fmt.Sprintf("%s owns %v (member %s epoch %d)", c.name, c.ownedNow(), member, epoch))
	}
	t.Fatalf("%s: %s: group %s not stable within %v: %s\nconsumers: %s\nkgo said: %s",
		tg.name, step, group, wait848, why, strings.Join(views, "; "), strings.Join(notes(live), "; "))
	return groupView{}
}

func checkStable848(tg *target848, group, topic string, n int32, live []*consumer848, log *ownLog) (groupView, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id, err := tg.topicID(ctx, topic)
	if err != nil {
		return groupView{}, err.Error()
	}
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, tg.admin)
	if err != nil {
		return groupView{}, fmt.Sprintf("ConsumerGroupDescribe: %v", err)
	}
	if len(resp.Groups) != 1 {
		return groupView{}, fmt.Sprintf("ConsumerGroupDescribe returned %d groups", len(resp.Groups))
	}
	d := resp.Groups[0]
	switch {
	case d.ErrorCode != 0:
		return groupView{}, fmt.Sprintf("ConsumerGroupDescribe: %v (a classic group is GROUP_ID_NOT_FOUND)", kerr.ErrorForCode(d.ErrorCode))
	case d.State != "Stable":
		return groupView{}, fmt.Sprintf("state %s at epoch %d", d.State, d.Epoch)
	case d.Epoch <= 0 || d.AssignmentEpoch != d.Epoch:
		return groupView{}, fmt.Sprintf("group epoch %d, assignment epoch %d", d.Epoch, d.AssignmentEpoch)
	case len(d.Members) != len(live):
		return groupView{}, fmt.Sprintf("%d members, want %d", len(d.Members), len(live))
	}
	v := groupView{epoch: d.Epoch, members: map[string][]int32{}, static: map[string]string{}}
	count := map[int32]int{}
	for _, m := range d.Members {
		ps, err := tg.partitionsOf(m.Assignment, topic, id)
		if err != nil {
			return groupView{}, fmt.Sprintf("member %s: %v", m.MemberID, err)
		}
		tps, err := tg.partitionsOf(m.TargetAssignment, topic, id)
		if err != nil {
			return groupView{}, fmt.Sprintf("member %s: %v", m.MemberID, err)
		}
		if !slices.Equal(ps, tps) {
			return groupView{}, fmt.Sprintf("member %s has %v, target %v", m.MemberID, ps, tps)
		}
		if m.MemberEpoch != d.Epoch {
			return groupView{}, fmt.Sprintf("member %s at epoch %d, group at %d", m.MemberID, m.MemberEpoch, d.Epoch)
		}
		v.members[m.MemberID] = ps
		if m.InstanceID != nil {
			v.static[*m.InstanceID] = m.MemberID
		}
		for _, p := range ps {
			count[p]++
		}
	}
	for p := range n {
		if count[p] != 1 {
			return groupView{}, fmt.Sprintf("partition %d assigned %d times: %v", p, count[p], v.members)
		}
	}
	holders := readOwnership(mustEvents(log)).holders()
	for _, c := range live {
		member, epoch := c.cl.GroupMetadata()
		want, ok := v.members[member]
		if !ok {
			return groupView{}, fmt.Sprintf("%s (member %s) is not a member: %v", c.name, member, v.members)
		}
		if epoch != d.Epoch {
			return groupView{}, fmt.Sprintf("%s knows epoch %d, group at %d", c.name, epoch, d.Epoch)
		}
		if own := c.ownedNow(); !slices.Equal(own, want) {
			return groupView{}, fmt.Sprintf("%s owns %v, the coordinator says %v", c.name, own, want)
		}
		for _, p := range want {
			if !slices.Equal(holders[p], []string{c.name}) {
				return groupView{}, fmt.Sprintf("partition %d: the log has holders %v, the coordinator says %s", p, holders[p], c.name)
			}
		}
	}
	return v, ""
}

// topicID returns the topic's id from Metadata (ConsumerGroupDescribe and
// ConsumerGroupHeartbeat name topics by id).
func (tg *target848) topicID(ctx context.Context, topic string) ([16]byte, error) {
	if id, ok := tg.ids[topic]; ok {
		return id, nil
	}
	ts, err := tg.adm.ListTopics(ctx, topic)
	if err == nil {
		err = ts.Error()
	}
	if err != nil {
		return [16]byte{}, fmt.Errorf("Metadata %s: %w", topic, err)
	}
	id := [16]byte(ts[topic].ID)
	if id == ([16]byte{}) {
		return id, fmt.Errorf("Metadata gives topic %s no id", topic)
	}
	if tg.ids == nil {
		tg.ids = map[string][16]byte{}
	}
	tg.ids[topic] = id
	return id, nil
}

// partitionsOf returns the partitions of the topic in a described
// assignment. Kafka names each topic by id and by name; a target that
// leaves the name empty is noted once (tg.unnamed).
func (tg *target848) partitionsOf(a kmsg.Assignment, topic string, id [16]byte) ([]int32, error) {
	ps := []int32{}
	for _, tp := range a.TopicPartitions {
		if tp.TopicID != id {
			if tp.Topic == topic {
				return nil, fmt.Errorf("topic %s described with id %x, Metadata says %x", topic, tp.TopicID, id)
			}
			continue
		}
		switch tp.Topic {
		case topic:
		case "":
			tg.unnamed = true
		default:
			return nil, fmt.Errorf("topic id %x described as %q, Metadata says %s", id, tp.Topic, topic)
		}
		ps = append(ps, tp.Partitions...)
	}
	slices.Sort(ps)
	return ps, nil
}

func mustEvents(log *ownLog) []ownEvent {
	evs, _ := log.snapshot()
	return evs
}
