package clustertest

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Op kinds recorded in a History.
const (
	OpJoin      = "join"
	OpSync      = "sync"
	OpHeartbeat = "heartbeat"
	OpCommit    = "commit"
)

// Op is one group request and its outcome as a client saw it.
type Op struct {
	Kind   string
	Group  string
	Client string
	Node   string // Kafka address the request went to
	Start  time.Time
	End    time.Time
	// Err is a transport error or timeout: the outcome is unknown.
	Err  error
	Code int16

	MemberID string
	Gen      int32 // sent (heartbeat, commit, sync) or answered (join)
	// JoinGroup answers.
	Leader   string
	Protocol string
	Members  []string // only in the leader's answer
	// SyncGroup answer.
	Assignment []int32
	// OffsetCommit request: partition -> offset, and which were acknowledged.
	Topic   string
	Offsets map[int32]int64
	Acked   map[int32]bool
}

// OK reports whether the request was answered without error.
func (o *Op) OK() bool { return o.Err == nil && o.Code == errNone }

func (o *Op) String() string {
	s := fmt.Sprintf("%s %s/%s via %s member=%s gen=%d", o.Kind, o.Group, o.Client, o.Node, o.MemberID, o.Gen)
	if o.Err != nil {
		return s + " err=" + o.Err.Error()
	}
	return s + fmt.Sprintf(" code=%d", o.Code)
}

// History is an append-only, concurrency-safe record of group requests.
type History struct {
	mu  sync.Mutex
	ops []*Op
}

// Add records op.
func (h *History) Add(op *Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns a copy of the recorded ops.
func (h *History) Ops() []*Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

// Count returns how many ops of kind started at or after since.
func (h *History) Count(kind string, since time.Time) int {
	n := 0
	for _, o := range h.Ops() {
		if o.Kind == kind && !o.Start.Before(since) {
			n++
		}
	}
	return n
}

type genKey struct {
	group string
	gen   int32
}

// CheckGenerations verifies that no generation of a group was ever answered
// with two different memberships: all JoinGroup answers of a generation name
// the same leader and protocol, the leader's member lists agree and contain
// every member answered in that generation, a member's SyncGroup answers in
// a generation agree, and the assignments of a generation are disjoint. It
// also checks that no client saw its generation go back.
func CheckGenerations(ops []*Op) []error {
	var errs []error
	type genView struct {
		leader, protocol string
		members          []string // sorted leader list
		joined           map[string]bool
		assign           map[string][]int32
	}
	views := map[genKey]*genView{}
	view := func(k genKey) *genView {
		v := views[k]
		if v == nil {
			v = &genView{joined: map[string]bool{}, assign: map[string][]int32{}}
			views[k] = v
		}
		return v
	}
	lastGen := map[string]int32{}
	for _, o := range ops {
		if !o.OK() {
			continue
		}
		k := genKey{o.Group, o.Gen}
		switch o.Kind {
		case OpJoin:
			v := view(k)
			if v.leader == "" {
				v.leader, v.protocol = o.Leader, o.Protocol
			} else if v.leader != o.Leader || v.protocol != o.Protocol {
				errs = append(errs, fmt.Errorf("group %s generation %d: answered with leader/protocol %s/%s and %s/%s", o.Group, o.Gen, v.leader, v.protocol, o.Leader, o.Protocol))
			}
			v.joined[o.MemberID] = true
			if o.MemberID == o.Leader {
				list := sortedCopy(o.Members)
				if v.members == nil {
					v.members = list
				} else if !slices.Equal(v.members, list) {
					errs = append(errs, fmt.Errorf("group %s generation %d: leader answered with members %v and %v", o.Group, o.Gen, v.members, list))
				}
			}
			// A client's generations never go back. The same one twice is
			// Kafka's answer to a member that rejoins a Stable group
			// unchanged (and cohort's after a takeover): the checks above
			// hold that answer to the generation's leader, protocol and
			// members.
			ck := o.Group + "/" + o.Client
			if prev, ok := lastGen[ck]; ok && o.Gen < prev {
				errs = append(errs, fmt.Errorf("group %s client %s: joined generation %d after %d", o.Group, o.Client, o.Gen, prev))
			}
			lastGen[ck] = o.Gen
		case OpSync:
			v := view(k)
			v.joined[o.MemberID] = true
			a := slices.Clone(o.Assignment)
			slices.Sort(a)
			if prev, ok := v.assign[o.MemberID]; ok && !slices.Equal(prev, a) {
				errs = append(errs, fmt.Errorf("group %s generation %d member %s: assigned %v and %v", o.Group, o.Gen, o.MemberID, prev, a))
			}
			v.assign[o.MemberID] = a
		}
	}
	keys := slices.Collect(maps.Keys(views))
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].group != keys[j].group {
			return keys[i].group < keys[j].group
		}
		return keys[i].gen < keys[j].gen
	})
	for _, k := range keys {
		v := views[k]
		if v.members != nil {
			for m := range v.joined {
				if !slices.Contains(v.members, m) {
					errs = append(errs, fmt.Errorf("group %s generation %d: member %s answered but not in the leader's list %v", k.group, k.gen, m, v.members))
				}
			}
		}
		owner := map[int32]string{}
		for _, m := range slices.Sorted(maps.Keys(v.assign)) {
			for _, p := range v.assign[m] {
				if o, ok := owner[p]; ok {
					errs = append(errs, fmt.Errorf("group %s generation %d: partition %d assigned to %s and %s", k.group, k.gen, p, o, m))
				}
				owner[p] = m
			}
		}
	}
	return errs
}

