package coordinator

import (
	"testing"
	"time"
)

func TestStableGroupFormsAndHeartbeats(t *testing.T) {
	h := newHarness(t)
	ids := h.stableGroup(3)
	if h.g.Generation() != 1 || h.g.Leader() != ids[0] {
		t.Fatalf("generation %d leader %q", h.g.Generation(), h.g.Leader())
	}
	for range 10 {
		h.advance(5 * time.Second)
		for _, id := range ids {
			if code := h.heartbeat(id, 1); code != ErrNone {
				t.Fatalf("heartbeat %s: %d", id, code)
			}
		}
	}
	if h.g.State() != Stable || h.g.NumMembers() != 3 || h.g.Generation() != 1 {
		t.Fatalf("state %v members %d gen %d", h.g.State(), h.g.NumMembers(), h.g.Generation())
	}
}
