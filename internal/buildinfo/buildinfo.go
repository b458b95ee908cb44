// Package buildinfo says which build a binary is: its module version and the
// version-control revision it was built from, read from the binary itself
// (runtime/debug.ReadBuildInfo). The commands print it for --version and the
// node exports it as cohort_build_info.
package buildinfo

import (
	"errors"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info identifies a build.
type Info struct {
	// Version is the main module's version: a tag, a pseudo-version derived
	// from the commit, or "(devel)" when the build had neither.
	Version string
	// Revision is the commit the binary was built from, with "-dirty"
	// when the tree had changes; "unknown" without VCS information (go test,
	// go run outside a checkout).
	Revision string
	// GoVersion is the toolchain that built it.
	GoVersion string
}

// Read returns this binary's build.
func Read() Info {
	info := Info{Version: "(devel)", Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	if v := bi.Main.Version; v != "" {
		info.Version = v
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && info.Revision != "unknown" {
		info.Revision += "-dirty"
	}
	return info
}

// String is the --version line of the command name.
func (i Info) String(name string) string {
	return fmt.Sprintf("%s %s (revision %s, %s)", name, i.Version, i.Revision, i.GoVersion)
}

// ErrVersion is what a command's flag parsing returns when --version was
// given: the caller prints the version and exits 0.
var ErrVersion = errors.New("version requested")

// Flag registers --version on fs.
func Flag(fs *flag.FlagSet) *bool {
	return fs.Bool("version", false, "print the build's version, revision and Go version, and exit")
}
