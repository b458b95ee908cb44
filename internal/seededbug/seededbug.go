// Package seededbug switches on known bugs in a cohortd built with the
// seededbugs build tag, so that the chaos suite can show that its checkers
// catch them. In a normal build On is a constant false and every seeded
// branch compiles away.
//
// The bugs, by name:
//
//	ack-before-apply   OffsetCommit is answered when it is proposed, not when it is applied
//	no-generation-check neither the FSM's write fence nor the coordinator compare generations
//	                   (the FSM's check alone is never the last line: the group actor checks first)
//	stale-leader       a node that loses Raft leadership keeps its group actors answering
//	early-handout      a rebalance completes as soon as one member rejoined, handing out
//	                   partitions that members which have not rejoined still own
package seededbug

// Names lists every seeded bug.
var Names = []string{"ack-before-apply", "no-generation-check", "stale-leader", "early-handout"}
