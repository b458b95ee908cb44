package interop

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// The ownership log: every in-process consumer writes, from its own
// callbacks, when it acquired and released each partition, on one monotonic
// clock (time.Since of one origin). The checker turns the log into ownership
// intervals per partition and reports every instant at which two consumers
// held one partition.
//
// Each event carries both ends of the callback it came from. The checker
// takes the widest interval: a partition is held from the moment its
// assigned callback is called until its revoked or lost callback returns
// (or until the client is closed, if no callback released it). A correct
// coordinator hands a partition on only after the previous owner's
// revocation returned and its next heartbeat said so, so this reading
// cannot report an overlap that did not happen, and it hides none that
// a narrower reading (acquire at the end of the assigned callback, release
// at the start of the revoked one) would find.

type ownKind uint8

const (
	acquire ownKind = iota
	release
)

func (k ownKind) String() string {
	if k == acquire {
		return "acquire"
	}
	return "release"
}

type ownEvent struct {
	consumer  string // one kgo client (a restarted consumer is a new one)
	member    string // its member id when the callback ran
	epoch     int32  // its member epoch when the callback ran
	partition int32
	kind      ownKind
	cause     string        // assigned, revoked, lost, closed
	begin     time.Duration // the callback was called
	end       time.Duration // the callback returned
}

// at is the instant the checker uses: the start of an acquisition, the end
// of a release.
func (e ownEvent) at() time.Duration {
	if e.kind == acquire {
		return e.begin
	}
	return e.end
}

// epochSample is a member epoch a consumer's client reported.
type epochSample struct {
	consumer string
	epoch    int32
	at       time.Duration
}

type ownLog struct {
	origin time.Time

	mu     sync.Mutex
	events []ownEvent
	epochs map[string][]epochSample // member id -> samples, in time order
}

func newOwnLog() *ownLog {
	return &ownLog{origin: time.Now(), epochs: map[string][]epochSample{}}
}

// now reads the log's clock (monotonic: time.Since uses the monotonic
// reading of origin).
func (l *ownLog) now() time.Duration { return time.Since(l.origin) }

func (l *ownLog) add(evs ...ownEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, evs...)
}

// sampleEpoch reads a member epoch through read (a client's
// GroupMetadata) and records it; only positive epochs (a member in the
// group) count, and a sample equal to the member's last one is kept once.
// The read happens under the log's lock, so one client's samples are in the
// order its epochs were stored: an epoch read earlier and recorded later
// would look like a regression.
func (l *ownLog) sampleEpoch(consumer string, read func() (string, int32)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	member, epoch := read()
	if member == "" || epoch <= 0 {
		return
	}
	at := l.now()
	s := l.epochs[member]
	if n := len(s); n > 0 && s[n-1].epoch == epoch && s[n-1].consumer == consumer {
		return
	}
	l.epochs[member] = append(s, epochSample{consumer: consumer, epoch: epoch, at: at})
}

func (l *ownLog) snapshot() ([]ownEvent, map[string][]epochSample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	epochs := make(map[string][]epochSample, len(l.epochs))
	for m, s := range l.epochs {
		epochs[m] = slices.Clone(s)
	}
	return slices.Clone(l.events), epochs
}

// ---------------------------------------------------------------------------
// The checker.

// openEnd is the end of an interval still open when the log was read.
const openEnd = time.Duration(math.MaxInt64)

// interval is one consumer's ownership of one partition: [from, to).
type interval struct {
	consumer string
	member   string
	epoch    int32 // at the acquisition
	from, to time.Duration
	cause    string // what ended it
}

func (iv interval) String() string {
	to := "still held"
	if iv.to != openEnd {
		to = fmt.Sprintf("%v (%s)", iv.to, iv.cause)
	}
	return fmt.Sprintf("%s [member %s epoch %d] from %v to %s", iv.consumer, iv.member, iv.epoch, iv.from, to)
}

// ownership is the log read as intervals.
type ownership struct {
	intervals map[int32][]interval // partition -> intervals, by start
	// problems are events that contradict the consumer's own history: an
	// acquisition of a partition it already held, a release of one it did
	// not hold.
	problems []string
}

