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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kversion"
)

// KIP-848 (the consumer group protocol) with unmodified kgo consumers
// (kgo.ServerSideBalancer). Every scenario runs against each target (see
// kip848_target_test.go) and checks, from the consumers' own callbacks, that
// no partition was ever held by two consumers at once, and, through
// OffsetFetch, that every acknowledged commit is there at the end.

const (
	parts848 = 12
	// commitEvery848 is how often every consumer commits what it owns
	// while the group changes.
	commitEvery848 = 100 * time.Millisecond
)

// Six consumers, then three (three leave cleanly at once), then six again.
func TestKIP848ScaleDownAndUp(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target848) {
		topic, group := "kip848-scale", "kip848-scale"
		createTopic(t, tg.admin, topic, parts848)
		log, book := newOwnLog(), newCommitBook()
		start := func(i int) *consumer848 {
			return startConsumer848(t, tg, group, topic, fmt.Sprintf("c%d", i), log, book, consumerOpts{commitEvery: commitEvery848})
		}
		var live []*consumer848
		for i := range 6 {
			live = append(live, start(i))
		}
		v6 := waitStable848(t, tg, group, topic, parts848, live, log, "6 consumers joined")
		commitAll(t, tg, live, parts848, "6 consumers")

		var wg sync.WaitGroup
		for _, c := range live[3:] {
			wg.Go(c.close)
		}
		wg.Wait()
		live = live[:3]
		v3 := waitStable848(t, tg, group, topic, parts848, live, log, "scaled down to 3")
		commitAll(t, tg, live, parts848, "3 consumers")

		for i := 6; i < 9; i++ {
			live = append(live, start(i))
		}
		v6b := waitStable848(t, tg, group, topic, parts848, live, log, "scaled back up to 6")
		commitAll(t, tg, live, parts848, "6 consumers again")
		if why := readOwnership(mustEvents(log)).exactlyOnce(parts848); why != "" {
			t.Fatalf("%s: after scaling back up, the consumers' callbacks say: %s", tg.name, why)
		}
		if !(v6.epoch < v3.epoch && v3.epoch < v6b.epoch) {
			t.Fatalf("%s: group epochs %d (6), %d (3), %d (6 again): each change must raise it", tg.name, v6.epoch, v3.epoch, v6b.epoch)
		}
		t.Logf("%s: group epochs %d (6 consumers), %d (3), %d (6 again)", tg.name, v6.epoch, v3.epoch, v6b.epoch)

		for _, c := range live {
			c.close()
		}
		logRefused(t, tg, live)
		checkLog(t, tg, log)
		book.check(t, tg, group, topic)
	})
}

// Six consumers, each closed in turn and replaced at once by a new one.
func TestKIP848RollingRestart(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target848) {
		topic, group := "kip848-roll", "kip848-roll"
		createTopic(t, tg.admin, topic, parts848)
		log, book := newOwnLog(), newCommitBook()
		start := func(i int) *consumer848 {
			return startConsumer848(t, tg, group, topic, fmt.Sprintf("c%d", i), log, book, consumerOpts{commitEvery: commitEvery848})
		}
		live := make([]*consumer848, 6)
		for i := range live {
			live[i] = start(i)
		}
		v := waitStable848(t, tg, group, topic, parts848, live, log, "6 consumers joined")
		epochs := []int32{v.epoch}
		all := slices.Clone(live)
		for i := range live {
			live[i].close()
			live[i] = start(len(all))
			all = append(all, live[i])
			v = waitStable848(t, tg, group, topic, parts848, live, log, fmt.Sprintf("%s replaced by %s", all[i].name, live[i].name))
			epochs = append(epochs, v.epoch)
		}
		commitAll(t, tg, live, parts848, "after the rolling restart")
		if why := readOwnership(mustEvents(log)).exactlyOnce(parts848); why != "" {
			t.Fatalf("%s: after the rolling restart, the consumers' callbacks say: %s", tg.name, why)
		}
		for i := 1; i < len(epochs); i++ {
			if epochs[i] <= epochs[i-1] {
				t.Fatalf("%s: group epochs %v: each replacement must raise it", tg.name, epochs)
			}
		}
		t.Logf("%s: group epochs at each stable point: %v", tg.name, epochs)
		for _, c := range live {
			c.close()
		}
		logRefused(t, tg, all)
		checkLog(t, tg, log)
		book.check(t, tg, group, topic)
	})
}

