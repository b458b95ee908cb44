package interop

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

const (
	python       = "/usr/bin/python3" // Debian's, where python3-* packages install
	kafkajsVer   = "2.2.4"
	aptUpdateEnv = "DEBIAN_FRONTEND=noninteractive"
)

func self(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func TestFranzGoRangeEager(t *testing.T) {
	runFamily(t, family{
		name:     "franz-range",
		assignor: "range",
		argv:     func(t *testing.T) []string { return []string{self(t), "-test.run=^$"} },
		env:      []string{"COHORT_INTEROP_CLIENT=franz"},
	})
}

func TestFranzGoCooperativeSticky(t *testing.T) {
	runFamily(t, family{
		name:     "franz-coop",
		assignor: "cooperative-sticky",
		argv:     func(t *testing.T) []string { return []string{self(t), "-test.run=^$"} },
		env:      []string{"COHORT_INTEROP_CLIENT=franz"},
	})
}

func TestSarama(t *testing.T) {
	runFamily(t, family{
		name:     "sarama",
		assignor: "range",
		argv:     func(t *testing.T) []string { return []string{self(t), "-test.run=^$"} },
		env:      []string{"COHORT_INTEROP_CLIENT=sarama"},
	})
	for _, v := range lastVersions("sarama") {
		if v > 3 {
			t.Fatalf("sarama used JoinGroup v%d, configured for v3 or lower", v)
		}
	}
}

func TestLibrdkafkaCooperativeStatic(t *testing.T) {
	ensureDebian(t, "import confluent_kafka", "python3-confluent-kafka")
	runFamily(t, family{
		name:     "librdkafka",
		assignor: "cooperative-sticky",
		static:   true,
		argv:     func(t *testing.T) []string { return []string{python, "testdata/confluent_client.py"} },
	})
	for _, v := range lastVersions("librdkafka") {
		if v < 5 {
			t.Fatalf("static member used JoinGroup v%d; group.instance.id needs v5+", v)
		}
	}
}

func TestKafkaPython(t *testing.T) {
	ensureDebian(t, "import kafka", "python3-kafka")
	runFamily(t, family{
		name:     "kafka-python",
		assignor: "range",
		argv:     func(t *testing.T) []string { return []string{python, "testdata/kafka_python_client.py"} },
	})
}

func TestKafkaJS(t *testing.T) {
	dir := ensureKafkaJS(t)
	runFamily(t, family{
		name:     "kafkajs",
		assignor: "range",
		argv:     func(t *testing.T) []string { return []string{"node", "testdata/kafkajs_client.js"} },
		env:      []string{"NODE_PATH=" + filepath.Join(dir, "node_modules")},
	})
}

var aptMu sync.Mutex

// ensureDebian makes sure Debian's python can run check, installing pkg with
// apt-get when it cannot.
func ensureDebian(t *testing.T, check, pkg string) {
	t.Helper()
	ensureWith(t, pkg, func() error { return exec.Command(python, "-c", check).Run() })
}

// ensureCommand makes sure the program name is on PATH, installing pkg with
// apt-get when it is not.
func ensureCommand(t *testing.T, name, pkg string) {
	t.Helper()
	ensureWith(t, pkg, func() error { _, err := exec.LookPath(name); return err })
}

// ensureWith installs pkg with apt-get when ok fails.
func ensureWith(t *testing.T, pkg string, ok func() error) {
	t.Helper()
	if testing.Short() {
		t.Skip("interop tests run without -short")
	}
	aptMu.Lock()
	defer aptMu.Unlock()
	if ok() == nil {
		return
	}
	install := exec.Command("apt-get", "install", "-y", "-q", pkg)
	install.Env = append(os.Environ(), aptUpdateEnv)
	if out, err := install.CombinedOutput(); err != nil {
		update := exec.Command("apt-get", "update", "-q")
		update.Env = install.Env
		update.Run()
		install = exec.Command("apt-get", "install", "-y", "-q", pkg)
		install.Env = append(os.Environ(), aptUpdateEnv)
		if out2, err := install.CombinedOutput(); err != nil {
			need(t, "apt-get install %s failed: %v\n%s\n%s", pkg, err, out, out2)
		}
	}
	if err := ok(); err != nil {
		need(t, "%s installed but still missing: %v", pkg, err)
	}
}

// ensureKafkaJS installs kafkajs into a git-ignored node_modules beside this
// package (kept between runs) and returns the folder holding node_modules.
func ensureKafkaJS(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("interop tests run without -short")
	}
	if _, err := exec.LookPath("node"); err != nil {
		install := exec.Command("apt-get", "install", "-y", "-q", "nodejs", "npm")
		install.Env = append(os.Environ(), aptUpdateEnv)
		if out, err := install.CombinedOutput(); err != nil {
			need(t, "node is missing and apt-get install nodejs npm failed: %v\n%s", err, out)
		}
	}
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(dir, "node_modules", "kafkajs", "package.json")
	if installedVersion(pkg) == kafkajsVer {
		return dir
	}
	npm := exec.Command("npm", "install", "--no-save", "--no-package-lock", "--no-audit", "--no-fund", "--prefix", dir, "kafkajs@"+kafkajsVer)
	if out, err := npm.CombinedOutput(); err != nil {
		need(t, "npm install kafkajs@%s failed: %v\n%s", kafkajsVer, err, out)
	}
	if v := installedVersion(pkg); v != kafkajsVer {
		need(t, "kafkajs %q installed, want %s", v, kafkajsVer)
	}
	return dir
}

func installedVersion(packageJSON string) string {
	b, err := os.ReadFile(packageJSON)
	if err != nil {
		return ""
	}
	var p struct{ Version string }
	if json.Unmarshal(b, &p) != nil {
		return ""
	}
	return p.Version
}
