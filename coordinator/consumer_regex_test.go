package coordinator

import (
	"testing"
	"time"
)

func cgRegexJoin(id, expr string) *ConsumerHeartbeatRequest {
	j := cgJoin(id)
	j.SubscribedTopicNames, j.SubscribedTopicRegex = nil, strp(expr)
	return j
}

// wantEpochRuns checks the group epoch and the number of resolutions so far.
func wantEpochRuns(t *testing.T, h *cgHarness, what string, epoch int32, runs int) {
	t.Helper()
	if h.g.Epoch() != epoch || h.g.AssignmentEpoch() != epoch || h.g.regex.runs != runs {
		t.Fatalf("%s: epoch %d/%d after %d resolutions, want %d after %d", what, h.g.Epoch(), h.g.AssignmentEpoch(), h.g.regex.runs, epoch, runs)
	}
}

// A topic created after the member joined: the catalog change asks for a
// resolution (Kafka: topics created since the group's last resolution),
// which runs no sooner than 10 s after the last one; a topic created later
// than that is resolved at once. Neither the heartbeats nor the catalog
// change match the regex themselves. A deleted topic leaves the target at
// once, without a resolution.
func TestConsumerRegexTopicCreated(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"orders-eu": 2, "audit": 1})
	wantResp(t, h.hb(cgRegexJoin("a", "orders-[a-z]{2}")), ErrNone, 1, tps())
	wantEpochRuns(t, h, "join", 1, 0)
	h.advance(0)
	wantEpochRuns(t, h, "first resolution", 2, 1)
	wantResp(t, h.hb(cgBeat("a", 1, tps())), ErrNone, 2, tps("orders-eu", 0, 1))

	h.advance(2 * time.Second)
	h.setTopics(map[string]int32{"orders-eu": 2, "orders-us": 3, "audit": 1})
	wantResp(t, h.hb(cgBeat("a", 2, nil)), ErrNone, 2, nil)
	wantEpochRuns(t, h, "created, before the resolution", 2, 1)
	h.advance(7 * time.Second) // 9 s after the last resolution
	wantEpochRuns(t, h, "9 s after the last resolution", 2, 1)
	h.advance(time.Second)
	wantEpochRuns(t, h, "10 s after the last resolution", 3, 2)
	wantResp(t, h.hb(cgBeat("a", 2, nil)), ErrNone, 3, tps("orders-eu", 0, 1, "orders-us", 0, 1, 2))

	// 20 s after the last resolution: resolved at once.
	h.advance(20 * time.Second)
	h.hb(cgBeat("a", 3, nil))
	h.setTopics(map[string]int32{"orders-eu": 2, "orders-us": 3, "orders-ap": 1, "audit": 1})
	h.advance(0)
	wantEpochRuns(t, h, "created long after the last resolution", 4, 3)
	wantResp(t, h.hb(cgBeat("a", 3, nil)), ErrNone, 4, tps("orders-ap", 0, "orders-eu", 0, 1, "orders-us", 0, 1, 2))

	// A topic the regex does not match: a resolution, no bump.
	h.setTopics(map[string]int32{"orders-eu": 2, "orders-us": 3, "orders-ap": 1, "audit": 1, "orders-x-old": 4})
	h.advance(10 * time.Second)
	wantEpochRuns(t, h, "an unmatched topic", 4, 4)

	// Deleted: out of the target at once; the member revokes it.
	h.setTopics(map[string]int32{"orders-eu": 2, "orders-ap": 1, "audit": 1, "orders-x-old": 4})
	wantEpochRuns(t, h, "deleted", 5, 4)
	all := tps("orders-ap", 0, "orders-eu", 0, 1, "orders-us", 0, 1, 2)
	wantResp(t, h.hb(cgBeat("a", 4, all)), ErrNone, 4, tps("orders-ap", 0, "orders-eu", 0, 1))
	wantResp(t, h.hb(cgBeat("a", 4, tps("orders-ap", 0, "orders-eu", 0, 1))), ErrNone, 5, nil)
}

// With no heartbeat and no catalog change handed to the group, its
// regexes are resolved again every RegexRefreshInterval
// (group.consumer.regex.refresh.interval.ms): a topic the owner's catalog
// gained is assigned by then, and not before.
func TestConsumerRegexRefreshInterval(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"orders-eu": 2})
	h.cfg.RegexRefreshInterval = 30 * time.Second
	h.hb(cgRegexJoin("a", "orders-.*"))
	h.advance(0)
	wantEpochRuns(t, h, "first resolution", 2, 1)
	wantResp(t, h.hb(cgBeat("a", 1, tps())), ErrNone, 2, tps("orders-eu", 0, 1))

	// The owner's catalog has a new matching topic; the group is not told.
	h.ownerTopics = map[string]int32{"orders-eu": 2, "orders-us": 1}
	for range 5 { // heartbeats every 5 s, as the member's interval asks
		h.advance(5 * time.Second)
		wantResp(t, h.hb(cgBeat("a", 2, nil)), ErrNone, 2, nil)
	}
	h.advance(4 * time.Second) // 29 s
	wantEpochRuns(t, h, "29 s after the resolution", 2, 1)
	h.advance(time.Second) // 30 s: the periodic resolution
	wantEpochRuns(t, h, "the periodic resolution", 3, 2)
	wantResp(t, h.hb(cgBeat("a", 2, nil)), ErrNone, 3, tps("orders-eu", 0, 1, "orders-us", 0))

	// Each resolution arms the next one; one that finds nothing new
	// changes no epoch.
	h.advance(15 * time.Second)
	h.hb(cgBeat("a", 3, nil))
	h.advance(15 * time.Second)
	wantEpochRuns(t, h, "a periodic resolution that finds nothing new", 3, 3)
}

