package node

import "testing"

// Placement moves a shard only from a node that leads at least two more
// than the least loaded live node, to that node (the lowest id on a tie),
// so repeated moves end with every node at ⌊S/N⌋ or ⌈S/N⌉.
func TestPlacementMoves(t *testing.T) {
	for _, c := range []struct {
		counts map[string]int
		from   string
		want   string
	}{
		{map[string]int{"a": 16, "b": 0, "c": 0}, "a", "b"},
		{map[string]int{"a": 6, "b": 5, "c": 5}, "a", ""},
		{map[string]int{"a": 7, "b": 5, "c": 4}, "a", "c"},
		{map[string]int{"a": 6, "b": 6, "c": 4}, "b", "c"},
		{map[string]int{"a": 5, "b": 5, "c": 6}, "a", ""},
		{map[string]int{"a": 16}, "a", ""},
	} {
		p := placement{counts: c.counts}
		for id := range c.counts {
			p.live = append(p.live, id)
		}
		if got := p.moveFrom(c.from); got != c.want {
			t.Errorf("%v, from %s: move to %q, want %q", c.counts, c.from, got, c.want)
		}
	}
	// Applying the rule until it stops spreads 16 shards evenly over 3 and
	// over 4 nodes, from any start.
	for _, start := range []map[string]int{{"a": 16, "b": 0, "c": 0}, {"a": 0, "b": 0, "c": 16}, {"a": 16, "b": 0, "c": 0, "d": 0}, {"a": 8, "b": 8, "c": 0, "d": 0}} {
		p := placement{counts: map[string]int{}}
		for id, k := range start {
			p.counts[id] = k
			p.live = append(p.live, id)
		}
		for moved := true; moved; {
			moved = false
			for _, id := range p.live {
				if to := p.moveFrom(id); to != "" {
					p.counts[id]--
					p.counts[to]++
					moved = true
				}
			}
		}
		lo, hi := 16/len(p.live), (16+len(p.live)-1)/len(p.live)
		for id, k := range p.counts {
			if k < lo || k > hi {
				t.Errorf("from %v: %s ends with %d shards: %v", start, id, k, p.counts)
			}
		}
	}
}
