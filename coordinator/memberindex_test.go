package coordinator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestMemberIndexMatchesAMap runs random puts (new ids and replacements)
// and deletes (present and absent ids) against the index and a map, and
// checks after each that both hold the same members and the index is
// sorted by id.
func TestMemberIndexMatchesAMap(t *testing.T) {
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
		if !slices.IsSortedFunc(x.byID, func(a, b *member) int { return strings.Compare(a.id, b.id) }) {
			t.Fatalf("step %d: not sorted", step)
		}
		if x.get("absent") != nil {
			t.Fatalf("step %d: an absent id was found", step)
		}
	}
}
