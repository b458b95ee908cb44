//go:build seededbugs

package seededbug

import (
	"fmt"
	"slices"
	"strings"
)

var active = map[string]bool{}

// Enabled reports whether this build can switch bugs on.
const Enabled = true

// On reports whether the named bug is switched on.
func On(name string) bool { return active[name] }

// Enable switches on the bugs named in a comma-separated list. It is called
// once, while flags are parsed, before anything reads On.
func Enable(list string) error {
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if !slices.Contains(Names, n) {
			return fmt.Errorf("unknown seeded bug %q (known: %s)", n, strings.Join(Names, ", "))
		}
		active[n] = true
	}
	return nil
}
