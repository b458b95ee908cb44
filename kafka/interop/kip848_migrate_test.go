package interop

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Online migration (KIP-848 section 4) with unmodified kgo consumers: six
// classic consumers are rolled, one at a time, to the consumer group
// protocol (kgo.ServerSideBalancer), then back, as a rolling deploy does:
// close the old consumer, start the new one, wait until the group is
// stable. Every 100 ms a watcher lists the group's type (ListGroups v5).
//
// Against cohort (default policy: bidirectional) the first consumer-protocol
// join upgrades the group, classic members are served inside the consumer
// group, and the departure of the last consumer-protocol member downgrades
// it: the type changes once each way, no join is refused, no partition is
// ever held by two consumers, every acknowledged commit is kept.
//
// kfake does not migrate a group with members: it answers a
// ConsumerGroupHeartbeat join to a classic group with members
// GROUP_ID_NOT_FOUND. Its subtest checks that answer and that the classic
// group carries on without the refused consumer; it does not roll further.

// migrateWait bounds every wait of the migration scenario.
const migrateWait = 60 * time.Second

type classicBalancer struct {
	name string
	bal  func() kgo.GroupBalancer
}

var classicBalancers = []classicBalancer{
	{"cooperative-sticky", kgo.CooperativeStickyBalancer},
	{"range", kgo.RangeBalancer},
}

func TestKIP848OnlineMigration(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target848) {
		for _, b := range classicBalancers {
			t.Run(b.name, func(t *testing.T) {
				switch tg.name {
				case targetKfake:
					migrateRefused(t, tg, b)
				default:
					migrateRolling(t, tg, b)
				}
			})
		}
	})
}

// migration is one run of the scenario: its group, log, commits and the
// consumers started so far.
type migration struct {
	tg           *target848
	group, topic string
	bal          classicBalancer
	log          *ownLog
	book         *commitBook
	all          []*consumer848
	watch        *typeWatch
}

func newMigration(t *testing.T, tg *target848, b classicBalancer) *migration {
	name := "kip848-migrate-" + b.name
	m := &migration{tg: tg, group: name, topic: name, bal: b, log: newOwnLog(), book: newCommitBook()}
	createTopic(t, tg.admin, m.topic, parts848)
	m.watch = watchType(t, tg, m.group, m.log)
	m.watch.mark("starting")
	return m
}

// start starts the next consumer: classic ("k" names) or with the consumer
// protocol ("n" names).
func (m *migration) start(t *testing.T, classic bool) *consumer848 {
	t.Helper()
	o := consumerOpts{commitEvery: commitEvery848}
	prefix := "n"
	if classic {
		o.classic = []kgo.GroupBalancer{m.bal.bal()}
		prefix = "k"
	}
	c := startConsumer848(t, m.tg, m.group, m.topic, fmt.Sprintf("%s%d", prefix, len(m.all)), m.log, m.book, o)
	m.all = append(m.all, c)
	return c
}

