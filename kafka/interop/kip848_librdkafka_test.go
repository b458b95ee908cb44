package interop

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"golang.org/x/sys/unix"

	"github.com/cohort-coord/cohort/kafka/interop/clients"
)

// KIP-848 with a second client family: librdkafka 2.15 with
// group.protocol=consumer, through @confluentinc/kafka-javascript
// (testdata/kafka_javascript_client.js, one process per consumer), against
// each target side by side. Three consumers join; the group scales to six
// and back to three; two classic librdkafka consumers (range) join the
// consumer group; then every consumer leaves, one at a time. After each step
// the group must be stable with every partition owned once, by the
// coordinator's account, by each consumer's own and by the ownership log
// its callbacks feed; at the end the log must show no instant at which two
// consumers held a partition, and every commit librdkafka acknowledged (its
// offset_commit_cb without error) must be read back.
//
// kfake does not serve classic members in a consumer group as members of
// it: it runs a classic group of the same name beside it, whose members
// are given partitions the consumer-protocol members hold. Its subtest
// checks that it does (an overlap involving a classic member), and that the
// consumer group carries on at its epoch; the end check leaves those
// overlaps out and fails on any other.

func TestKIP848Librdkafka(t *testing.T) {
	skipShort(t)
	fams := librdkafkaNode(t)
	forEachTarget(t, func(t *testing.T, tg *target848) { runRdk848(t, tg, fams) })
}

// rdkFamilies are the librdkafka families of the scenario.
type rdkFamilies struct{ consumer, classic clients.Family }

func librdkafkaNode(t *testing.T) rdkFamilies {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	s := clients.ScriptSetup(root)
	began := time.Now()
	consumer, err := s.LibrdkafkaNode("consumer", "")
	if err != nil {
		need(t, "%v", err)
	}
	classic, err := s.LibrdkafkaNode("classic", "range")
	if err != nil {
		need(t, "%v", err)
	}
	t.Logf("@confluentinc/kafka-javascript %s ready after %v", clients.KafkaJavaScriptVersion, time.Since(began).Round(time.Millisecond))
	return rdkFamilies{consumer: consumer, classic: classic}
}

// rdkGroup is one run of the scenario: its consumers and the ownership log
// their callbacks feed.
type rdkGroup struct {
	tg           *target848
	group, topic string
	origin       int64 // CLOCK_MONOTONIC at the start, the log's zero
	all          []*clients.Proc
	// excused are consumers whose overlaps with others the end check
	// counts but does not fail on (kfake's classic members).
	excused []*clients.Proc
}

// classicOverlaps lists the overlaps in the log that involve a classic
// member.
func (g *rdkGroup) classicOverlaps() []overlap {
	var out []overlap
	for _, ov := range readOwnership(g.log()).overlaps() {
		if g.isClassic(ov.first.consumer) || g.isClassic(ov.second.consumer) {
			out = append(out, ov)
		}
	}
	return out
}

func (g *rdkGroup) isClassic(name string) bool {
	return slices.ContainsFunc(g.all, func(p *clients.Proc) bool { return p.Name == name && p.Family.Name == "librdkafka-classic" })
}

// monotonic reads CLOCK_MONOTONIC, the clock of the drivers' events.
func monotonic(t *testing.T) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		t.Fatal(err)
	}
	return ts.Nano()
}

