package assignor

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// serverWorld is a random consumer group for the server assignors.
type serverWorld struct {
	members []ServerMember
	topics  map[string]int32
}

func randomServerWorld(r *rand.Rand, homogeneous bool) serverWorld {
	w := serverWorld{topics: map[string]int32{}}
	T := 1 + r.IntN(6)
	var names []string
	for t := range T {
		name := fmt.Sprintf("t%d", t)
		names = append(names, name)
		if r.IntN(8) > 0 { // some subscribed topics do not exist
			w.topics[name] = int32(r.IntN(9))
		}
	}
	M := 1 + r.IntN(9)
	common := randomSubset(r, names)
	for m := range M {
		sm := ServerMember{ID: fmt.Sprintf("m%02d", r.IntN(100)*100+m)}
		if r.IntN(3) == 0 {
			sm.InstanceID = fmt.Sprintf("i%02d", m)
		}
		if homogeneous {
			sm.Topics = slices.Clone(common)
			r.Shuffle(len(sm.Topics), func(i, j int) { sm.Topics[i], sm.Topics[j] = sm.Topics[j], sm.Topics[i] })
		} else {
			sm.Topics = randomSubset(r, names)
		}
		// Random previous assignment, possibly overlapping, stale or out of range.
		for _, t := range names {
			var ps []int32
			for p := range int32(10) {
				if r.IntN(4) == 0 {
					ps = append(ps, p)
				}
			}
			if len(ps) > 0 {
				sm.Current = append(sm.Current, TopicPartitions{Topic: t, Partitions: ps})
			}
		}
		w.members = append(w.members, sm)
	}
	return w
}

func randomSubset(r *rand.Rand, names []string) []string {
	var out []string
	for _, n := range names {
		if r.IntN(2) == 0 {
			out = append(out, n)
		}
	}
	return out
}

// checkServerValid asserts that every partition of a topic somebody
// subscribes to is assigned exactly once, to a subscriber, and that the
// result is sorted.
func checkServerValid(t *testing.T, w serverWorld, out [][]TopicPartitions) []int {
	t.Helper()
	if len(out) != len(w.members) {
		t.Fatalf("%d assignments for %d members", len(out), len(w.members))
	}
	owners := map[string]map[int32]int{}
	counts := make([]int, len(out))
	for m, a := range out {
		if !slices.IsSortedFunc(a, func(x, y TopicPartitions) int { return cmpString(x.Topic, y.Topic) }) {
			t.Fatalf("member %d: topics not sorted: %v", m, a)
		}
		for _, tp := range a {
			if !slices.Contains(w.members[m].Topics, tp.Topic) {
				t.Fatalf("member %d got unsubscribed topic %s", m, tp.Topic)
			}
			if !slices.IsSorted(tp.Partitions) || len(tp.Partitions) == 0 {
				t.Fatalf("member %d topic %s: partitions %v", m, tp.Topic, tp.Partitions)
			}
			for _, p := range tp.Partitions {
				if owners[tp.Topic] == nil {
					owners[tp.Topic] = map[int32]int{}
				}
				if prev, dup := owners[tp.Topic][p]; dup {
					t.Fatalf("%s-%d assigned to %d and %d", tp.Topic, p, prev, m)
				}
				if p < 0 || p >= w.topics[tp.Topic] {
					t.Fatalf("%s-%d out of range", tp.Topic, p)
				}
				owners[tp.Topic][p] = m
				counts[m]++
			}
		}
	}
	for topic, n := range w.topics {
		subscribed := slices.ContainsFunc(w.members, func(m ServerMember) bool { return slices.Contains(m.Topics, topic) })
		if !subscribed {
			continue
		}
		if got := len(owners[topic]); got != int(n) {
			t.Fatalf("topic %s: %d of %d partitions assigned", topic, got, n)
		}
	}
	return counts
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func has(a []TopicPartitions, topic string, p int32) bool {
	for _, tp := range a {
		if tp.Topic == topic {
			return slices.Contains(tp.Partitions, p)
		}
	}
	return false
}

func TestServerPropValidDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		w := randomServerWorld(r, i%2 == 0)
		for _, a := range ServerAssignors() {
			out := a.Assign(w.members, w.topics)
			checkServerValid(t, w, out)
			if again := a.Assign(w.members, w.topics); !reflect.DeepEqual(out, again) {
				t.Fatalf("%s not deterministic", a.Name())
			}
		}
	}
}