// waitStable waits until the group is stable with exactly the live
// consumers: a consumer group (waitStable848's checks) while one of them
// uses the consumer protocol, a classic group otherwise.
func (m *migration) waitStable(t *testing.T, live []*consumer848, step string) {
	t.Helper()
	consumer := slices.ContainsFunc(live, func(c *consumer848) bool { return !c.classic })
	deadline := time.Now().Add(migrateWait)
	var why string
	for {
		if consumer {
			_, why = checkStable848(m.tg, m.group, m.topic, parts848, live, m.log)
		} else {
			why = checkClassicStable(m.tg, m.group, m.topic, parts848, live, m.log)
		}
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	kind := "classic"
	if consumer {
		kind = "consumer"
	}
	var views []string
	for _, c := range live {
		member, epoch := c.cl.GroupMetadata()
		views = append(views, fmt.Sprintf("%s owns %v (member %s epoch %d)", c.name, c.ownedNow(), member, epoch))
	}
	t.Fatalf("%s: %s: %s group %s not stable within %v: %s\nconsumers: %s\ntypes seen: %s\nkgo said: %s",
		m.tg.name, step, kind, m.group, migrateWait, why, strings.Join(views, "; "), m.watch.String(), strings.Join(notes(m.all), "; "))
}

// startClassic starts six classic consumers, waits until their group is
// stable and has each commit.
func (m *migration) startClassic(t *testing.T) []*consumer848 {
	live := make([]*consumer848, 6)
	for i := range live {
		live[i] = m.start(t, true)
	}
	m.waitStable(t, live, "6 classic consumers joined")
	commitAll(t, m.tg, live, parts848, "6 classic consumers")
	return live
}

// migrateRolling is the scenario against a target that migrates: six
// classic consumers, replaced one at a time by consumer-protocol ones,
// then back.
func migrateRolling(t *testing.T, tg *target848, b classicBalancer) {
	began := time.Now()
	m := newMigration(t, tg, b)
	live := m.startClassic(t)

	// roll replaces every consumer in turn; it returns when each step
	// began (before the old consumer is closed) and ended (stable).
	roll := func(toClassic bool) (steps [][2]time.Duration) {
		for i := range live {
			old := live[i]
			at := m.log.now()
			m.watch.mark("replacing " + old.name)
			old.close()
			live[i] = m.start(t, toClassic)
			m.watch.mark(fmt.Sprintf("%s replaced by %s", old.name, live[i].name))
			m.waitStable(t, live, fmt.Sprintf("%s replaced by %s", old.name, live[i].name))
			steps = append(steps, [2]time.Duration{at, m.log.now()})
			t.Logf("%s: %s replaced by %s in %v; type %s", tg.name, old.name, live[i].name, (steps[i][1] - steps[i][0]).Round(10*time.Millisecond), m.watch.last())
		}
		return steps
	}
	up := roll(false)
	commitAll(t, tg, live, parts848, "6 consumer-protocol consumers")
	down := roll(true)
	commitAll(t, tg, live, parts848, "6 classic consumers again")
	if why := readOwnership(mustEvents(m.log)).exactlyOnce(parts848); why != "" {
		t.Fatalf("%s: after the roll back, the consumers' callbacks say: %s", tg.name, why)
	}
	if why := checkClassicStable(tg, m.group, m.topic, parts848, live, m.log); why != "" {
		t.Fatalf("%s: after the roll back: %s", tg.name, why)
	}
	for _, c := range live {
		c.close()
	}
	m.watch.stop()

	// The type changed once each way: to consumer during the first
	// upgrade step, back to classic during the last downgrade step (the
	// last consumer-protocol member left).
	changes := m.watch.changes()
	want := []string{"classic", "consumer", "classic"}
	if got := typesOf(changes); !slices.Equal(got, want) {
		t.Fatalf("%s: group types seen %v, want %v: %s", tg.name, got, want, m.watch.String())
	}
	if at := changes[1].at; at < up[0][0] || at > up[0][1] {
		t.Fatalf("%s: the group became a consumer group at %v, not during the first upgrade step [%v, %v]: %s", tg.name, at, up[0][0], up[0][1], m.watch.String())
	}
	if at, last := changes[2].at, down[len(down)-1]; at < last[0] || at > last[1] {
		t.Fatalf("%s: the group became classic again at %v, not during the last downgrade step [%v, %v]: %s", tg.name, at, last[0], last[1], m.watch.String())
	}
	t.Logf("%s: group types: %s", tg.name, m.watch.String())
	logRefused(t, tg, m.all)
	checkLog(t, tg, m.log)
	m.book.check(t, tg, m.group, m.topic)
	checkNoRefusal(t, tg, m.all)
	t.Logf("%s: %s: 12 replacements, %d consumers, in %v", tg.name, b.name, len(m.all), time.Since(began).Round(100*time.Millisecond))
}

// migrateRefused is the scenario against kfake, which does not migrate a
// group with members: the first consumer-protocol consumer's join is
// refused with GROUP_ID_NOT_FOUND (kgo ends the session: its
// OnGroupManageError hook gets it), the group stays classic and its five
// remaining classic members keep every partition. Rolling further would
// only show the refused consumers join once the last classic member has
// left and the group is empty (an offline migration), and kfake never
// turns a consumer group back into a classic one.
func migrateRefused(t *testing.T, tg *target848, b classicBalancer) {
	m := newMigration(t, tg, b)
	live := m.startClassic(t)

	m.watch.mark("replacing " + live[0].name)
	live[0].close()
	n := m.start(t, false)
	step := fmt.Sprintf("%s replaced by %s", live[0].name, n.name)
	m.watch.mark(step)
	deadline := time.Now().Add(migrateWait)
	for {
		manage, refused := n.groupErrors()
		if slices.ContainsFunc(manage, func(e timedErr) bool { return errors.Is(e.err, kerr.GroupIDNotFound) }) {
			t.Logf("%s: %s: the join was refused: %v (kgo said: %v)", tg.name, step, manage, refused)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s: the consumer-protocol join to a classic group with members was not refused with GROUP_ID_NOT_FOUND within %v (errors: %v; owns %v)",
				tg.name, step, migrateWait, manage, n.ownedNow())
		}
		time.Sleep(100 * time.Millisecond)
	}
	live = live[1:]
	m.waitStable(t, live, step+" (refused)")
	if own := n.ownedNow(); len(own) > 0 {
		t.Fatalf("%s: %s: the refused consumer owns %v", tg.name, step, own)
	}
	commitAll(t, tg, live, parts848, "5 classic consumers after the refusal")
	n.close()
	for _, c := range live {
		c.close()
	}
	m.watch.stop()
	if got := typesOf(m.watch.changes()); !slices.Equal(got, []string{"classic"}) {
		t.Fatalf("%s: group types seen %v, want only classic: %s", tg.name, got, m.watch.String())
	}
	checkLog(t, tg, m.log)
	m.book.check(t, tg, m.group, m.topic)
	t.Logf("%s: does not migrate a group with members: the consumer-protocol join is refused with GROUP_ID_NOT_FOUND and the group stays classic (%s)", tg.name, m.watch.String())
}

