package member_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/assignor"
)

type tp struct {
	topic     string
	partition int32
}

func (p tp) String() string { return fmt.Sprintf("%s/%d", p.topic, p.partition) }

// history records every assigned, revoked and lost of the members of a test
// and checks, in the order the callbacks ran, that no partition is owned by
// two members at once. An assignment is recorded when its callback starts,
// a revocation when its callback returns (the member owns the partitions
// until then).
type history struct {
	t        testing.TB
	mu       sync.Mutex
	owner    map[tp]string
	overlaps []string
	lost     []string
	changes  int
	last     time.Time
	// onRevoke, when set, sees every revocation (under mu).
	onRevoke func(name string, ps []tp)
}

func newHistory(t testing.TB) *history {
	return &history{t: t, owner: map[tp]string{}}
}

func flatten(ps []assignor.TopicPartitions) []tp {
	var out []tp
	for _, t := range ps {
		for _, p := range t.Partitions {
			out = append(out, tp{t.Topic, p})
		}
	}
	return out
}

func (h *history) log(name, kind string, ps []tp) {
	h.t.Logf("%s %-8s %-8s %v", time.Now().Format("15:04:05.000"), name, kind, ps)
}

func (h *history) assigned(name string, ps []tp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(ps) > 0 {
		h.log(name, "assigned", ps)
		h.changes++
		h.last = time.Now()
	}
	for _, p := range ps {
		if o, ok := h.owner[p]; ok && o != name {
			h.overlaps = append(h.overlaps, fmt.Sprintf("%v assigned to %s while %s owns it", p, name, o))
		}
		h.owner[p] = name
	}
}

func (h *history) released(name, kind string, ps []tp) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log(name, kind, ps)
	h.changes++
	h.last = time.Now()
	if kind == "revoked" && h.onRevoke != nil {
		h.onRevoke(name, ps)
	}
	if kind == "lost" && len(ps) > 0 {
		h.lost = append(h.lost, fmt.Sprintf("%s lost %v", name, ps))
	}
	for _, p := range ps {
		if h.owner[p] == name {
			delete(h.owner, p)
		}
	}
}

// owned returns, per member name, what the history says it owns.
func (h *history) owned() map[string][]tp {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]tp{}
	for p, o := range h.owner {
		out[o] = append(out[o], p)
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b tp) int {
			if a.topic != b.topic {
				if a.topic < b.topic {
					return -1
				}
				return 1
			}
			return int(a.partition - b.partition)
		})
	}
	return out
}

func (h *history) check(t testing.TB) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.overlaps) > 0 {
		t.Errorf("%d overlaps:\n%v", len(h.overlaps), h.overlaps)
	}
	if len(h.lost) > 0 {
		t.Errorf("lost callbacks: %v", h.lost)
	}
}

// recorder is a member.Handler feeding a history under a member name.
type recorder struct {
	h    *history
	name string
	// revokeDelay makes revocations take time, to widen any window in which
	// another member could start on a partition too early.
	revokeDelay time.Duration
}

func (r *recorder) Assigned(_ context.Context, _ *member.Member, ps []assignor.TopicPartitions) {
	r.h.assigned(r.name, flatten(ps))
}

func (r *recorder) Revoked(_ context.Context, _ *member.Member, ps []assignor.TopicPartitions) {
	if r.revokeDelay > 0 {
		time.Sleep(r.revokeDelay)
	}
	r.h.released(r.name, "revoked", flatten(ps))
}

func (r *recorder) Lost(_ context.Context, _ *member.Member, ps []assignor.TopicPartitions) {
	r.h.released(r.name, "lost", flatten(ps))
}