// Homogeneous: counts differ by at most one (uniform over the group, range
// per topic).
func TestServerPropBalanceHomogeneous(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		w := randomServerWorld(r, true)
		counts := checkServerValid(t, w, Uniform().Assign(w.members, w.topics))
		if slices.Max(counts)-slices.Min(counts) > 1 {
			t.Fatalf("uniform unbalanced: %v", counts)
		}
		out := ServerRange().Assign(w.members, w.topics)
		checkServerValid(t, w, out)
		for topic := range w.topics {
			var per []int
			for m := range w.members {
				if !slices.Contains(w.members[m].Topics, topic) {
					continue
				}
				n := 0
				for _, tp := range out[m] {
					if tp.Topic == topic {
						n = len(tp.Partitions)
					}
				}
				per = append(per, n)
			}
			if len(per) > 0 && slices.Max(per)-slices.Min(per) > 1 {
				t.Fatalf("range unbalanced on %s: %v", topic, per)
			}
		}
	}
}

// Heterogeneous: no partition's owner holds two or more partitions more than
// another subscriber of its topic (no single move narrows a gap).
func TestServerPropBalanceHeterogeneous(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 3000 {
		w := randomServerWorld(r, false)
		out := Uniform().Assign(w.members, w.topics)
		counts := checkServerValid(t, w, out)
		for m, a := range out {
			for _, tp := range a {
				for n := range w.members {
					if slices.Contains(w.members[n].Topics, tp.Topic) && counts[m] > counts[n]+1 {
						t.Fatalf("member %d (%d) holds %s while subscriber %d has %d", m, counts[m], tp.Topic, n, counts[n])
					}
				}
			}
		}
	}
}

// Stickiness: a member keeps its previous partitions up to its quota; a
// balanced, valid previous assignment is kept whole; uniform run on its own
// output changes nothing.
func TestServerPropSticky(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := range 3000 {
		w := randomServerWorld(r, i%2 == 0)
		first := Uniform().Assign(w.members, w.topics)
		for m := range w.members {
			w.members[m].Current = first[m]
		}
		if again := Uniform().Assign(w.members, w.topics); !reflect.DeepEqual(first, again) {
			t.Fatalf("uniform moved partitions of its own balanced target:\n%v\n%v", first, again)
		}
		if !w.homogeneousAfter() {
			continue
		}
		// A member joins: nobody loses more than it must.
		w.members = append(w.members, ServerMember{ID: "new", Topics: slices.Clone(w.members[0].Topics)})
		total := 0
		for _, a := range first {
			for _, tp := range a {
				total += len(tp.Partitions)
			}
		}
		out := Uniform().Assign(w.members, w.topics)
		counts := checkServerValid(t, w, out)
		q := total / len(w.members)
		for m := range len(w.members) - 1 {
			kept := 0
			for _, tp := range first[m] {
				for _, p := range tp.Partitions {
					if has(out[m], tp.Topic, p) {
						kept++
					}
				}
			}
			if want := min(counts[m], q); kept < want {
				t.Fatalf("member %d kept %d of its previous partitions, quota allowed %d", m, kept, want)
			}
		}
	}
}

func (w serverWorld) homogeneousAfter() bool {
	for _, m := range w.members[1:] {
		a, b := slices.Sorted(slices.Values(m.Topics)), slices.Sorted(slices.Values(w.members[0].Topics))
		if !slices.Equal(a, b) {
			return false
		}
	}
	return true
}