// checkNoRefusal fails the test if any consumer's group session ended in
// an error or any join was refused (see consumer848.manageErrs).
func checkNoRefusal(t *testing.T, tg *target848, cs []*consumer848) {
	t.Helper()
	var bad []string
	for _, c := range cs {
		manage, refused := c.groupErrors()
		for _, e := range manage {
			bad = append(bad, fmt.Sprintf("%s: group session ended: %v", c.name, e))
		}
		for _, e := range refused {
			bad = append(bad, fmt.Sprintf("%s: refused: %v", c.name, e))
		}
	}
	if len(bad) > 0 {
		t.Fatalf("%s: %d refused joins or failed group sessions:\n%s", tg.name, len(bad), strings.Join(bad, "\n"))
	}
}

// checkClassicStable says what keeps the group from being a stable classic
// group with exactly the live consumers ("" if nothing): ListGroups type
// "classic", DescribeGroups Stable with protocol type "consumer", one member
// per live consumer, every partition assigned once, each consumer's own
// view (its callbacks) what DescribeGroups says it has, and the ownership
// log has each partition held by exactly that consumer.
func checkClassicStable(tg *target848, group, topic string, n int32, live []*consumer848, log *ownLog) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, _, err := listGroupType(ctx, tg.admin, group)
	if err != nil {
		return err.Error()
	}
	if typ != "classic" {
		return fmt.Sprintf("ListGroups says type %q", typ)
	}
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, tg.admin)
	if err != nil {
		return fmt.Sprintf("DescribeGroups: %v", err)
	}
	if len(resp.Groups) != 1 {
		return fmt.Sprintf("DescribeGroups returned %d groups", len(resp.Groups))
	}
	g := resp.Groups[0]
	switch {
	case g.ErrorCode != 0:
		return fmt.Sprintf("DescribeGroups: %v", kerr.ErrorForCode(g.ErrorCode))
	case g.State != "Stable":
		return fmt.Sprintf("state %s", g.State)
	case g.ProtocolType != "consumer":
		return fmt.Sprintf("protocol type %q", g.ProtocolType)
	case len(g.Members) != len(live):
		return fmt.Sprintf("%d members, want %d", len(g.Members), len(live))
	}
	members := map[string][]int32{}
	count := map[int32]int{}
	for _, dm := range g.Members {
		var a kmsg.ConsumerMemberAssignment
		if err := a.ReadFrom(dm.MemberAssignment); err != nil {
			return fmt.Sprintf("member %s: assignment: %v", dm.MemberID, err)
		}
		ps := []int32{}
		for _, at := range a.Topics {
			if at.Topic == topic {
				ps = append(ps, at.Partitions...)
			}
		}
		slices.Sort(ps)
		members[dm.MemberID] = ps
		for _, p := range ps {
			count[p]++
		}
	}
	for p := range n {
		if count[p] != 1 {
			return fmt.Sprintf("partition %d assigned %d times: %v", p, count[p], members)
		}
	}
	holders := readOwnership(mustEvents(log)).holders()
	for _, c := range live {
		member, _ := c.cl.GroupMetadata()
		want, ok := members[member]
		if !ok {
			return fmt.Sprintf("%s (member %s) is not a member: %v", c.name, member, members)
		}
		if own := c.ownedNow(); !slices.Equal(own, want) {
			return fmt.Sprintf("%s owns %v, the coordinator says %v", c.name, own, want)
		}
		for _, p := range want {
			if !slices.Equal(holders[p], []string{c.name}) {
				return fmt.Sprintf("partition %d: the log has holders %v, the coordinator says %s", p, holders[p], c.name)
			}
		}
	}
	return ""
}