// Resolutions are batched: members that bring new regexes at once are
// resolved together, in one pass; a regex that arrives within 10 s of the
// last resolution waits for the end of those 10 s. A member whose regex is
// resolved already gets its topics at its join (the epoch is bumped by the
// join, no resolution runs).
func TestConsumerRegexBatched(t *testing.T) {
	h := newCGHarness(t, map[string]int32{"a1": 2, "a2": 2, "b1": 4, "c1": 1})
	h.hb(cgRegexJoin("m1", "a.*"))
	h.hb(cgRegexJoin("m2", "b.*"))
	h.hb(cgRegexJoin("m3", "a.*"))
	wantEpochRuns(t, h, "three joins", 3, 0)
	h.advance(0)
	wantEpochRuns(t, h, "one resolution for three joins", 4, 1)
	wantResp(t, h.hb(cgBeat("m2", 2, tps())), ErrNone, 4, tps("b1", 0, 1, 2, 3))

	h.advance(3 * time.Second)
	// A resolved regex: no resolution, the join bumps the epoch as any.
	r := h.hb(cgRegexJoin("m4", "b.*"))
	wantEpochRuns(t, h, "a join with a resolved regex", 5, 1)
	if r.MemberEpoch != 5 {
		t.Fatalf("m4 joined at epoch %d, want 5", r.MemberEpoch)
	}
	if got := h.member("m4").Target; countParts(got) != 2 {
		t.Fatalf("m4's target %s, want 2 of b1's partitions", fmtParts(got))
	}
	// A new regex 3 s after the last resolution waits 7 s.
	h.hb(cgRegexJoin("m5", "c.*"))
	wantEpochRuns(t, h, "a join with a new regex", 6, 1)
	h.advance(6 * time.Second)
	wantEpochRuns(t, h, "6 s later", 6, 1)
	h.advance(time.Second)
	wantEpochRuns(t, h, "10 s after the last resolution", 7, 2)
	if got := h.member("m5").Target; fmtParts(got) != fmtParts(tps("c1", 0)) {
		t.Fatalf("m5's target %s, want c1-0", fmtParts(got))
	}
	// The last member of a regex leaves: its resolution goes with it, and
	// one that brings it back waits for a new resolution.
	h.hb(cgBeat("m5", -1, nil))
	if _, ok := h.g.regex.resolved["c.*"]; ok {
		t.Fatal("c.* is still resolved with no member")
	}
}

// A takeover rebuilds the resolutions from the replicated target
// assignment and resolves at once: with the same catalog nothing changes
// (no epoch bump); a topic created while no coordinator had the group, or
// created before the failover but not resolved yet, is assigned by that
// resolution.
func TestConsumerRegexTakeover(t *testing.T) {
	for _, tc := range []struct {
		name    string
		catalog map[string]int32
		epoch   int32
		target  string
	}{
		{"same catalog", map[string]int32{"orders-eu": 2, "audit": 1}, 2, fmtParts(tps("orders-eu", 0, 1))},
		{"created during the failover", map[string]int32{"orders-eu": 2, "orders-us": 1, "audit": 1}, 3, fmtParts(tps("orders-eu", 0, 1, "orders-us", 0))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newCGHarness(t, map[string]int32{"orders-eu": 2, "audit": 1})
			h.hb(cgRegexJoin("a", "orders-.*"))
			h.advance(0)
			wantResp(t, h.hb(cgBeat("a", 1, tps())), ErrNone, 2, tps("orders-eu", 0, 1))

			g := RestoreConsumerGroup("g", &h.cfg, tc.catalog, ConsumerRecordsFromProto(ConsumerRecordsToProto("g", h.records)))
			h.g, h.topics = g, tc.catalog
			h.timers = map[cgTimerKey]time.Time{}
			var fx ConsumerEffects
			g.ArmAll(h.now, &fx)
			h.apply(&fx)
			if g.Epoch() != 2 || g.regex.runs != 0 {
				t.Fatalf("restored at epoch %d after %d resolutions", g.Epoch(), g.regex.runs)
			}
			h.advance(0)
			wantEpochRuns(t, h, "the takeover's resolution", tc.epoch, 1)
			if got := fmtParts(h.member("a").Target); got != tc.target {
				t.Fatalf("target %s, want %s", got, tc.target)
			}
		})
	}
}
