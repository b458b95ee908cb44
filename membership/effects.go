package membership

import (
	"time"

	"github.com/cohort-coord/cohort/assignor"
)

// FindCoordinator asks the transport for the group's coordinator. It answers
// with a *CoordinatorFound or an error.
type FindCoordinator struct {
	Group string
}

// CoordinatorFound answers FindCoordinator.
type CoordinatorFound struct {
	// Exclusive reports that the coordinator enforces exclusive ownership:
	// it answers a SyncGroup only once every partition it hands out has
	// been released by its previous owner.
	Exclusive bool
}

// MetadataRequest asks for the partition counts of topics (only the leader
// sends it, for topics the configuration does not size).
type MetadataRequest struct {
	Topics []string
}

// MetadataResponse answers MetadataRequest. Topics that are unknown are
// missing from Partitions.
type MetadataResponse struct {
	Partitions map[string]int32
}

// Request is a request to send. ID comes back with its answer in
// Machine.OnResponse.
type Request struct {
	ID uint64
	// Msg is a *grouppb.JoinGroupRequest, SyncGroupRequest,
	// HeartbeatRequest, OffsetCommitRequest or LeaveGroupRequest, or a
	// *FindCoordinator or *MetadataRequest.
	Msg any
}

// CallbackKind says which handler a callback runs.
type CallbackKind uint8

const (
	// Assigned: the partitions are now the member's.
	Assigned CallbackKind = iota + 1
	// Revoked: the member gives the partitions up; others get them once the
	// callback has returned.
	Revoked
	// Lost: the partitions may already belong to another member (session
	// expired, fenced, generation gone). They were not revoked.
	Lost
)

func (k CallbackKind) String() string {
	switch k {
	case Assigned:
		return "assigned"
	case Revoked:
		return "revoked"
	case Lost:
		return "lost"
	}
	return "unknown"
}

// Callback is a handler call to make. Callbacks run one at a time in the
// order they were emitted. When Wait is set the machine does not move on
// until the owner reports Machine.OnCallbackDone(Token).
type Callback struct {
	Token      uint64
	Kind       CallbackKind
	Partitions []assignor.TopicPartitions
	Generation int32
	Wait       bool
}

// TimerKind names one of a member's timers.
type TimerKind uint8

const (
	// TimerHeartbeat: time to send the next heartbeat.
	TimerHeartbeat TimerKind = iota + 1
	// TimerSession: a session timeout passed since the coordinator last
	// answered.
	TimerSession
	// TimerRetry: the backoff before retrying a failed step is over.
	TimerRetry
	// TimerMetadata: the leader checks whether the partition counts it
	// assigned from changed.
	TimerMetadata
	// TimerRevoke: a revoke callback has run for the rebalance timeout; the
	// coordinator no longer waits for it, so what it revokes counts as lost.
	TimerRevoke

	numTimers = iota + 1
)

// NumTimers bounds the timer kinds (for owners that keep one slot per kind).
const NumTimers = numTimers

func (k TimerKind) String() string {
	switch k {
	case TimerHeartbeat:
		return "heartbeat"
	case TimerSession:
		return "session"
	case TimerRetry:
		return "retry"
	case TimerMetadata:
		return "metadata"
	case TimerRevoke:
		return "revoke"
	}
	return "unknown"
}

// TimerOp arms (Cancel false) or cancels a timer. Arming a kind replaces the
// timer armed under it before.
type TimerOp struct {
	Kind   TimerKind
	After  time.Duration
	Cancel bool
}

// CommitResult is the outcome of a commit started with Machine.Commit.
type CommitResult struct {
	Token uint64
	Err   error
}

// Effects collects what one call asks the owner to do. Reset it between
// calls.
type Effects struct {
	Requests  []Request
	Callbacks []Callback
	Timers    []TimerOp
	Commits   []CommitResult
	// Stopped is set once the member has stopped; Err says why when it
	// stopped on an error (nil after Close).
	Stopped bool
	Err     error
}

// Reset empties e, keeping its capacity.
func (e *Effects) Reset() {
	clear(e.Requests)
	e.Requests = e.Requests[:0]
	clear(e.Callbacks)
	e.Callbacks = e.Callbacks[:0]
	e.Timers = e.Timers[:0]
	clear(e.Commits)
	e.Commits = e.Commits[:0]
	e.Stopped, e.Err = false, nil
}

// Empty reports whether e asks for nothing.
func (e *Effects) Empty() bool {
	return len(e.Requests)+len(e.Callbacks)+len(e.Timers)+len(e.Commits) == 0 && !e.Stopped
}

func (e *Effects) arm(k TimerKind, d time.Duration) {
	e.Timers = append(e.Timers, TimerOp{Kind: k, After: d})
}

func (e *Effects) cancel(k TimerKind) {
	e.Timers = append(e.Timers, TimerOp{Kind: k, Cancel: true})
}
