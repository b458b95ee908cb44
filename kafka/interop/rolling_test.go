package interop

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/kafka/interop/clients"
)

// Rolling assignor changes with six unmodified kgo consumers, restarted one
// at a time the way operators upgrade (KIP-429, KIP-726). Ownership comes
// from the clients' own callbacks, timestamped: an assignment starts when its
// callback is called, a revocation ends when its callback returns (each takes
// revokeMs, as a consumer finishing its work would). Two clients owning one
// partition at the same instant is an overlap.

const (
	rollMembers    = 6
	rollPartitions = partitions
	revokeMs       = 300
)

type rollPlan struct {
	name  string
	start string // assignor list of the first members
	// bounces: every member is restarted once per bounce, with this list.
	bounces []string
	// outside: a restarted member may stay outside the group (its join
	// refused with INCONSISTENT_GROUP_PROTOCOL) until the last member of
	// the previous list is gone.
	outside bool
}

var rollPlans = []rollPlan{
	{name: "two-bounce-upgrade", start: "range", bounces: []string{"cooperative-sticky,range", "cooperative-sticky"}},
	{name: "single-bounce-upgrade", start: "range", bounces: []string{"cooperative-sticky"}, outside: true},
	{name: "downgrade", start: "cooperative-sticky,range", bounces: []string{"range"}},
	{name: "two-bounce-downgrade", start: "cooperative-sticky", bounces: []string{"cooperative-sticky,range", "range"}},
	{name: "back-and-forth", start: "cooperative-sticky,range", bounces: []string{"range", "cooperative-sticky,range", "range", "cooperative-sticky,range"}},
}

// rollRepeat is how often each plan runs (COHORT_INTEROP_ROLL_REPEAT, default 1).
func rollRepeat() int {
	if n, err := strconv.Atoi(os.Getenv("COHORT_INTEROP_ROLL_REPEAT")); err == nil && n > 0 {
		return n
	}
	return 1
}

func TestFranzGoRollingAssignorChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("interop tests run without -short")
	}
	srv := startCohort(t)
	wantFeature(t, srv, true)
	for _, plan := range rollPlans {
		for i := range rollRepeat() {
			t.Run(fmt.Sprintf("%s/%d", plan.name, i), func(t *testing.T) {
				r := runRoll(t, srv, plan, fmt.Sprintf("%s-%d", plan.name, i), franzRoll())
				if len(r.overlaps) > 0 {
					t.Fatalf("%d overlaps: %s", len(r.overlaps), strings.Join(r.overlaps, "; "))
				}
				if plan.outside && r.rejected == 0 {
					// Kafka's rule refuses the first member of the new list;
					// the mixed-assignor test relies on seeing refusals.
					t.Fatal("no join refused with INCONSISTENT_GROUP_PROTOCOL")
				}
			})
		}
	}
}

// With --group-mixed-assignors a single rolling bounce between [range] and
// [cooperative-sticky], either way, refuses no join: every restarted member
// is in the group at once, assigned by the coordinator.
func TestFranzGoRollingMixedAssignors(t *testing.T) {
	if testing.Short() {
		t.Skip("interop tests run without -short")
	}
	srv := startCohort(t, "--group-mixed-assignors")
	plans := []rollPlan{
		{name: "mixed-single-bounce-upgrade", start: "range", bounces: []string{"cooperative-sticky"}},
		{name: "mixed-single-bounce-downgrade", start: "cooperative-sticky", bounces: []string{"range"}},
	}
	for _, plan := range plans {
		for i := range rollRepeat() {
			t.Run(fmt.Sprintf("%s/%d", plan.name, i), func(t *testing.T) {
				r := runRoll(t, srv, plan, fmt.Sprintf("%s-%d", plan.name, i), franzRoll())
				if len(r.overlaps) > 0 {
					t.Fatalf("%d overlaps: %s", len(r.overlaps), strings.Join(r.overlaps, "; "))
				}
				if r.rejected > 0 {
					t.Fatalf("%d joins refused with INCONSISTENT_GROUP_PROTOCOL", r.rejected)
				}
			})
		}
	}
}