// Six static members (kgo.InstanceID) are closed and restarted in turn.
//
// kgo v1.22.3 leaves a static member with epoch -2 but no InstanceId.
// Kafka answers that INVALID_REQUEST ("InstanceId can't be null."); a
// lenient coordinator (kfake) parks the member instead. What follows
// depends on the answer, and the test checks each outcome:
//   - accepted: the member keeps its seat and partitions; its restart,
//     well within the session timeout, takes its place with the same
//     partitions, no other member's change and no group epoch bump.
//     Three members are restarted so.
//   - INVALID_REQUEST: the member stays in the group as it was, its
//     restart is refused (UNRELEASED_INSTANCE_ID, checked) until the old
//     member's session times out, and then it joins as a new member. One
//     restart shows it.
//
// Either way no partition is ever held twice and every acknowledged commit
// is kept.
func TestKIP848StaticRestart(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg *target848) {
		topic, group := "kip848-static", "kip848-static"
		createTopic(t, tg.admin, topic, parts848)
		log, book := newOwnLog(), newCommitBook()
		start := func(slot, incarnation int) *consumer848 {
			name := fmt.Sprintf("s%d.%d", slot, incarnation)
			return startConsumer848(t, tg, group, topic, name, log, book, consumerOpts{
				instanceID: fmt.Sprintf("s%d", slot), commitEvery: commitEvery848,
			})
		}
		live := make([]*consumer848, 6)
		for i := range live {
			live[i] = start(i, 0)
		}
		v := waitStable848(t, tg, group, topic, parts848, live, log, "6 static members joined")
		commitAll(t, tg, live, parts848, "6 static members")
		all := slices.Clone(live)
		for _, slot := range []int{0, 2, 4} {
			id := fmt.Sprintf("s%d", slot)
			before := map[string][]int32{}
			for i := range live {
				inst := fmt.Sprintf("s%d", i)
				ps, err := v.byInstance(inst)
				if err != nil {
					t.Fatalf("%s: %v", tg.name, err)
				}
				before[inst] = ps
			}
			old := live[slot]
			closed := time.Now()
			old.close()
			refused := errors.Is(old.leaveErr, kerr.InvalidRequest)
			if old.leaveErr != nil && !refused {
				t.Fatalf("%s: %s's leave (epoch -2, no InstanceId) answered %v: want success or INVALID_REQUEST", tg.name, old.name, old.leaveErr)
			}
			t.Logf("%s: %s left (epoch -2, no InstanceId): answered %s", tg.name, old.name, describeErr(old.leaveErr))
			live[slot] = start(slot, 1)
			all = append(all, live[slot])
			step := fmt.Sprintf("%s restarted as %s", old.name, live[slot].name)
			v2 := waitStable848(t, tg, group, topic, parts848, live, log, step)
			back := time.Since(closed)
			if refused {
				if n := live[slot].unreleased.Load(); n == 0 {
					t.Fatalf("%s: %s: the leave was refused, yet the restart's join was never refused with UNRELEASED_INSTANCE_ID while %s held the instance", tg.name, step, old.name)
				}
				t.Logf("%s: %s: the leave was refused, so the restart joined as a new member once %s's session (%v) had expired, after %v: %s has %v, had %v; group epoch %d -> %d",
					tg.name, step, old.name, session848, back.Round(10*time.Millisecond), id, v2.members[v2.static[id]], before[id], v.epoch, v2.epoch)
				v = v2
				break
			}
			if back >= session848 {
				t.Fatalf("%s: %s took %v, not within the session timeout %v: the test cannot tell", tg.name, step, back, session848)
			}
			for inst, ps := range before {
				got, err := v2.byInstance(inst)
				if err != nil {
					t.Fatalf("%s: %s: %v", tg.name, step, err)
				}
				if !slices.Equal(got, ps) {
					t.Fatalf("%s: %s: instance %s has %v, had %v before (the restarted member is %s)", tg.name, step, inst, got, ps, id)
				}
			}
			if v2.epoch != v.epoch {
				t.Fatalf("%s: %s: group epoch %d -> %d; a static member taking its own place back with the same subscription does not bump it", tg.name, step, v.epoch, v2.epoch)
			}
			t.Logf("%s: %s in %v: %s kept %v, group epoch %d", tg.name, step, back.Round(10*time.Millisecond), id, before[id], v2.epoch)
			v = v2
		}
		commitAll(t, tg, live, parts848, "after the static restarts")
		for _, c := range live {
			c.close()
		}
		logRefused(t, tg, all)
		checkLog(t, tg, log)
		book.check(t, tg, group, topic)
	})
}