// CheckFencing verifies generation fencing in real time: once any client
// received generation g' of a group, no Heartbeat, SyncGroup or OffsetCommit
// stamped with an older generation that started later succeeded.
func CheckFencing(ops []*Op) []error {
	type joined struct {
		end time.Time
		gen int32
	}
	joins := map[string][]joined{}
	for _, o := range ops {
		if o.Kind == OpJoin && o.OK() {
			joins[o.Group] = append(joins[o.Group], joined{o.End, o.Gen})
		}
	}
	for _, js := range joins {
		sort.Slice(js, func(i, j int) bool { return js[i].end.Before(js[j].end) })
		for i := 1; i < len(js); i++ {
			js[i].gen = max(js[i].gen, js[i-1].gen)
		}
	}
	var errs []error
	for _, o := range ops {
		if o.Kind == OpJoin || !o.OK() || o.Gen < 0 {
			continue
		}
		js := joins[o.Group]
		i := sort.Search(len(js), func(i int) bool { return !js[i].end.Before(o.Start) })
		if i > 0 && js[i-1].gen > o.Gen {
			errs = append(errs, fmt.Errorf("group %s: %s of %s with generation %d succeeded after generation %d was handed out", o.Group, o.Kind, o.Client, o.Gen, js[i-1].gen))
		}
	}
	return errs
}

// OffsetKey names one committed offset.
type OffsetKey struct {
	Group     string
	Topic     string
	Partition int32
}

// CheckOffsets compares fetched committed offsets with the commits of the
// history. Each partition must be committed by one client at a time with
// increasing offsets (the workload does that); then the fetched offset must
// be one that was sent, and not older than the newest acknowledged one.
func CheckOffsets(ops []*Op, fetched map[OffsetKey]int64) []error {
	acked := map[OffsetKey]int64{}
	sent := map[OffsetKey]map[int64]bool{}
	for _, o := range ops {
		if o.Kind != OpCommit {
			continue
		}
		for p, off := range o.Offsets {
			k := OffsetKey{o.Group, o.Topic, p}
			if sent[k] == nil {
				sent[k] = map[int64]bool{}
			}
			sent[k][off] = true
			if o.Err == nil && o.Acked[p] {
				if a, ok := acked[k]; !ok || off > a {
					acked[k] = off
				}
			}
		}
	}
	var errs []error
	keys := slices.Collect(maps.Keys(fetched))
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	for _, k := range keys {
		got := fetched[k]
		a, wasAcked := acked[k]
		switch {
		case got == -1 && !wasAcked:
		case got == -1:
			errs = append(errs, fmt.Errorf("%s %s/%d: no committed offset, but %d was acknowledged", k.Group, k.Topic, k.Partition, a))
		case !sent[k][got]:
			errs = append(errs, fmt.Errorf("%s %s/%d: committed offset %d was never sent", k.Group, k.Topic, k.Partition, got))
		case wasAcked && got < a:
			errs = append(errs, fmt.Errorf("%s %s/%d: committed offset %d is older than the acknowledged %d", k.Group, k.Topic, k.Partition, got, a))
		}
	}
	for k, a := range acked {
		if _, ok := fetched[k]; !ok {
			errs = append(errs, fmt.Errorf("%s %s/%d: acknowledged %d but not fetched", k.Group, k.Topic, k.Partition, a))
		}
	}
	return errs
}

// Summary counts ops by kind and outcome, for test logs.
func Summary(ops []*Op) string {
	counts := map[string]int{}
	for _, o := range ops {
		switch {
		case o.Err != nil:
			counts[o.Kind+":unknown"]++
		case o.Code != 0:
			counts[fmt.Sprintf("%s:code%d", o.Kind, o.Code)]++
		default:
			counts[o.Kind+":ok"]++
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, counts[k]))
	}
	return strings.Join(parts, " ")
}
