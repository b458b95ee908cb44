package chaos

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
)

// TB lets the chaos runner (a command, not a test) drive cluster-test's
// Cluster, which reports through testing.TB. Fatal ends the run through a
// panic that Run turns back into an error.
type TB struct {
	testing.TB // nil: only the methods below are used
	name       string
	logf       func(string, ...any)

	mu       sync.Mutex
	failed   bool
	cleanups []func()
	dirs     []string
	logs     []string
}

// NewTB returns a TB that logs through logf.
func NewTB(name string, logf func(string, ...any)) *TB { return &TB{name: name, logf: logf} }

type fatal struct{ msg string }

func (t *TB) Helper()      {}
func (t *TB) Name() string { return t.name }
func (t *TB) Log(args ...any) {
	t.logf("%s", fmt.Sprint(args...))
}
func (t *TB) Logf(format string, args ...any) { t.logf(format, args...) }
func (t *TB) Error(args ...any)               { t.fail(); t.Log(args...) }
func (t *TB) Errorf(format string, args ...any) {
	t.fail()
	t.logf(format, args...)
}
func (t *TB) Fatal(args ...any) { t.fail(); panic(fatal{fmt.Sprint(args...)}) }
func (t *TB) Fatalf(format string, args ...any) {
	t.fail()
	panic(fatal{fmt.Sprintf(format, args...)})
}
func (t *TB) fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

// Failed reports whether Error or Fatal was called.
func (t *TB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

// Cleanup registers f to run on Close, last first.
func (t *TB) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

// TempDir returns a new directory removed on Close.
func (t *TB) TempDir() string {
	d, err := os.MkdirTemp("", "cohort-chaos-")
	if err != nil {
		panic(fatal{err.Error()})
	}
	t.mu.Lock()
	t.dirs = append(t.dirs, d)
	t.mu.Unlock()
	return d
}

// Close runs the cleanups and removes the temporary directories.
func (t *TB) Close() {
	t.mu.Lock()
	cs, ds := t.cleanups, t.dirs
	t.cleanups, t.dirs = nil, nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
	for _, d := range ds {
		os.RemoveAll(d)
	}
}

// NodeLogs returns the log files of the nodes of the runs on t.
func NodeLogs(t *TB) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.logs)
}
