package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var (
	buildMu  sync.Mutex
	binDir   string
	binaries = map[string]string{}
)

// Binary builds the command in pkg (a path below the cohort module root,
// such as "./cmd/cohortd") once per process and returns the path of the
// executable.
func Binary(pkg string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := binaries[pkg]; ok {
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if binDir == "" {
		if binDir, err = os.MkdirTemp("", "cohort-cluster-test-"); err != nil {
			return "", err
		}
	}
	out := filepath.Join(binDir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	binaries[pkg] = out
	return out, nil
}

// RemoveBinaries deletes what Binary built; call it from TestMain.
func RemoveBinaries() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if binDir != "" {
		os.RemoveAll(binDir)
		binDir = ""
		binaries = map[string]string{}
	}
}

// moduleRoot is the folder of the cohort module, where Binary builds with
// cohort's own go.mod, also when the tests run in a module that requires
// cohort and replaces it with that folder.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cohort-coord/cohort").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/cohort-coord/cohort: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("the cohort module has no folder here")
	}
	return dir, nil
}
