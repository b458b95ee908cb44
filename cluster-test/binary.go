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

// Binary builds the command in pkg (a path below the module root, such as
// "./cmd/cohortd") once per process and returns the path of the executable.
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

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module")
	}
	return filepath.Dir(mod), nil
}