// librdkafka (through confluent-kafka-python) refuses assignor lists that
// mix eager and cooperative assignors, so its only paths between them are
// single bounces, which need --group-mixed-assignors.
func TestLibrdkafkaRollingMixedAssignors(t *testing.T) {
	ensureDebian(t, "import confluent_kafka", "python3-confluent-kafka")
	srv := startCohort(t, "--group-mixed-assignors")
	plans := []rollPlan{
		{name: "rdk-single-bounce-upgrade", start: "range", bounces: []string{"cooperative-sticky"}},
		{name: "rdk-single-bounce-downgrade", start: "cooperative-sticky", bounces: []string{"range"}},
	}
	// Control: without the option the upgrade's first cooperative member is
	// refused until the last range member is gone.
	t.Run("rdk-single-bounce-upgrade-refused", func(t *testing.T) {
		plain := startCohort(t)
		plan := rollPlan{name: "rdk-refused", start: "range", bounces: []string{"cooperative-sticky"}, outside: true}
		r := runRoll(t, plain, plan, "rdk-refused", librdkafkaRoll())
		if len(r.overlaps) > 0 || r.rejected == 0 {
			t.Fatalf("%d overlaps, %d refused joins; want none and some", len(r.overlaps), r.rejected)
		}
	})
	for _, plan := range plans {
		for i := range rollRepeat() {
			t.Run(fmt.Sprintf("%s/%d", plan.name, i), func(t *testing.T) {
				r := runRoll(t, srv, plan, fmt.Sprintf("%s-%d", plan.name, i), librdkafkaRoll())
				if len(r.overlaps) > 0 {
					t.Fatalf("%d overlaps: %s", len(r.overlaps), strings.Join(r.overlaps, "; "))
				}
				if r.rejected > 0 {
					t.Fatalf("%d joins refused with INCONSISTENT_GROUP_PROTOCOL", r.rejected)
				}
			})
		}
	}
}

// The negative control: with the guard off, the downgrade hands a partition
// to its new owner while the old one still holds it.
func TestFranzGoRollingDowngradeWithoutGuardOverlaps(t *testing.T) {
	if testing.Short() {
		t.Skip("interop tests run without -short")
	}
	srv := startCohort(t, "--group-ownership-guard=false")
	wantFeature(t, srv, false)
	for i := range rollRepeat() {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			r := runRoll(t, srv, rollPlans[2], fmt.Sprintf("noguard-%d", i), franzRoll())
			if len(r.overlaps) == 0 {
				t.Fatal("no overlap without the guard: the test cannot tell a guarded coordinator from an unguarded one")
			}
			t.Logf("without the guard: %d overlaps, e.g. %s", len(r.overlaps), r.overlaps[0])
		})
	}
}

// rollClient is the consumer the plan rolls: its command line and extra
// environment.
type rollClient struct {
	argv func(t *testing.T) []string
	env  []string
}

func franzRoll() rollClient {
	return rollClient{
		argv: func(t *testing.T) []string { return []string{self(t), "-test.run=^$"} },
		env:  []string{"COHORT_INTEROP_CLIENT=franz"},
	}
}

func librdkafkaRoll() rollClient {
	return rollClient{argv: func(*testing.T) []string { return []string{python, "testdata/confluent_client.py"} }}
}

type rollResult struct {
	overlaps  []string
	steps     int
	rejected  int     // JoinGroups refused with INCONSISTENT_GROUP_PROTOCOL
	perBounce []int32 // generations (rebalances) per bounce
}

