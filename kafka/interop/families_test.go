package interop

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cohort-coord/cohort/kafka/interop/clients"
)

const python = clients.Python

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

// ensureDebian makes sure Debian's python can run check, installing pkg with
// apt-get when it cannot.
func ensureDebian(t *testing.T, check, pkg string) {
	t.Helper()
	skipShort(t)
	if err := clients.EnsureDebian(check, pkg); err != nil {
		need(t, "%v", err)
	}
}

// ensureCommand makes sure the program name is on PATH, installing pkg with
// apt-get when it is not.
func ensureCommand(t *testing.T, name, pkg string) {
	t.Helper()
	skipShort(t)
	if err := clients.EnsureCommand(name, pkg); err != nil {
		need(t, "%v", err)
	}
}

// ensureKafkaJS installs kafkajs into a cache folder (kept between runs)
// and returns the folder holding node_modules.
func ensureKafkaJS(t *testing.T) string {
	t.Helper()
	skipShort(t)
	dir, err := clients.EnsureKafkaJS()
	if err != nil {
		need(t, "%v", err)
	}
	return dir
}

func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("interop tests run without -short")
	}
}
