package interop

import (
	"strings"
	"testing"
	"time"
)

// The ownership checker on hand-made logs.

// ev builds an event whose callback ran from begin to end (milliseconds).
func ev(consumer string, kind ownKind, p int32, begin, end int) ownEvent {
	cause := "assigned"
	if kind == release {
		cause = "revoked"
	}
	return ownEvent{
		consumer: consumer, member: consumer + "-id", epoch: 1, partition: p, kind: kind, cause: cause,
		begin: time.Duration(begin) * time.Millisecond, end: time.Duration(end) * time.Millisecond,
	}
}

func TestOwnershipCheckerFindsOverlap(t *testing.T) {
	log := []ownEvent{
		ev("a", acquire, 0, 0, 1),
		ev("a", acquire, 1, 0, 1),
		ev("b", acquire, 1, 40, 41), // a still holds 1 until 50
		ev("a", release, 1, 45, 50),
		ev("b", acquire, 2, 60, 61),
	}
	o := readOwnership(log)
	if len(o.problems) > 0 {
		t.Fatalf("problems: %v", o.problems)
	}
	ov := o.overlaps()
	if len(ov) != 1 {
		t.Fatalf("%d overlaps, want 1: %v", len(ov), ov)
	}
	got := ov[0]
	if got.partition != 1 || got.first.consumer != "a" || got.second.consumer != "b" ||
		got.second.from != 40*time.Millisecond || got.first.to != 50*time.Millisecond {
		t.Fatalf("overlap %v, want partition 1, a then b, from 40ms to 50ms", got)
	}
	for _, want := range []string{"partition 1", "a", "b", "40ms", "50ms"} {
		if !strings.Contains(got.String(), want) {
			t.Errorf("report %q does not name %q", got, want)
		}
	}
}

// The checker reads an acquisition from the start of its callback and a
// release from the end of its callback: an overlap that only the callbacks'
// durations show is still found.
func TestOwnershipCheckerUsesWidestInterval(t *testing.T) {
	log := []ownEvent{
		ev("a", acquire, 0, 0, 1),
		ev("a", release, 0, 10, 30), // revoked callback from 10 to 30
		ev("b", acquire, 0, 20, 35), // assigned callback from 20 to 35
	}
	o := readOwnership(log)
	if ov := o.overlaps(); len(ov) != 1 {
		t.Fatalf("%d overlaps, want the one from 20ms to 30ms: %v", len(ov), ov)
	}
}

func TestOwnershipCheckerAcceptsHandoff(t *testing.T) {
	log := []ownEvent{
		ev("a", acquire, 0, 0, 1),
		ev("a", acquire, 1, 0, 1),
		ev("a", release, 1, 40, 50),
		ev("b", acquire, 1, 50, 52), // back to back: a's callback returned at 50
		ev("b", release, 1, 70, 80),
		ev("a", acquire, 1, 90, 91), // and back again, later
	}
	o := readOwnership(log)
	if len(o.problems) > 0 {
		t.Fatalf("problems: %v", o.problems)
	}
	if ov := o.overlaps(); len(ov) != 0 {
		t.Fatalf("overlaps in a clean handoff: %v", ov)
	}
	if why := o.exactlyOnce(2); why != "" {
		t.Fatalf("exactlyOnce: %s", why)
	}
	if h := o.holders(); len(h[1]) != 1 || h[1][0] != "a" {
		t.Fatalf("holders of 1: %v, want [a]", h[1])
	}
}

func TestOwnershipCheckerStillHeld(t *testing.T) {
	// b acquires while a never released: an overlap to the end of the log,
	// and partition 0 held twice.
	log := []ownEvent{
		ev("a", acquire, 0, 0, 1),
		ev("b", acquire, 0, 100, 101),
	}
	o := readOwnership(log)
	ov := o.overlaps()
	if len(ov) != 1 || !strings.Contains(ov[0].String(), "the end of the log") {
		t.Fatalf("overlaps %v, want one open to the end of the log", ov)
	}
	if why := o.exactlyOnce(2); !strings.Contains(why, "partition 0 held by [a b]") || !strings.Contains(why, "partition 1 held by []") {
		t.Fatalf("exactlyOnce: %q", why)
	}
}

func TestOwnershipCheckerProblems(t *testing.T) {
	log := []ownEvent{
		ev("a", release, 3, 0, 1),
		ev("a", acquire, 0, 5, 6),
		ev("a", acquire, 0, 7, 8),
	}
	o := readOwnership(log)
	if len(o.problems) != 2 {
		t.Fatalf("problems %v, want a release without a hold and a double acquisition", o.problems)
	}
}

func TestEpochRegressions(t *testing.T) {
	l := newOwnLog()
	sample := func(consumer, member string, epoch int32) {
		l.sampleEpoch(consumer, func() (string, int32) { return member, epoch })
	}
	for _, e := range []int32{1, 1, 3, 0, -1, 3, 4} { // 0 and -1 are not epochs of a member in the group
		sample("c", "m1", e)
	}
	sample("d", "m2", 5)
	sample("d", "m2", 2)
	_, epochs := l.snapshot()
	if len(epochs["m1"]) != 3 {
		t.Fatalf("m1 samples %v, want 1, 3, 4", epochs["m1"])
	}
	got := epochRegressions(epochs)
	if len(got) != 1 || !strings.Contains(got[0], "member m2: epoch 2") {
		t.Fatalf("regressions %v, want m2's 5 -> 2", got)
	}
}