func TestServerRangeCoPartitionsAndOrdersStaticFirst(t *testing.T) {
	topics := map[string]int32{"a": 5, "b": 5, "c": 2}
	members := []ServerMember{
		{ID: "z", Topics: []string{"a", "b"}},
		{ID: "y", InstanceID: "s2", Topics: []string{"b", "a"}},
		{ID: "x", Topics: []string{"a", "b", "c"}},
		{ID: "w", InstanceID: "s1", Topics: []string{"a", "b"}},
	}
	// Order: s1(w), s2(y), x, z. a,b: 5 over 4 -> 2,1,1,1. c: only x.
	want := [][]TopicPartitions{
		{{"a", []int32{4}}, {"b", []int32{4}}},
		{{"a", []int32{2}}, {"b", []int32{2}}},
		{{"a", []int32{3}}, {"b", []int32{3}}, {"c", []int32{0, 1}}},
		{{"a", []int32{0, 1}}, {"b", []int32{0, 1}}},
	}
	if got := ServerRange().Assign(members, topics); !reflect.DeepEqual(want, got) {
		t.Fatalf("range:\n got %v\nwant %v", got, want)
	}
}

func TestServerUniformCases(t *testing.T) {
	topics := map[string]int32{"foo": 6, "bar": 3}
	both := []string{"foo", "bar"}
	// Join: m1 and m2 had everything, m3 joins; each gets 3 and the old
	// owners keep theirs.
	members := []ServerMember{
		{ID: "m1", Topics: both, Current: []TopicPartitions{{"bar", []int32{0, 1}}, {"foo", []int32{0, 1, 2}}}},
		{ID: "m2", Topics: both, Current: []TopicPartitions{{"bar", []int32{2}}, {"foo", []int32{3, 4, 5}}}},
		{ID: "m3", Topics: both},
	}
	want := [][]TopicPartitions{
		{{"bar", []int32{0, 1}}, {"foo", []int32{0}}},
		{{"bar", []int32{2}}, {"foo", []int32{3, 4}}},
		{{"foo", []int32{1, 2, 5}}},
	}
	if got := Uniform().Assign(members, topics); !reflect.DeepEqual(want, got) {
		t.Fatalf("uniform join:\n got %v\nwant %v", got, want)
	}
	// Heterogeneous: m3 only subscribes to bar, which m1 held.
	members[2].Topics = []string{"bar"}
	out := Uniform().Assign(members, topics)
	w := serverWorld{members: members, topics: topics}
	counts := checkServerValid(t, w, out)
	// bar moves to m3 (its only topic) until the three hold 3 each; foo
	// stays with its previous owners.
	want = [][]TopicPartitions{{{"foo", []int32{0, 1, 2}}}, {{"foo", []int32{3, 4, 5}}}, {{"bar", []int32{0, 1, 2}}}}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("heterogeneous counts %v: %v", counts, out)
	}
}

// Assigning against franz-go's client-side cooperative-sticky balancer on the
// same shape: fresh (no history), one member joining a balanced group, and
// the same with one member subscribed to a single topic.
//
//	go test -run '^$' -bench 'ServerUniform' -benchtime=20x -count=5 ./assignor/
func BenchmarkServerUniform(b *testing.B) {
	for _, shape := range []struct {
		name string
		k    shapeKey
	}{
		{"fresh", shapeKey{M: 1000, T: 100, N: 10}},
		{"join", shapeKey{M: 1000, T: 100, N: 10, join: true}},
		// The last member subscribes to one topic only: uniform's general
		// (heterogeneous) path.
		{"hetero-join", shapeKey{M: 1000, T: 100, N: 10, join: true, nonUniform: true}},
	} {
		name, k := shape.name, shape.k
		b.Run(name+"/cohort", func(b *testing.B) {
			in := buildShape(b, CooperativeSticky(), k)
			members := make([]ServerMember, len(in.members))
			for i, m := range in.members {
				members[i] = ServerMember{ID: m.ID, Topics: m.Subscription.Topics, Current: m.Subscription.OwnedPartitions}
			}
			u := Uniform()
			u.Assign(members, in.topics)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if out := u.Assign(members, in.topics); len(out) != len(members) {
					b.Fatal("bad result")
				}
			}
		})
		b.Run(name+"/franz", func(b *testing.B) {
			in := buildShape(b, CooperativeSticky(), k)
			fb := franzFor(CooperativeSticky())
			if mb, _, err := fb.MemberBalancer(in.kmsgMembers()); err == nil {
				franzBalance(b, mb, in.topics)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				mb, _, err := fb.MemberBalancer(in.kmsgMembers())
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if franzBalance(b, mb, in.topics) == nil {
					b.Fatal("nil plan")
				}
			}
		})
	}
}
