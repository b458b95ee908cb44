package clustertest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// cohortctl's Kafka conventions and offset commands against franz-go's
// kfake as well as cohort. The tests are cmd/cohortctl's own, built in the
// cohort module (which does not require kfake); each runs its "reference"
// subtest in a process of its own against a fresh kfake broker started here.
func TestCohortctlAgainstKfake(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "cohortctl.test")
	build := exec.Command("go", "test", "-c", "-o", bin, "./cmd/cohortctl")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c ./cmd/cohortctl: %v\n%s", err, out)
	}
	for _, test := range []string{"TestKafkaConventions", "TestOffsetResetAndDelete"} {
		t.Run(test, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cmd := exec.Command(bin, "-test.run", "^"+test+"$/^reference$", "-test.count", "1", "-test.v", "-test.timeout", "5m")
			cmd.Dir = filepath.Join(root, "cmd", "cohortctl")
			cmd.Env = append(os.Environ(), "COHORT_CTL_REFERENCE_BROKER="+c.ListenAddrs()[0])
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s against kfake: %v\n%s", test, err, out)
			}
			if !strings.Contains(string(out), "--- PASS: "+test+"/reference") {
				t.Fatalf("%s ran no reference subtest:\n%s", test, out)
			}
		})
	}
}
