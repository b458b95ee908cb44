package node

import (
	"testing"
	"time"
)

// The lease's timings derive from the heartbeat timeout up to half a
// second: a 2 s heartbeat timeout keeps a 450 ms lease.
func TestLeaseBasisIsCapped(t *testing.T) {
	for _, c := range []struct{ ht, validity time.Duration }{
		{100 * time.Millisecond, 90 * time.Millisecond},
		{500 * time.Millisecond, 450 * time.Millisecond},
		{2 * time.Second, 450 * time.Millisecond},
	} {
		if got := newLeaderLease(c.ht).validity; got != c.validity {
			t.Errorf("heartbeat timeout %v: validity %v, want %v", c.ht, got, c.validity)
		}
	}
}

// A leader elected by an election it forced takes no lease from a
// confirmation begun within one validity of forcing it: the old leader's
// lease may still run. One begun later is taken.
func TestLeaseWaitsOutAForcedElection(t *testing.T) {
	l := newLeaderLease(2 * time.Second)
	forced := time.Now()
	l.waitOut(forced)
	at, epoch := l.begin()
	l.renew(at, epoch)
	if l.Held(time.Now()) {
		t.Fatal("lease held from a confirmation begun right after the forced election")
	}
	// A confirmation begun a validity after the election counts.
	l.renew(int64(forced.Sub(l.base)+l.validity), epoch)
	if !l.Held(forced.Add(l.validity + time.Millisecond)) {
		t.Fatal("lease not held from a confirmation begun a validity after the forced election")
	}
	if l.Held(forced.Add(2*l.validity + time.Millisecond)) {
		t.Fatal("lease held past its validity")
	}
}
