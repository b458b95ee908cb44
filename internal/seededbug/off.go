//go:build !seededbugs

package seededbug

// On reports whether the named bug is switched on: never in this build.
func On(string) bool { return false }

// Enabled reports whether this build can switch bugs on.
const Enabled = false