func runRoll(t *testing.T, srv *server, plan rollPlan, tag string, cl rollClient) rollResult {
	admin := adminClient(t, srv.addr)
	topic, group := "roll-"+tag, "roll-"+tag
	createTopic(t, admin, topic, rollPartitions)
	srv.mu.Lock()
	withheld0, followUps0 := srv.withheldRounds, srv.followUps
	srv.mu.Unlock()

	var all []*proc // every process started, for the ownership history
	start := func(slot int, assignors string, incarnation int) *proc {
		id := fmt.Sprintf("%s-m%d-%d", tag, slot, incarnation)
		env := append([]string{
			"BOOTSTRAP=" + srv.addr, "GROUP=" + group, "TOPIC=" + topic, "CLIENT_ID=" + id,
			"PARTITIONS=" + strconv.Itoa(rollPartitions), "SESSION_MS=" + strconv.Itoa(int(session.Milliseconds())),
			"ASSIGNOR=" + assignors, "REVOKE_MS=" + strconv.Itoa(revokeMs),
		}, cl.env...)
		p := startProc(t, id, cl.argv(t), env)
		all = append(all, p)
		return p
	}
	live := make([]*proc, rollMembers)
	for i := range live {
		live[i] = start(i, plan.start, 0)
	}
	began := time.Now()
	gen0 := waitSettled(t, admin, group, topic, live, true, 60*time.Second)
	steps := 0
	var perBounce []int32
	genAt := gen0
	for b, list := range plan.bounces {
		for i := range live {
			stepStart := time.Now()
			live[i].closeGracefully(30 * time.Second)
			rest := slices.Delete(slices.Clone(live), i, i+1)
			waitSettled(t, admin, group, topic, rest, !plan.outside, 60*time.Second)
			live[i] = start(i, list, b+1)
			gen := waitSettled(t, admin, group, topic, live, !plan.outside || i == len(live)-1, 60*time.Second)
			steps++
			t.Logf("%s: bounce %d member %d -> [%s] settled in %v", tag, b+1, i, list, time.Since(stepStart).Round(10*time.Millisecond))
			if i == len(live)-1 {
				perBounce = append(perBounce, gen-genAt)
				genAt = gen
			}
		}
	}
	d, err := describe(context.Background(), admin, group, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range live {
		p.closeGracefully(30 * time.Second)
	}
	srv.mu.Lock()
	withheld, followUps := srv.withheldRounds-withheld0, srv.followUps-followUps0
	srv.mu.Unlock()
	var events []clients.OwnEvent
	rejected := 0
	for _, p := range all {
		events = append(events, p.Events()...)
		rejected += p.Rejected()
	}
	overlaps := findOverlaps(events)
	t.Logf("%s: %d steps in %v, generations %d -> %d (per bounce %v), %d rejected joins, guard: %d rounds withheld partitions, %d follow-up rebalances, %d ownership events, %d overlaps",
		tag, steps, time.Since(began).Round(100*time.Millisecond), gen0, d.gen, perBounce, rejected, withheld, followUps, len(events), len(overlaps))
	return rollResult{overlaps: overlaps, steps: steps, rejected: rejected, perBounce: perBounce}
}

// findOverlaps replays the clients' ownership events in time order and
// reports every assignment of a partition another client still held.
func findOverlaps(events []clients.OwnEvent) []string {
	slices.SortStableFunc(events, func(a, b clients.OwnEvent) int {
		if a.At != b.At {
			if a.At < b.At {
				return -1
			}
			return 1
		}
		// At the same instant a release goes first.
		return strings.Compare(b.Kind, a.Kind)
	})
	holders := map[int32]map[string]int64{} // partition -> client -> since
	var out []string
	for _, ev := range events {
		for _, p := range ev.Parts {
			h := holders[p]
			if h == nil {
				h = map[string]int64{}
				holders[p] = h
			}
			switch ev.Kind {
			case "assigned":
				for other, since := range h {
					if other != ev.Client {
						out = append(out, fmt.Sprintf("partition %d to %s while %s held it (it had for %v)", p, ev.Client, other, time.Duration(ev.At-since)))
					}
				}
				h[ev.Client] = ev.At
			default:
				delete(h, ev.Client)
			}
		}
	}
	return out
}

// waitSettled waits until the group is Stable, every partition has exactly
// one owner, and every client's own view matches what the coordinator says
// it was given. With all, every client must be a member; otherwise clients
// outside the group must own nothing. It returns the generation.
func waitSettled(t *testing.T, cl *kgo.Client, group, topic string, clients []*proc, all bool, timeout time.Duration) int32 {
	t.Helper()
	if all {
		return waitStable(t, cl, group, topic, clients, timeout)
	}
	return waitGroup(t, cl, group, topic, clients, timeout, func(d described) string {
		var in []*proc
		for _, c := range clients {
			owned, _, member, _ := c.state()
			_, isMember := d.members[member]
			switch {
			case member == "" && len(owned) > 0:
				// A client that does not know its member id (librdkafka
				// during a callback) is matched by what it owns.
				in = append(in, c)
			case member != "" && isMember:
				in = append(in, c)
			case len(owned) > 0:
				return fmt.Sprintf("%s is outside the group and owns %v", c.name, owned)
			}
		}
		if len(in) == 0 {
			return "no client is a member"
		}
		return checkStable(d, in)
	})
}

// wantFeature checks what ApiVersions v3 tells a real client about the
// ownership guard.
func wantFeature(t *testing.T, srv *server, on bool) {
	t.Helper()
	cl := adminClient(t, srv.addr)
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName, req.ClientSoftwareVersion = "interop", "1"
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range resp.SupportedFeatures {
		if f.Name == "cohort.exclusive-ownership" && f.MinVersion == 1 && f.MaxVersion == 1 {
			found = true
		}
	}
	if found != on {
		t.Fatalf("feature cohort.exclusive-ownership advertised: %v, want %v (%+v)", found, on, resp.SupportedFeatures)
	}
}
