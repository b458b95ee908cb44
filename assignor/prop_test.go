package assignor

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// A small property-check driver for the property tests: checkProp runs a
// property over propChecks cases, each drawing its input from a generator
// seeded with its own seed. A failing case is reported with its seed and the
// values it drew; -prop.seed replays that case alone. Unlike a shrinking
// library it reports the failing case as drawn, not a minimal one.
var (
	propChecks = flag.Int("prop.checks", 100, "cases per property test")
	propSeed   = flag.Uint64("prop.seed", 0, "run only the case with this seed (0: random seeds)")
)

// propT is one case of a property: the test plus its generator and a log
// of what the case drew.
type propT struct {
	*testing.T
	r     *rand.Rand
	drawn []string
}

func checkProp(t *testing.T, prop func(*propT)) {
	t.Helper()
	seeds := []uint64{*propSeed}
	if *propSeed == 0 {
		base := uint64(time.Now().UnixNano())
		seeds = seeds[:0]
		for i := range *propChecks {
			seeds = append(seeds, (base+uint64(i)*0x9e3779b97f4a7c15)|1) // never 0

		}
	}
	for _, seed := range seeds {
		pt := &propT{T: t, r: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))}
		func() {
			// A fatal failure ends the test's goroutine: report the case
			// on the way out.
			defer func() {
				if t.Failed() {
					t.Logf("failing case: -prop.seed=%d; drew %s", seed, strings.Join(pt.drawn, ", "))
				}
			}()
			prop(pt)
		}()
		if t.Failed() {
			return
		}
	}
}

func (t *propT) draw(label string, v any) {
	t.drawn = append(t.drawn, fmt.Sprintf("%s=%v", label, v))
}

// drawInt draws an int in [lo, hi].
func drawInt(t *propT, lo, hi int, label string) int {
	v := lo + t.r.IntN(hi-lo+1)
	t.draw(label, v)
	return v
}

func drawBool(t *propT, label string) bool {
	v := t.r.IntN(2) == 1
	t.draw(label, v)
	return v
}

// drawFrom draws one of xs.
func drawFrom[E any](t *propT, xs []E, label string) E {
	v := xs[t.r.IntN(len(xs))]
	t.draw(label, v)
	return v
}

// drawPermutation draws a reordering of xs (a new slice).
func drawPermutation[E any](t *propT, xs []E, label string) []E {
	perm := t.r.Perm(len(xs))
	out := make([]E, len(xs))
	for i, j := range perm {
		out[i] = xs[j]
	}
	t.draw(label, perm)
	return out
}