// readOwnership replays the events in time order. At one instant a release
// goes first, so a back-to-back handoff is not an overlap.
func readOwnership(events []ownEvent) ownership {
	evs := slices.Clone(events)
	slices.SortStableFunc(evs, func(a, b ownEvent) int {
		if a.at() != b.at() {
			if a.at() < b.at() {
				return -1
			}
			return 1
		}
		return int(b.kind) - int(a.kind) // release (1) before acquire (0)
	})
	type key struct {
		consumer  string
		partition int32
	}
	open := map[key]int{} // -> index in out.intervals[partition]
	out := ownership{intervals: map[int32][]interval{}}
	for _, ev := range evs {
		k := key{ev.consumer, ev.partition}
		i, held := open[k]
		switch ev.kind {
		case acquire:
			if held {
				out.problems = append(out.problems, fmt.Sprintf("%s acquired partition %d at %v (%s) while it held it since %v",
					ev.consumer, ev.partition, ev.at(), ev.cause, out.intervals[ev.partition][i].from))
				continue
			}
			open[k] = len(out.intervals[ev.partition])
			out.intervals[ev.partition] = append(out.intervals[ev.partition], interval{
				consumer: ev.consumer, member: ev.member, epoch: ev.epoch, from: ev.at(), to: openEnd,
			})
		case release:
			if !held {
				// kgo revokes on close whatever it holds; a release of
				// what was never held is a contradiction.
				out.problems = append(out.problems, fmt.Sprintf("%s released partition %d at %v (%s) without holding it",
					ev.consumer, ev.partition, ev.at(), ev.cause))
				continue
			}
			iv := &out.intervals[ev.partition][i]
			iv.to, iv.cause = ev.at(), ev.cause
			delete(open, k)
		}
	}
	return out
}

// overlap is two consumers holding one partition at once.
type overlap struct {
	partition int32
	first     interval // the earlier holder
	second    interval
}

func (o overlap) String() string {
	end := min(o.first.to, o.second.to)
	return fmt.Sprintf("partition %d held by %s and %s at once, from %v to %s: %s; %s",
		o.partition, o.first.consumer, o.second.consumer, o.second.from, fmtEnd(end), o.first, o.second)
}

func fmtEnd(d time.Duration) string {
	if d == openEnd {
		return "the end of the log"
	}
	return d.String()
}

// overlaps lists every pair of intervals of one partition, of two different
// consumers, that share an instant. Intervals are half-open: one ending
// when the next begins is a handoff.
func (o ownership) overlaps() []overlap {
	var out []overlap
	for _, p := range slices.Sorted(maps.Keys(o.intervals)) {
		ivs := slices.Clone(o.intervals[p])
		slices.SortStableFunc(ivs, func(a, b interval) int { return cmp.Compare(a.from, b.from) })
		for i := range ivs {
			for j := i + 1; j < len(ivs) && ivs[j].from < ivs[i].to; j++ {
				if ivs[j].consumer != ivs[i].consumer {
					out = append(out, overlap{partition: p, first: ivs[i], second: ivs[j]})
				}
			}
		}
	}
	return out
}

// holders returns, per partition, the consumers whose interval is still
// open.
func (o ownership) holders() map[int32][]string {
	out := map[int32][]string{}
	for p, ivs := range o.intervals {
		for _, iv := range ivs {
			if iv.to == openEnd {
				out[p] = append(out[p], iv.consumer)
			}
		}
		slices.Sort(out[p])
	}
	return out
}

// exactlyOnce says what is wrong with the current holders of partitions
// 0..n-1: a partition held by nobody or by several consumers ("" if each is
// held by exactly one).
func (o ownership) exactlyOnce(n int32) string {
	h := o.holders()
	var bad []string
	for p := range n {
		if len(h[p]) != 1 {
			bad = append(bad, fmt.Sprintf("partition %d held by %v", p, h[p]))
		}
	}
	for p := range h {
		if p < 0 || p >= n {
			bad = append(bad, fmt.Sprintf("partition %d (out of range) held by %v", p, h[p]))
		}
	}
	return strings.Join(bad, "; ")
}

// epochRegressions lists every member whose epoch went down.
func epochRegressions(epochs map[string][]epochSample) []string {
	var out []string
	for _, m := range slices.Sorted(maps.Keys(epochs)) {
		s := epochs[m]
		for i := 1; i < len(s); i++ {
			if s[i].epoch < s[i-1].epoch {
				out = append(out, fmt.Sprintf("member %s: epoch %d (%s at %v) after %d (%s at %v)",
					m, s[i].epoch, s[i].consumer, s[i].at, s[i-1].epoch, s[i-1].consumer, s[i-1].at))
			}
		}
	}
	return out
}