func describeErr(err error) string {
	if err == nil {
		return "success"
	}
	return err.Error()
}

// logRefused logs how many background commits the target refused while
// the group changed (kgo retries STALE_MEMBER_EPOCH itself; what is left is
// not an error, only a count).
func logRefused(t *testing.T, tg *target848, cs []*consumer848) {
	t.Helper()
	var n int64
	for _, c := range cs {
		n += c.refused.Load()
	}
	t.Logf("%s: %d background commits refused while the group changed", tg.name, n)
}

// The control: against a broker without ConsumerGroupHeartbeat v1 (kfake
// as Kafka 3.9), kgo with ServerSideBalancer runs the classic protocol
// without a word. The target check says so, and the scenarios' stable
// check cannot pass on such a group, even once every partition is owned.
func TestKIP848DetectsClassicProtocol(t *testing.T) {
	if testing.Short() {
		t.Skip("interop tests run without -short")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.MaxVersions(kversion.V3_9_0()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	tg := &target848{name: "kfake as Kafka 3.9", addr: c.ListenAddrs()[0], admin: adminClient(t, c.ListenAddrs()[0])}
	tg.adm = kadm.NewClient(tg.admin)
	ctx, cancel := context.WithTimeout(context.Background(), wait848)
	defer cancel()
	if served, why := missing848(ctx, tg.admin); served || why == "" {
		t.Fatalf("missing848 = %v, %q: want ConsumerGroupHeartbeat v1 reported missing", served, why)
	}

	topic, group := "kip848-classic", "kip848-classic"
	createTopic(t, tg.admin, topic, parts848)
	log, book := newOwnLog(), newCommitBook()
	var live []*consumer848
	for i := range 2 {
		live = append(live, startConsumer848(t, tg, group, topic, fmt.Sprintf("c%d", i), log, book, consumerOpts{}))
	}
	deadline := time.Now().Add(wait848)
	for readOwnership(mustEvents(log)).exactlyOnce(parts848) != "" {
		if time.Now().After(deadline) {
			t.Fatalf("the classic group did not assign every partition within %v: %s", wait848, readOwnership(mustEvents(log)).exactlyOnce(parts848))
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, gen := live[0].cl.GroupMetadata()
	_, why := checkStable848(tg, group, topic, parts848, live, log)
	if !strings.Contains(why, "GROUP_ID_NOT_FOUND") {
		t.Fatalf("the stable check on a classic group (generation %d) says %q, want GROUP_ID_NOT_FOUND", gen, why)
	}
	t.Logf("classic group at generation %d, every partition owned; the stable check says: %s", gen, why)
}
