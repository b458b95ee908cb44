package assignor

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

// sub returns a version 3 subscription to topics without history.
func sub(topics ...string) Subscription {
	return Subscription{Version: 3, Topics: topics, Generation: DefaultGeneration}
}

// tp parses "t-0,t-1,u-3" into owned partitions.
func tp(s string) []TopicPartitions {
	if s == "" {
		return nil
	}
	var out []TopicPartitions
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		i := strings.LastIndexByte(f, '-')
		var p int32
		fmt.Sscan(f[i+1:], &p)
		topic := f[:i]
		if n := len(out); n > 0 && out[n-1].Topic == topic {
			out[n-1].Partitions = append(out[n-1].Partitions, p)
		} else {
			out = append(out, TopicPartitions{Topic: topic, Partitions: []int32{p}})
		}
	}
	return out
}

// coopSub is a cooperative subscription owning the given partitions.
func coopSub(owned string, gen int32, topics ...string) Subscription {
	s := sub(topics...)
	s.OwnedPartitions = tp(owned)
	s.Generation = gen
	return s
}

// stickySub is an eager sticky subscription with the given userData history.
func stickySub(owned string, gen int32, topics ...string) Subscription {
	s := sub(topics...)
	u := StickyUserData{Owned: tp(owned), Generation: gen}
	s.UserData = u.AppendTo(nil)
	s.Generation = gen
	return s
}

// render formats a plan as member -> "t-0, t-1, u-2".
func render(plan *Plan) map[string]string { return renderMembers(plan.Members()) }

func renderMembers(plan []MemberAssignment) map[string]string {
	out := make(map[string]string, len(plan))
	for _, a := range plan {
		var parts []string
		for _, tp := range a.Topics {
			for _, p := range tp.Partitions {
				parts = append(parts, fmt.Sprintf("%s-%d", tp.Topic, p))
			}
		}
		out[a.MemberID] = strings.Join(parts, ", ")
	}
	return out
}

func assertPlan(t *testing.T, plan *Plan, want map[string]string) {
	t.Helper()
	got := render(plan)
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		if g != w || gok != wok {
			t.Errorf("member %s: got [%s] (present %v), want [%s] (present %v)", k, g, gok, w, wok)
		}
	}
}

// counts returns partitions per member, in plan order.
func counts(plan *Plan) []int {
	out := make([]int, plan.Len())
	for i := range out {
		out[i] = plan.Count(i)
	}
	return out
}

func spread(plan *Plan) int {
	c := counts(plan)
	if len(c) == 0 {
		return 0
	}
	return slices.Max(c) - slices.Min(c)
}

