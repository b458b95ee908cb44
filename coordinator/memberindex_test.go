package coordinator

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMemberIndexMatchesAMap runs random puts (new ids and replacements)
// and deletes (present and absent ids) against the index and a map, and
// checks after each that both hold the same members and the index is
// sorted by hash.
func TestMemberIndexMatchesAMap(t *testing.T) {
	t.Run("hashed", func(t *testing.T) { checkMemberIndex(t) })
	t.Run("colliding", func(t *testing.T) {
		// Ids of one length share a hash: lookups go past other members'
		// entries with the same hash.
		weakMemberHash = true
		t.Cleanup(func() { weakMemberHash = false })
		checkMemberIndex(t)
	})
}

func checkMemberIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var x memberIndex
	want := map[string]*member{}
	for step := range 5000 {
		id := fmt.Sprintf("client-%d", rng.IntN(300))
		switch rng.IntN(3) {
		case 0, 1:
			m := &member{id: id}
			x.put(m)
			want[id] = m
		default:
			x.del(id)
			delete(want, id)
		}
		if x.len() != len(want) {
			t.Fatalf("step %d: %d members, want %d", step, x.len(), len(want))
		}
		for id, m := range want {
			if got := x.get(id); got != m {
				t.Fatalf("step %d: get(%q) = %p, want %p", step, id, got, m)
			}
		}
		if !slices.IsSortedFunc(x.byHash, func(a, b indexEntry) int { return cmp.Compare(a.hash, b.hash) }) {
			t.Fatalf("step %d: not sorted", step)
		}
		if x.get("absent") != nil {
			t.Fatalf("step %d: an absent id was found", step)
		}
	}
}

// BenchmarkMemberLookup looks members up at random among 10,000 groups of
// 10 (100,000 members, more than the caches hold), in the index and, for
// comparison, in the map it replaced.
func BenchmarkMemberLookup(b *testing.B) {
	const groups, per = 10000, 10
	ids := make([][]string, groups)
	maps := make([]map[string]*member, groups)
	idx := make([]memberIndex, groups)
	rng := rand.New(rand.NewPCG(3, 4))
	for g := range groups {
		maps[g] = map[string]*member{}
		for i := range per {
			id := fmt.Sprintf("bench-client-%d-%08x-1234-5678-9abc-def012345678", i, rng.Uint32())
			m := &member{id: id}
			ids[g] = append(ids[g], string([]byte(id))) // the request's own copy
			maps[g][id] = m
			idx[g].put(m)
		}
	}
	order := make([]int, 1<<16)
	for i := range order {
		order[i] = rng.IntN(groups * per)
	}
	b.Run("index", func(b *testing.B) {
		i := 0
		for b.Loop() {
			k := order[i&(len(order)-1)]
			i++
			if idx[k/per].get(ids[k/per][k%per]) == nil {
				b.Fatal("not found")
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		i := 0
		for b.Loop() {
			k := order[i&(len(order)-1)]
			i++
			if maps[k/per][ids[k/per][k%per]] == nil {
				b.Fatal("not found")
			}
		}
	})
}