// listGroupType returns the group's type and state from ListGroups v5
// ("" if the group is not listed).
func listGroupType(ctx context.Context, cl *kgo.Client, group string) (typ, state string, err error) {
	req := kmsg.NewPtrListGroupsRequest()
	req.SetVersion(5)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		return "", "", fmt.Errorf("ListGroups: %w", err)
	}
	for _, g := range resp.Groups {
		if g.Group == group {
			return g.GroupType, g.GroupState, nil
		}
	}
	return "", "", nil
}

// ---------------------------------------------------------------------------
// The type watcher.

// typeSeen is one observation of the group's type, on the ownership log's
// clock; only changes (of type or state) are kept.
type typeSeen struct {
	at         time.Duration
	typ, state string
	err        string
	polls      int    // observations with this type and state
	step       string // what the test was doing (typeWatch.mark)
}

// typeWatch lists the group every 100 ms until stopped.
type typeWatch struct {
	log  *ownLog
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	seen []typeSeen
	step string // what the test was doing (mark)
}

func watchType(t *testing.T, tg *target848, group string, log *ownLog) *typeWatch {
	w := &typeWatch{log: log, done: make(chan struct{})}
	w.wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			typ, state, err := listGroupType(ctx, tg.admin, group)
			cancel()
			w.add(typ, state, err)
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	})
	t.Cleanup(w.stop)
	return w
}

func (w *typeWatch) add(typ, state string, err error) {
	s := typeSeen{at: w.log.now(), typ: typ, state: state, polls: 1}
	if err != nil {
		s.err = err.Error()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.seen); n > 0 && w.seen[n-1].typ == s.typ && w.seen[n-1].state == s.state && w.seen[n-1].err == s.err {
		w.seen[n-1].polls++
		return
	}
	s.step = w.step
	w.seen = append(w.seen, s)
}

// mark names what the test does next, for the report.
func (w *typeWatch) mark(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.step = what
}

func (w *typeWatch) stop() {
	select {
	case <-w.done:
		return
	default:
	}
	close(w.done)
	w.wg.Wait()
}

func (w *typeWatch) last() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) == 0 {
		return "none seen"
	}
	s := w.seen[len(w.seen)-1]
	return s.typ + "/" + s.state
}

// changes returns the observations at which the type changed (the group
// not listed, or the listing failing, is no type and changes nothing).
func (w *typeWatch) changes() []typeSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []typeSeen
	for _, s := range w.seen {
		if s.typ == "" {
			continue
		}
		if n := len(out); n == 0 || out[n-1].typ != s.typ {
			out = append(out, s)
		}
	}
	return out
}

