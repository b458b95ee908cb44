package coordinator

import (
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// ReplyTo identifies where a response goes. The machine only stores it and
// hands it back in a Reply; the actor decides what it is.
type ReplyTo any

// Answerer is a ReplyTo for a local caller that does not wait for its
// answer: the actor hands the answer to Answer, on its own goroutine. Answer
// must not block.
type Answerer interface {
	Answer(proto.Message)
}

// Reply is a response to deliver.
type Reply struct {
	To  ReplyTo
	Msg proto.Message
}

// TimerKind names one of a group's timers.
type TimerKind uint8

const (
	// TimerMember is the liveness timer of one member or pending member id.
	TimerMember TimerKind = iota + 1
	// TimerJoin is the rebalance (or initial delay) timer of the join phase.
	TimerJoin
	// TimerSync is the pending-sync timer of the current generation.
	TimerSync
	// TimerOffsetExpiry is the periodic offset-retention check.
	TimerOffsetExpiry
	// TimerSessions is the periodic check for silent members (liveness.go).
	TimerSessions
	// TimerConsumerSession and TimerConsumerRebalance are a consumer group
	// member's timers (ConsumerTimerSession, ConsumerTimerRebalance), kept
	// by the owner with the classic ones under one key space.
	TimerConsumerSession
	TimerConsumerRebalance
	// TimerConsumerJoin and TimerConsumerSync are a classic member's join
	// and sync timeouts inside a consumer group (ConsumerTimerJoin,
	// ConsumerTimerSync).
	TimerConsumerJoin
	TimerConsumerSync
	// TimerConsumerRegex is a consumer group's regex resolution
	// (ConsumerTimerRegex); its key has no member.
	TimerConsumerRegex
)

func (k TimerKind) String() string {
	switch k {
	case TimerMember:
		return "member"
	case TimerJoin:
		return "join"
	case TimerSync:
		return "sync"
	case TimerOffsetExpiry:
		return "offset-expiry"
	case TimerSessions:
		return "sessions"
	case TimerConsumerSession:
		return "consumer-session"
	case TimerConsumerRebalance:
		return "consumer-rebalance"
	case TimerConsumerJoin:
		return "consumer-join"
	case TimerConsumerSync:
		return "consumer-sync"
	case TimerConsumerRegex:
		return "consumer-regex"
	}
	return "unknown"
}

// TimerKey identifies a timer of one group. Arming a key replaces the timer
// armed under it before.
type TimerKey struct {
	Kind   TimerKind
	Member string // member id for TimerMember; empty otherwise
}

// TimerOp arms (Cancel false) or cancels a timer.
type TimerOp struct {
	Key    TimerKey
	After  time.Duration
	Cancel bool
}

// Persist asks for records to be written. The owner calls
// Group.OnPersisted(Token, err) once the write has completed or failed.
type Persist struct {
	Token   uint64
	Records []*pb.Record
	// Fence, when set, makes the write conditional on the stored group being
	// at that generation with that member (offset commits of a generation).
	Fence *pb.WriteFence
}

// Effects collects what one call asks its owner to do. Reuse one value and
// call Reset between calls: appending to its slices does not allocate once
// they have grown.
type Effects struct {
	Replies  []Reply
	Timers   []TimerOp
	Persists []Persist
	// Gone is set when the group is dead and all its writes are done: the
	// owner may forget it.
	Gone bool
	// Events are things worth logging and counting (the ownership guard's
	// decisions); they ask for no action.
	Events []Event
}

// EventKind names an Event.
type EventKind uint8

const (
	// EventWithheld: a SyncGroup round left partitions out of answers
	// because other members still owned them (Count partitions).
	EventWithheld EventKind = iota + 1
	// EventFollowUp: the ownership guard started a rebalance to hand
	// withheld partitions over.
	EventFollowUp
	// EventTakeoverRejoin: a member that rejoined unchanged right after a
	// takeover got the current generation back (takeover.go; Detail is its
	// member id).
	EventTakeoverRejoin
)

func (k EventKind) String() string {
	switch k {
	case EventWithheld:
		return "withheld"
	case EventFollowUp:
		return "follow-up"
	case EventTakeoverRejoin:
		return "takeover-rejoin"
	}
	return "unknown"
}

// Event is one notable decision of the machine.
type Event struct {
	Kind       EventKind
	Generation int32
	Count      int
	Detail     string
}

// keepEffects is the capacity Reset keeps. Every group has its own
// Effects, so the slices a rebalance of many members grew are dropped
// rather than kept for the life of the group.
const keepEffects = 8

// Reset empties e, keeping its capacity up to keepEffects.
func (e *Effects) Reset() {
	e.Replies = resetSlice(e.Replies)
	e.Timers = resetSlice(e.Timers)
	e.Persists = resetSlice(e.Persists)
	e.Gone = false
	e.Events = resetSlice(e.Events)
}

func resetSlice[T any](s []T) []T {
	if cap(s) > keepEffects {
		return nil
	}
	clear(s)
	return s[:0]
}

// Empty reports whether e asks for nothing.
func (e *Effects) Empty() bool {
	return len(e.Replies)+len(e.Timers)+len(e.Persists)+len(e.Events) == 0 && !e.Gone
}

func (e *Effects) reply(to ReplyTo, msg proto.Message) {
	if to == nil {
		return
	}
	e.Replies = append(e.Replies, Reply{To: to, Msg: msg})
}

func (e *Effects) arm(kind TimerKind, member string, after time.Duration) {
	e.Timers = append(e.Timers, TimerOp{Key: TimerKey{Kind: kind, Member: member}, After: after})
}

func (e *Effects) cancel(kind TimerKind, member string) {
	e.Timers = append(e.Timers, TimerOp{Key: TimerKey{Kind: kind, Member: member}, Cancel: true})
}

func (e *Effects) event(ev Event) { e.Events = append(e.Events, ev) }
