package raftfsm

import (
	"errors"
	"strconv"
	"sync"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
)

// Holds reports whether this replica's state (FSM, catalog, security store)
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
func (r *Replica) Holds(index uint64) bool {
	if r.raft.AppliedIndex() < index {
		return false
	}
	restores := r.FSM.restores.Load()
	r.held.Lock()
	c, ok := r.held.command, r.held.index == index && r.held.restores == restores
	r.held.Unlock()
	if !ok {
		var err error
		if c, err = r.lastCommand(index); err != nil {
			return false
		}
		r.held.Lock()
		r.held.index, r.held.restores, r.held.command = index, restores, c
		r.held.Unlock()
	}
	return r.FSM.applied.Load() >= c
}

// heldCache remembers the last command entry Holds found for an index: the
// entries up to an applied index do not change, and neither does the answer
// until the FSM restores a snapshot.
type heldCache struct {
	sync.Mutex
	index, restores, command uint64
}

// lastCommand returns the index of the last command entry at or below index
// and above the last snapshot, or 0 when there is none.
func (r *Replica) lastCommand(index uint64) (uint64, error) {
	snap, err := r.lastSnapshotIndex()
	if err != nil {
		return 0, err
	}
	var l raft.Log
	for i := index; i > snap; i-- {
		if err := r.logStore.GetLog(i, &l); err != nil {
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

// lastSnapshotIndex is the index of the snapshot raft last took or
// restored (hashicorp/raft tells it only in Stats).
func (r *Replica) lastSnapshotIndex() (uint64, error) {
	return strconv.ParseUint(r.raft.Stats()["last_snapshot_index"], 10, 64)
}

// LoggedNodes returns the node registry as this node's own log has it when
// it opened: the registry of the snapshot it restored, with the
// registrations and removals its log holds after that snapshot. Until a
// restarted node has caught up, its FSM holds only the snapshot's registry
// (the entries after it are applied once a leader says they are
// committed), which may lack nodes, or hold none; a Metadata answer that
// listed only those would make clients drop their connections to the
// others. The log's registry is what the node knew when it stopped.
func (n *Node) LoggedNodes() []*raftpb.NodeRegister { return n.logged }

// readLoggedNodes computes LoggedNodes once, right after raft restored the
// latest snapshot into the FSM.
func (n *Node) readLoggedNodes() error {
	nodes := map[string]*raftpb.NodeRegister{}
	for _, r := range n.FSM.Nodes() {
		nodes[r.GetNodeId()] = r
	}
	snap, err := n.lastSnapshotIndex()
	if err != nil {
		return err
	}
	first, err := n.logs.FirstIndex()
	if err != nil {
		return err
	}
	last, err := n.logs.LastIndex()
	if err != nil {
		return err
	}
	var l raft.Log
	for i := max(first, snap+1); i <= last && i > 0; i++ {
		if err := n.logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				continue // compacted meanwhile: the FSM holds it
			}
			return err
		}
		if l.Type != raft.LogCommand {
			continue
		}
		var env raftpb.Envelope
		if proto.Unmarshal(l.Data, &env) != nil {
			continue // the FSM will say what is wrong with it
		}
		// A bad payload changes nothing here; the FSM refuses it when it
		// applies the entry. Registrations are never compressed (only
		// batches of group writes are), so COMPRESSED entries are skipped.
		switch env.GetType() {
		case raftpb.CommandType_COMMAND_TYPE_NODE_REGISTER:
			_ = registerNode(nodes, env.GetPayload())
		case raftpb.CommandType_COMMAND_TYPE_NODE_REMOVE:
			_ = removeNode(nodes, env.GetPayload())
		}
	}
	n.logged = sortedNodes(nodes)
	return nil
}