func typesOf(ss []typeSeen) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.typ
	}
	return out
}

// String lists every observation kept: when, type/state, how many polls.
func (w *typeWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	parts := make([]string, 0, len(w.seen))
	for _, s := range w.seen {
		what := s.typ + "/" + s.state
		switch {
		case s.err != "":
			what = s.err
		case s.typ == "":
			what = "not listed"
		}
		parts = append(parts, fmt.Sprintf("%v %s x%d [%s]", s.at.Round(time.Millisecond), what, s.polls, s.step))
	}
	return strings.Join(parts, ", ")
}

// The downgrade in its smallest form: one classic consumer and one
// consumer-protocol consumer in a consumer group; the latter leaves, the
// group becomes classic again. The classic consumer commits nothing, so its
// first request to the classic group is a Heartbeat at the generation it
// knows (its member epoch, e). Kafka builds the classic group from the
// consumer group as it was before the leave (ClassicGroup.fromConsumerGroup
// leaves the leaving member out; its removal does not bump the epoch), so
// the generation is e, the Heartbeat is answered REBALANCE_IN_PROGRESS and
// the consumer rejoins: generation e+1. A coordinator that removes the
// member first (epoch e+1) and then converts answers that Heartbeat
// ILLEGAL_GENERATION, which kgo takes as the end of its group session: its
// partitions are lost (OnPartitionsLost, no commit), and it joins again.
func TestKIP848DowngradeGeneration(t *testing.T) {
	if testing.Short() {
		t.Skip("interop tests run without -short")
	}
	tg := startTarget848(t, targetCohort)
	for _, b := range classicBalancers {
		t.Run(b.name, func(t *testing.T) {
			name := "kip848-downgrade-" + b.name
			createTopic(t, tg.admin, name, parts848)
			log, book := newOwnLog(), newCommitBook()
			k := startConsumer848(t, tg, name, name, "k0", log, book, consumerOpts{classic: []kgo.GroupBalancer{b.bal()}})
			if why := waitFor(func() string { return checkClassicStable(tg, name, name, parts848, []*consumer848{k}, log) }); why != "" {
				t.Fatalf("%s: the classic consumer alone: %s", tg.name, why)
			}
			n := startConsumer848(t, tg, name, name, "n1", log, book, consumerOpts{})
			v := waitStable848(t, tg, name, name, parts848, []*consumer848{k, n}, log, "upgraded by n1")
			_, e := k.cl.GroupMetadata()
			if e != v.epoch {
				t.Fatalf("%s: the classic consumer knows generation %d, the group is at epoch %d", tg.name, e, v.epoch)
			}
			n.close()
			if why := waitFor(func() string { return checkClassicStable(tg, name, name, parts848, []*consumer848{k}, log) }); why != "" {
				t.Fatalf("%s: after n1 left: %s", tg.name, why)
			}
			_, gen := k.cl.GroupMetadata()
			manage, _ := k.groupErrors()
			if len(manage) > 0 {
				t.Fatalf("%s: the downgrade ended the classic consumer's group session: %v (it knew generation %d; after it joined again: %d; Kafka converts at generation %d and rebalances to %d)",
					tg.name, manage, e, gen, e, e+1)
			}
			if gen != e+1 {
				t.Fatalf("%s: generation %d after the downgrade's rebalance, want %d (the consumer group was at epoch %d)", tg.name, gen, e+1, e)
			}
			k.close()
			checkLog(t, tg, log)
			t.Logf("%s: downgraded at generation %d, rebalanced to %d; the classic consumer's session carried on", tg.name, e, gen)
		})
	}
}

// waitFor polls check every 100 ms until it says nothing ("") or
// migrateWait has passed; it returns what check said last.
func waitFor(check func() string) string {
	deadline := time.Now().Add(migrateWait)
	for {
		why := check()
		if why == "" || time.Now().After(deadline) {
			return why
		}
		time.Sleep(100 * time.Millisecond)
	}
}
