package raftfsm

import (
	"errors"
	"strconv"

	"github.com/hashicorp/raft"
)

// Holds reports whether this node's state (FSM, catalog, security store)
// includes every committed entry up to index.
//
// hashicorp/raft's AppliedIndex is not that: it moves when entries are
// handed to the FSM's goroutine, before Apply ran, so a node that waited
// for AppliedIndex could still answer from the state before those entries
// (a restarted node answered a topic it had in its log as unknown). Holds
// asks the FSM which entry it applied last instead. Only command entries
// reach Apply, so the FSM's index is compared with the last command entry
// at or below index; entries at or below the last snapshot are in the state
// already (a snapshot is taken from applied state, and an installed one is
// restored before raft counts it applied).
func (n *Node) Holds(index uint64) bool {
	if n.Raft.AppliedIndex() < index {
		return false
	}
	c, err := n.lastCommand(index)
	if err != nil {
		return false
	}
	return n.FSM.applied.Load() >= c
}

// lastCommand returns the index of the last command entry at or below index
// and above the last snapshot, or 0 when there is none.
func (n *Node) lastCommand(index uint64) (uint64, error) {
	snap, err := strconv.ParseUint(n.Raft.Stats()["last_snapshot_index"], 10, 64)
	if err != nil {
		return 0, err
	}
	var l raft.Log
	for i := index; i > snap; i-- {
		if err := n.logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				return 0, nil // compacted into a snapshot taken meanwhile
			}
			return 0, err
		}
		if l.Type == raft.LogCommand {
			return i, nil
		}
	}
	return 0, nil
}