func (g *rdkGroup) start(t *testing.T, fam clients.Family, name string) *clients.Proc {
	t.Helper()
	p, err := fam.Start(name, clients.Config{
		Bootstrap: []string{g.tg.addr}, Group: g.group, Topic: g.topic, ClientID: name,
		Partitions: int(parts848), Session: session848, Env: []string{"COMMIT_EVERY_MS=100"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !p.Exited() {
			p.Kill()
		}
	})
	g.all = append(g.all, p)
	return p
}

// log is the ownership log of every consumer so far.
func (g *rdkGroup) log() []ownEvent {
	var out []ownEvent
	for _, p := range g.all {
		for _, e := range p.Events() {
			kind := release
			if e.Kind == "assigned" {
				kind = acquire
			}
			for _, part := range e.Parts {
				out = append(out, ownEvent{consumer: e.Client, partition: part, kind: kind, cause: e.Kind,
					begin: time.Duration(e.Begin - g.origin), end: time.Duration(e.At - g.origin)})
			}
		}
	}
	return out
}

// check says what keeps the group from being a stable consumer group
// whose members are exactly the live consumers ("" if nothing): the checks
// of checkStable848, with each consumer found by its client id, its own
// view the last one it reported, and the log's holders its partitions.
func (g *rdkGroup) check(live []*clients.Proc) (int32, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	id, err := g.tg.topicID(ctx, g.topic)
	if err != nil {
		return 0, err.Error()
	}
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{g.group}
	resp, err := req.RequestWith(ctx, g.tg.admin)
	if err != nil {
		return 0, fmt.Sprintf("ConsumerGroupDescribe: %v", err)
	}
	if len(resp.Groups) != 1 {
		return 0, fmt.Sprintf("ConsumerGroupDescribe returned %d groups", len(resp.Groups))
	}
	d := resp.Groups[0]
	switch {
	case d.ErrorCode != 0:
		return 0, fmt.Sprintf("ConsumerGroupDescribe: %v", kerr.ErrorForCode(d.ErrorCode))
	case d.State != "Stable":
		return 0, fmt.Sprintf("state %s at epoch %d", d.State, d.Epoch)
	case d.Epoch <= 0 || d.AssignmentEpoch != d.Epoch:
		return 0, fmt.Sprintf("group epoch %d, assignment epoch %d", d.Epoch, d.AssignmentEpoch)
	case len(d.Members) != len(live):
		return 0, fmt.Sprintf("%d members, want %d", len(d.Members), len(live))
	}
	byClient := map[string][]int32{}
	count := map[int32]int{}
	for _, m := range d.Members {
		ps, err := g.tg.partitionsOf(m.Assignment, g.topic, id)
		if err != nil {
			return 0, fmt.Sprintf("member %s: %v", m.MemberID, err)
		}
		tps, err := g.tg.partitionsOf(m.TargetAssignment, g.topic, id)
		if err != nil {
			return 0, fmt.Sprintf("member %s: %v", m.MemberID, err)
		}
		switch {
		case !slices.Equal(ps, tps):
			return 0, fmt.Sprintf("member %s (%s) has %v, target %v", m.MemberID, m.ClientID, ps, tps)
		case m.MemberEpoch != d.Epoch:
			return 0, fmt.Sprintf("member %s (%s) at epoch %d, group at %d", m.MemberID, m.ClientID, m.MemberEpoch, d.Epoch)
		}
		if _, dup := byClient[m.ClientID]; dup {
			return 0, fmt.Sprintf("two members with client id %s", m.ClientID)
		}
		byClient[m.ClientID] = ps
		for _, p := range ps {
			count[p]++
		}
	}
	for p := range int32(parts848) {
		if count[p] != 1 {
			return 0, fmt.Sprintf("partition %d assigned %d times: %v", p, count[p], byClient)
		}
	}
	holders := readOwnership(g.log()).holders()
	for _, c := range live {
		want, ok := byClient[c.Name]
		if !ok {
			return 0, fmt.Sprintf("%s is not a member: %v", c.Name, byClient)
		}
		r, ok := c.Last()
		if !ok {
			return 0, c.Name + " reported no assignment yet"
		}
		if !slices.Equal(r.Owned, want) {
			return 0, fmt.Sprintf("%s owns %v, the coordinator says %v", c.Name, r.Owned, want)
		}
		for _, p := range want {
			if !slices.Equal(holders[p], []string{c.Name}) {
				return 0, fmt.Sprintf("partition %d: the log has holders %v, the coordinator says %s", p, holders[p], c.Name)
			}
		}
	}
	if why := readOwnership(g.log()).exactlyOnce(parts848); why != "" {
		return 0, "the log says: " + why
	}
	return d.Epoch, ""
}

// waitStable waits for check to pass and returns the group epoch; it fails
// the test after wait848 with what did not hold.
func (g *rdkGroup) waitStable(t *testing.T, live []*clients.Proc, step string) int32 {
	t.Helper()
	deadline := time.Now().Add(wait848)
	for {
		epoch, why := g.check(live)
		if why == "" {
			return epoch
		}
		if time.Now().After(deadline) {
			var views []string
			for _, c := range live {
				r, _ := c.Last()
				views = append(views, fmt.Sprintf("%s owns %v (%s); logs %v; stderr %s", c.Name, r.Owned, r.Event, c.Logs(), c.StderrTail()))
			}
			t.Fatalf("%s: %s: group %s not stable within %v: %s\nconsumers:\n%s", g.tg.name, step, g.group, wait848, why, strings.Join(views, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// commitAll has every consumer commit what it owns: each commit must be
// acknowledged (offset_commit_cb without error), and together they cover
// every partition.
func (g *rdkGroup) commitAll(t *testing.T, live []*clients.Proc, step string) {
	t.Helper()
	seen := map[string]bool{}
	for _, c := range live {
		m, err := c.Request("commit", "committed_own", wait848)
		if err != nil {
			t.Fatalf("%s: %s: %s's commit in a stable group: %v", g.tg.name, step, c.Name, err)
		}
		for p := range m["committed_own"].(map[string]any) {
			seen[p] = true
		}
	}
	if len(seen) != int(parts848) {
		t.Fatalf("%s: %s: commits acknowledged for %d partitions, want %d", g.tg.name, step, len(seen), parts848)
	}
}

// close closes the consumers at once.
func closeAll(t *testing.T, cs []*clients.Proc) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(cs))
	for i, c := range cs {
		wg.Go(func() { errs[i] = c.Close(wait848) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("close %s: %v\nstderr: %s", cs[i].Name, err, cs[i].StderrTail())
		}
	}
}

func runRdk848(t *testing.T, tg *target848, fams rdkFamilies) {
	g := &rdkGroup{tg: tg, group: "kip848-rdk", topic: "kip848-rdk", origin: monotonic(t)}
	createTopic(t, tg.admin, g.topic, parts848)
	var live []*clients.Proc
	joined := time.Now()
	for i := range 3 {
		live = append(live, g.start(t, fams.consumer, fmt.Sprintf("c%d", i)))
	}
	e3 := g.waitStable(t, live, "3 consumers joined")
	t.Logf("%s: 3 consumers stable after %v (%s)", tg.name, time.Since(joined).Round(10*time.Millisecond), strings.TrimSuffix(strings.Join(live[0].Logs(), "; "), "<nil>"))
	g.commitAll(t, live, "3 consumers")

	for i := 3; i < 6; i++ {
		live = append(live, g.start(t, fams.consumer, fmt.Sprintf("c%d", i)))
	}
	e6 := g.waitStable(t, live, "scaled up to 6")
	g.commitAll(t, live, "6 consumers")

	closeAll(t, live[3:])
	live = live[:3]
	e3b := g.waitStable(t, live, "scaled back down to 3")
	g.commitAll(t, live, "3 consumers again")
	if !(e3 < e6 && e6 < e3b) {
		t.Fatalf("%s: group epochs %d (3), %d (6), %d (3 again): each change must raise it", tg.name, e3, e6, e3b)
	}
	t.Logf("%s: group epochs %d (3 consumers), %d (6), %d (3 again)", tg.name, e3, e6, e3b)

	// Two classic members join the consumer group.
	var classic []*clients.Proc
	for i := range 2 {
		classic = append(classic, g.start(t, fams.classic, fmt.Sprintf("k%d", i)))
	}
	if tg.name == targetKfake {
		// kfake serves them as a classic group of their own, beside the
		// consumer group: the first assignment a classic member reports
		// gives it partitions a consumer-protocol member holds.
		deadline := time.Now().Add(wait848)
		var ov []overlap
		for {
			ov = g.classicOverlaps()
			if len(ov) > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no classic member was given a partition a consumer-protocol member holds within %v: kfake serves classic members in a consumer group now; update the scenario", tg.name, wait848)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("%s: a classic member's JoinGroup to the consumer group is served by a classic group beside it: %s", tg.name, ov[0])
		closeAll(t, classic)
		g.excused = classic
		if e := g.waitStable(t, live, "the classic members left"); e != e3b {
			t.Fatalf("%s: group epoch %d after the classic members left, was %d: the consumer group did not see them", tg.name, e, e3b)
		}
	} else {
		mixed := append(slices.Clone(live), classic...)
		em := g.waitStable(t, mixed, "2 classic members joined")
		g.commitAll(t, mixed, "3 consumer + 2 classic members")
		closeAll(t, classic)
		el := g.waitStable(t, live, "the classic members left")
		t.Logf("%s: group epochs %d (3 consumer + 2 classic members), %d (the classic members left)", tg.name, em, el)
	}

	// Every consumer leaves, one at a time.
	for len(live) > 1 {
		closeAll(t, live[len(live)-1:])
		live = live[:len(live)-1]
		g.waitStable(t, live, fmt.Sprintf("left, %d consumers", len(live)))
	}
	closeAll(t, live)
	g.checkEmpty(t)
	g.checkEnd(t)
}

// checkEmpty waits until the group, its last member gone, is Empty.
func (g *rdkGroup) checkEmpty(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(wait848)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = []string{g.group}
		resp, err := req.RequestWith(ctx, g.tg.admin)
		cancel()
		var why string
		switch {
		case err != nil:
			why = err.Error()
		case len(resp.Groups) != 1:
			why = fmt.Sprintf("%d groups", len(resp.Groups))
		case resp.Groups[0].ErrorCode != 0:
			why = kerr.ErrorForCode(resp.Groups[0].ErrorCode).Error()
		case resp.Groups[0].State != "Empty" || len(resp.Groups[0].Members) != 0:
			why = fmt.Sprintf("state %s with %d members", resp.Groups[0].State, len(resp.Groups[0].Members))
		}
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: every consumer left, the group is not Empty within %v: %s", g.tg.name, wait848, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkEnd fails the test on any overlap or contradiction in the log, and
// on any acknowledged commit that OffsetFetch does not read back.
func (g *rdkGroup) checkEnd(t *testing.T) {
	t.Helper()
	evs := g.log()
	o := readOwnership(evs)
	var bad []string
	excused := 0
	for _, ov := range o.overlaps() {
		if slices.ContainsFunc(g.excused, func(p *clients.Proc) bool { return p.Name == ov.first.consumer || p.Name == ov.second.consumer }) {
			excused++
			continue
		}
		bad = append(bad, "overlap: "+ov.String())
	}
	for _, p := range o.problems {
		bad = append(bad, "log: "+p)
	}
	if h := o.holders(); len(h) > 0 {
		for p, cs := range h {
			if len(cs) > 0 {
				bad = append(bad, fmt.Sprintf("partition %d still held by %v after every consumer closed", p, cs))
			}
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%s: %d findings:\n%s", g.tg.name, len(bad), strings.Join(bad, "\n"))
	}
	for _, p := range g.all {
		for _, l := range p.Logs() {
			if strings.Contains(l, "never assigned") || strings.Contains(l, "assign: ") {
				t.Logf("%s: %s: %s", g.tg.name, p.Name, strings.TrimPrefix(l, "<nil>"))
			}
		}
	}

	acked := map[int32]int64{}
	commits, failed := 0, 0
	for _, p := range g.all {
		as, f := p.Acks()
		failed += f
		for _, a := range as {
			commits++
			for part, off := range a.Offsets {
				acked[part] = max(acked[part], off)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait848)
	defer cancel()
	got, err := g.tg.adm.FetchOffsets(ctx, g.group)
	if err != nil {
		t.Fatalf("%s: OffsetFetch: %v", g.tg.name, err)
	}
	if len(acked) != int(parts848) {
		t.Fatalf("%s: acknowledged commits for %d partitions, want %d", g.tg.name, len(acked), parts848)
	}
	var lost []string
	for _, p := range slices.Sorted(maps.Keys(acked)) {
		o, ok := got.Lookup(g.topic, p)
		switch {
		case !ok:
			lost = append(lost, fmt.Sprintf("partition %d: no offset, acknowledged %d", p, acked[p]))
		case o.Err != nil:
			lost = append(lost, fmt.Sprintf("partition %d: %v", p, o.Err))
		case o.At < acked[p]:
			lost = append(lost, fmt.Sprintf("partition %d: offset %d, acknowledged %d", p, o.At, acked[p]))
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%s: acknowledged commits not read back: %s", g.tg.name, strings.Join(lost, "; "))
	}
	if excused > 0 {
		t.Logf("%s: %d overlaps with the classic members kfake served beside the consumer group", g.tg.name, excused)
	}
	t.Logf("%s: %d ownership events, 0 overlaps between consumer-protocol members; %d commits acknowledged by offset_commit_cb (%d reported failed), the last of each of the %d partitions read back",
		g.tg.name, len(evs), commits, failed, len(acked))
}
