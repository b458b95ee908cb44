package clustertest

import (
	"fmt"
	"slices"
	"strings"

	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

// convergence is what the nodes reported while WaitConverged polled them:
// the FSM hash each node reported at each applied index.
//
// While clients write, the nodes are seldom at one applied index at the
// same moment: a follower learns that an entry is committed from the
// leader's next AppendEntries, which goes out with the next entry (or
// after raft's 50-100 ms commit timeout when none comes), so at ~50 entries
// a second every follower reports one entry less than the leader in nearly
// every poll. The nodes have converged when each reported the same hash at
// one applied index, in one poll or in different ones: equal hashes at an
// equal index is the agreement WaitConverged checks. Every report comes
// from after the wait began, and applied indexes only grow, so that index
// is at or past where the leader was then: a node that stays behind it
// never converges.
type convergence struct {
	seen  map[string]map[uint64]string // node id -> applied index -> FSM hash
	first map[string]*clusterpb.StatusResponse
	last  map[string]*clusterpb.StatusResponse
}

func newConvergence() *convergence {
	return &convergence{seen: map[string]map[uint64]string{}, first: map[string]*clusterpb.StatusResponse{}, last: map[string]*clusterpb.StatusResponse{}}
}

// add records one node's status (nil is ignored).
func (v *convergence) add(st *clusterpb.StatusResponse) {
	if st == nil {
		return
	}
	id := st.GetNodeId()
	if v.first[id] == nil {
		v.first[id] = st
	}
	v.last[id] = st
	if st.GetFsmHash() == "" {
		return
	}
	if v.seen[id] == nil {
		v.seen[id] = map[uint64]string{}
	}
	v.seen[id][st.GetAppliedIndex()] = st.GetFsmHash()
}

// agreed returns the highest applied index at which every node of ids
// reported one FSM hash, and whether there is one.
func (v *convergence) agreed(ids []string) (uint64, bool) {
	if len(ids) == 0 {
		return 0, false
	}
	var best uint64
	found := false
	for index, hash := range v.seen[ids[0]] {
		if found && index <= best {
			continue
		}
		same := true
		for _, id := range ids[1:] {
			if h, ok := v.seen[id][index]; !ok || h != hash {
				same = false
				break
			}
		}
		if same {
			best, found = index, true
		}
	}
	return best, found
}

// report describes each node of ids for a failure: where its applied index
// started and ended during the wait (a range says writes went on, one
// number that the node did not move), its commit index, the last index in
// its log (a leader's above its commit index: entries wait for a quorum),
// when it last heard from its leader, and its hash.
func (v *convergence) report(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range slices.Sorted(slices.Values(ids)) {
		f, l := v.first[id], v.last[id]
		if l == nil {
			out = append(out, fmt.Sprintf("%s: no status", id))
			continue
		}
		applied := fmt.Sprint(l.GetAppliedIndex())
		if f.GetAppliedIndex() != l.GetAppliedIndex() {
			applied = fmt.Sprintf("%d->%d", f.GetAppliedIndex(), l.GetAppliedIndex())
		}
		contact := "never"
		if ms := l.GetLastContactMs(); ms >= 0 {
			contact = fmt.Sprintf("%dms ago", ms)
		}
		out = append(out, fmt.Sprintf("%s: state=%s term=%d applied=%s commit=%d last-log=%d leader-contact=%s hash=%s (%d distinct applied indexes seen)",
			id, l.GetState(), l.GetTerm(), applied, l.GetCommitIndex(), l.GetLastLogIndex(), contact, l.GetFsmHash(), len(v.seen[id])))
	}
	return out
}

// mismatches lists, for a failure, the applied indexes at which two nodes
// reported different hashes (a divergence, or a status that read the
// hash an entry after its index).
func (v *convergence) mismatches(ids []string) string {
	var out []string
	for i, a := range ids {
		for _, b := range ids[i+1:] {
			for index, ha := range v.seen[a] {
				if hb, ok := v.seen[b][index]; ok && ha != hb {
					out = append(out, fmt.Sprintf("%s and %s differ at applied index %d", a, b, index))
				}
			}
		}
	}
	slices.Sort(out)
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return strings.Join(out, "; ")
}
