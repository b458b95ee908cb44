//go:build seededbugs

package main

import (
	"flag"

	"github.com/cohort-coord/cohort/internal/seededbug"
)

// A build with the seededbugs tag (the chaos suite's checker self-test)
// accepts --seeded-bugs; no other build has the flag.
func init() {
	extraFlags = append(extraFlags, func(fs *flag.FlagSet) {
		fs.Func("seeded-bugs", "comma-separated seeded bugs to switch on (test builds only)", seededbug.Enable)
	})
}
