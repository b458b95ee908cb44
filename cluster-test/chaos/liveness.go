package chaos

import (
	"fmt"
	"time"
)

// takeoverGrace is the least time a coordinator that takes a group over
// gives a member to reach it (coordinator.Config.TakeoverSessionFloor's
// default, at most the session timeout).
const takeoverGrace = 6 * time.Second

// checkCrashLiveness is L3: every partition a crashed emulated member owned
// is owned again by another member within the member's session timeout,
// one failover (the longest fault under way meanwhile, and the grace a
// takeover gives members), the rebalance timeout and 5 s. Takeovers carry
// sessions over, so a crashed member's expiry does not move with each
// failover.
func checkCrashLiveness(rec *Record) []Violation {
	if rec.SessionTimeout <= 0 {
		return nil
	}
	type gp struct {
		group string
		part  int32
	}
	byPart := map[gp][]Interval{}
	for _, in := range Ownership(rec) {
		k := gp{in.Group, in.Partition}
		byPart[k] = append(byPart[k], in)
	}
	grace := min(takeoverGrace, rec.SessionTimeout)
	var vs []Violation
	for _, e := range rec.Events {
		if e.Kind != "crash" {
			continue
		}
		for k, ivs := range byPart {
			if k.group != e.Group || !ownedAt(ivs, e.Client, e.At) {
				continue
			}
			longest := longestFault(rec, e.At, e.At.Add(rec.SessionTimeout+rec.RebalanceTimeout+time.Minute))
			bound := rec.SessionTimeout + longest + grace + rec.RebalanceTimeout + 5*time.Second
			again, ok := ownedAgain(ivs, e.Client, e.At)
			switch {
			case ok && again.Sub(e.At) <= bound:
			case !ok && rec.End.Sub(e.At) <= bound:
				// The run ended before the bound.
			default:
				took := "not owned again by the end of the run"
				if ok {
					took = fmt.Sprintf("owned again after %v", again.Sub(e.At).Round(time.Millisecond))
				}
				vs = append(vs, Violation{"L3", e.At, fmt.Sprintf("%s partition %d of %s, crashed at %s: %s, bound %v",
					k.group, k.part, e.Client, e.At.Sub(rec.Start).Round(time.Millisecond), took, bound.Round(time.Millisecond))})
			}
		}
	}
	return vs
}

// ownedAt reports whether client owned the partition (one of ivs) within a
// session before at: what it held when it crashed.
func ownedAt(ivs []Interval, client string, at time.Time) bool {
	for _, in := range ivs {
		if in.Client == client && !in.From.After(at) && !in.To.Before(at.Add(-time.Second)) {
			return true
		}
	}
	return false
}

// ownedAgain returns when another member first owned the partition after at.
func ownedAgain(ivs []Interval, client string, at time.Time) (time.Time, bool) {
	var first time.Time
	for _, in := range ivs {
		if in.Client != client && in.To.After(at) && (first.IsZero() || in.From.Before(first)) {
			first = in.From
		}
	}
	if first.IsZero() {
		return first, false
	}
	if first.Before(at) {
		first = at
	}
	return first, true
}

// longestFault is the longest fault that overlaps [from, to).
func longestFault(rec *Record, from, to time.Time) time.Duration {
	var d time.Duration
	for _, f := range rec.Faults {
		end := f.End
		if end.IsZero() {
			end = rec.End
		}
		if f.Start.Before(to) && end.After(from) {
			d = max(d, end.Sub(f.Start))
		}
	}
	return d
}