// checkValid asserts validity: one entry per distinct member id in Kafka's
// member order; only subscribed, existing, in-range partitions; no partition
// twice; sorted output; and, unless the assignor is cooperative, every
// partition of every subscribed topic assigned.
func checkValid(t fataler, b Balancer, members []Member, topics map[string]int32, p *Plan) {
	plan := p.Members()
	// The encoded form decodes to the same assignments.
	for i, enc := range p.Encode() {
		a, err := DecodeAssignment(enc)
		if err != nil || a.Version != 3 || len(a.Topics) != len(plan[i].Topics) || len(enc) != p.EncodedSize(i) {
			t.Fatalf("%s: encoded assignment %x: %v", plan[i].MemberID, enc, err)
		}
		for j := range a.Topics {
			if a.Topics[j].Topic != plan[i].Topics[j].Topic || !slices.Equal(a.Topics[j].Partitions, plan[i].Topics[j].Partitions) {
				t.Fatalf("%s: encoded %v, plan %v", plan[i].MemberID, a.Topics, plan[i].Topics)
			}
		}
		if p.Count(i) != countOf(plan[i]) {
			t.Fatalf("Count(%d) = %d", i, p.Count(i))
		}
	}
	t.Helper()
	byID := map[string]*Member{}
	for i := range members {
		if _, ok := byID[members[i].ID]; !ok {
			byID[members[i].ID] = &members[i]
		}
	}
	if len(plan) != len(byID) {
		t.Fatalf("plan has %d members, want %d", len(plan), len(byID))
	}
	for i := 1; i < len(plan); i++ {
		if memberLess(byID[plan[i-1].MemberID], byID[plan[i].MemberID]) >= 0 {
			t.Fatalf("plan not in member order at %d", i)
		}
	}
	type key struct {
		t string
		p int32
	}
	seen := map[key]string{}
	for _, a := range plan {
		m := byID[a.MemberID]
		if m == nil {
			t.Fatalf("unknown member %q", a.MemberID)
		}
		for i, tpa := range a.Topics {
			if i > 0 && a.Topics[i-1].Topic >= tpa.Topic {
				t.Fatalf("%s: topics not sorted", a.MemberID)
			}
			if len(tpa.Partitions) == 0 {
				t.Fatalf("%s: empty topic entry", a.MemberID)
			}
			if !slices.Contains(m.Subscription.Topics, tpa.Topic) {
				t.Fatalf("%s got %s, not subscribed", a.MemberID, tpa.Topic)
			}
			for j, p := range tpa.Partitions {
				if j > 0 && tpa.Partitions[j-1] >= p {
					t.Fatalf("%s: partitions not sorted", a.MemberID)
				}
				if p < 0 || p >= topics[tpa.Topic] {
					t.Fatalf("%s: %s-%d out of range", a.MemberID, tpa.Topic, p)
				}
				k := key{tpa.Topic, p}
				if o, dup := seen[k]; dup {
					t.Fatalf("%s-%d on %s and %s", tpa.Topic, p, o, a.MemberID)
				}
				seen[k] = a.MemberID
			}
		}
	}
	if b.IsCooperative() {
		return
	}
	want := 0
	subscribed := map[string]bool{}
	for _, m := range byID {
		for _, tn := range m.Subscription.Topics {
			if !subscribed[tn] {
				subscribed[tn] = true
				if n := topics[tn]; n > 0 {
					want += int(n)
				}
			}
		}
	}
	if len(seen) != want {
		t.Fatalf("%d partitions assigned, want %d", len(seen), want)
	}
}

// oneHopBalanced reports Kafka's general balance criterion: no member holds a
// partition of a topic that a member with at least two fewer partitions
// subscribes to.
func oneHopViolation(members []Member, p *Plan) string {
	plan := p.Members()
	subOf := map[string][]string{}
	for _, m := range members {
		if _, ok := subOf[m.ID]; !ok {
			subOf[m.ID] = m.Subscription.Topics
		}
	}
	c := counts(p)
	for i, h := range plan {
		for j, l := range plan {
			if c[i] < c[j]+2 {
				continue
			}
			for _, tpa := range h.Topics {
				if slices.Contains(subOf[l.MemberID], tpa.Topic) {
					return fmt.Sprintf("%s has %d incl. %s, %s has %d", h.MemberID, c[i], tpa.Topic, l.MemberID, c[j])
				}
			}
		}
	}
	return ""
}

// fataler is what the checks need from *testing.T and *propT.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func countOf(a MemberAssignment) int {
	n := 0
	for _, tp := range a.Topics {
		n += len(tp.Partitions)
	}
	return n
}

// claims returns a member's owned partitions and generation as the sticky
// family reads them. Eager "sticky" reads both from its userData (the
// subscription's owned list is empty for eager members). Cooperative reads the
// subscription's owned partitions, with the subscription's generation from v2
// on and otherwise the generation in its 4-byte userData.
func claims(s *Subscription, coop bool, d *Decoder) ([]TopicPartitions, int32) {
	if coop {
		gen := s.Generation
		if s.Version < 2 {
			gen, _ = DecodeCooperativeUserData(s.UserData)
		}
		return s.OwnedPartitions, gen
	}
	if len(s.UserData) == 0 {
		return nil, DefaultGeneration
	}
	u, err := d.DecodeStickyUserData(s.UserData)
	if err != nil {
		return nil, DefaultGeneration // unparsable userData: no history
	}
	return u.Owned, u.Generation
}
