package interop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohort-coord/cohort/internal/testcerts"
	"github.com/cohort-coord/cohort/security"
)

var secureListeningRe = regexp.MustCompile(`msg=listening .*protocol=(\S+) listener=kafka addr=(\S+)`)

// startSecureCohort starts cohortd with SASL_PLAINTEXT and SASL_SSL
// listeners, the authorizer, superuser admin (created from a users file)
// and the given certificate, and returns each listener's address.
func startSecureCohort(t *testing.T, certs testcerts.Files, usersFile string) map[security.Protocol]string {
	t.Helper()
	bin := buildCohortd(t)
	cmd := exec.Command(bin,
		"--listeners", "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
		"--tls-cert-file", certs.Cert, "--tls-key-file", certs.Key, "--tls-links", "kafka",
		"--authorizer", "--super-users", "User:admin", "--scram-users-file", usersFile,
		"--remote-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--http-addr", "",
		"--data-dir", t.TempDir(), "--group-initial-rebalance-delay", "0s", "--group-min-session-timeout", "1s",
		"--log-level", "debug")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 4)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := secureListeningRe.FindStringSubmatch(line); m != nil {
				addrs <- [2]string{m[1], m[2]}
			}
			if strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN") {
				t.Logf("cohortd: %s", line)
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		<-logDone
	})
	out := map[security.Protocol]string{}
	for len(out) < 2 {
		select {
		case a := <-addrs:
			out[security.Protocol(a[0])] = a[1]
		case <-time.After(30 * time.Second):
			t.Fatalf("cohortd logged listeners %v only", out)
		}
	}
	return out
}

// secClient is one client family with the user and mechanism it
// authenticates with.
type secClient struct {
	name, user, mechanism string
	argv                  func(t *testing.T) []string
	env                   []string
}

// deniedMarkers are how the families report GROUP_AUTHORIZATION_FAILED.
var deniedMarkers = []string{"group_authorization_failed", "group authorization failed", "groupauthorizationfailed",
	"not authorized to access group", "not authorized to access this group"}

func refusedGroup(p *proc) bool {
	all := strings.ToLower(strings.Join(p.Logs(), "\n") + p.StderrTail())
	for _, m := range deniedMarkers {
		if strings.Contains(all, m) {
			return true
		}
	}
	return false
}

// TestSecurityRealClients: five client configurations authenticate over
// SASL_PLAINTEXT and SASL_SSL with their own user (SCRAM credentials that
// kadm created), form a group and commit where their ACLs allow (READ on
// their group and the topic), and are refused GROUP_AUTHORIZATION_FAILED
// on a group they have no ACL for, which then has no member and no offset.
func TestSecurityRealClients(t *testing.T) {
	skipShort(t)
	ensureDebian(t, "import confluent_kafka", "python3-confluent-kafka")
	ensureDebian(t, "import kafka", "python3-kafka")
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "cohort test CA")
	certs := ca.Issue(t, testcerts.Options{}).Write(t, dir, "node", ca)
	usersFile := filepath.Join(dir, "users")
	if err := os.WriteFile(usersFile, []byte("admin:admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := startSecureCohort(t, certs, usersFile)

	m, _ := security.ClientMechanism(security.MechanismScramSHA512, "admin", "admin-secret")
	admin, err := kgo.NewClient(kgo.SeedBrokers(addrs[security.SASLPlaintext]), kgo.SASL(m), kgo.ClientID("interop-admin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	const topic = "sec-topic"
	createTopic(t, admin, topic, partitions) // retries until the leader created admin
	adm := kadm.NewClient(admin)
	ctx := context.Background()

	families := []secClient{
		{"kgo-scram", "kgo-scram", security.MechanismScramSHA512, func(t *testing.T) []string { return []string{self(t), "-test.run=^$"} }, []string{"COHORT_INTEROP_CLIENT=franz"}},
		{"kgo-plain", "kgo-plain", security.MechanismPlain, func(t *testing.T) []string { return []string{self(t), "-test.run=^$"} }, []string{"COHORT_INTEROP_CLIENT=franz"}},
		{"librdkafka", "rdkafka", security.MechanismScramSHA256, func(*testing.T) []string { return []string{python, "testdata/confluent_client.py"} }, nil},
		{"kafka-python", "kpython", security.MechanismPlain, func(*testing.T) []string { return []string{python, "testdata/kafka_python_client.py"} }, nil},
		{"sarama", "sarama", security.MechanismScramSHA512, func(t *testing.T) []string { return []string{self(t), "-test.run=^$"} }, []string{"COHORT_INTEROP_CLIENT=sarama"}},
	}
	var ups []kadm.UpsertSCRAM
	acls := kadm.NewACLs().Topics(topic).ResourcePatternType(kadm.ACLPatternLiteral).AllowHosts("*").Operations(kadm.OpRead)
	var principals []string
	for _, f := range families {
		for _, mech := range []kadm.ScramMechanism{kadm.ScramSha256, kadm.ScramSha512} {
			ups = append(ups, kadm.UpsertSCRAM{User: f.user, Mechanism: mech, Iterations: 4096, Password: f.user + "-pw"})
		}
		principals = append(principals, "User:"+f.user)
		// READ on the family's own groups (prefix), nothing on others.
		b := kadm.NewACLs().Groups("sec-" + f.name + "-ok").ResourcePatternType(kadm.ACLPatternPrefixed).
			Allow("User:" + f.user).AllowHosts("*").Operations(kadm.OpRead)
		if res, err := adm.CreateACLs(ctx, b); err != nil || res[0].Err != nil {
			t.Fatalf("acl for %s: %v %+v", f.name, err, res)
		}
	}
	res, err := adm.AlterUserSCRAMs(ctx, nil, ups)
	if err != nil || res.Error() != nil {
		t.Fatalf("users: %v %v", err, res.Error())
	}
	if res, err := adm.CreateACLs(ctx, acls.Allow(principals...)); err != nil || res[0].Err != nil {
		t.Fatalf("topic acl: %v %+v", err, res)
	}

	// A wrong password is refused by the real client too.
	bad, _ := security.ClientMechanism(security.MechanismScramSHA512, "kgo-scram", "wrong")
	badCl, err := kgo.NewClient(kgo.SeedBrokers(addrs[security.SASLPlaintext]), kgo.SASL(bad), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := badCl.Ping(ctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("wrong password: %v", err)
	}
	badCl.Close()

	for _, proto := range []security.Protocol{security.SASLPlaintext, security.SASLSSL} {
		for _, f := range families {
			t.Run(string(proto)+"/"+f.name, func(t *testing.T) {
				env := append([]string{"SECURITY_PROTOCOL=" + string(proto), "SASL_MECHANISM=" + f.mechanism,
					"SASL_USERNAME=" + f.user, "SASL_PASSWORD=" + f.user + "-pw", "SSL_CA_FILE=" + certs.CA}, f.env...)
				start := func(group, id string) *proc {
					return startProc(t, id, f.argv(t), append([]string{
						"BOOTSTRAP=" + addrs[proto], "GROUP=" + group, "TOPIC=" + topic, "CLIENT_ID=" + id,
						"PARTITIONS=" + strconv.Itoa(partitions), "SESSION_MS=" + strconv.Itoa(int(session.Milliseconds())),
						"ASSIGNOR=range",
					}, env...))
				}
				// Allowed: a group of two forms and commits.
				group := fmt.Sprintf("sec-%s-ok-%s", f.name, strings.ToLower(string(proto)))
				procs := []*proc{start(group, f.name+"-0"), start(group, f.name+"-1")}
				waitStable(t, admin, group, topic, procs, 60*time.Second)
				for _, p := range procs {
					p.request("commit 500", "committed_own", 30*time.Second)
				}
				offs := fetchOffsets(t, admin, group, topic)
				for p := range int32(partitions) {
					if offs[p] != 500+int64(p) {
						t.Fatalf("committed offsets %v", offs)
					}
				}
				for _, p := range procs {
					p.closeGracefully(30 * time.Second)
				}
				// Refused: a group without an ACL.
				denied := fmt.Sprintf("sec-%s-denied-%s", f.name, strings.ToLower(string(proto)))
				p := start(denied, f.name+"-denied")
				deadline := time.Now().Add(30 * time.Second)
				for !refusedGroup(p) {
					if time.Now().After(deadline) {
						t.Fatalf("%s: no GROUP_AUTHORIZATION_FAILED reported; logs %v\nstderr %s", f.name, p.Logs(), p.StderrTail())
					}
					time.Sleep(200 * time.Millisecond)
				}
				d, err := describe(ctx, admin, denied, topic)
				if err == nil && len(d.members) != 0 {
					t.Fatalf("refused group has members: %+v", d)
				}
				for part, off := range fetchOffsets(t, admin, denied, topic) {
					if off >= 0 {
						t.Fatalf("refused group has offset %d on %d", off, part)
					}
				}
				p.kill()
			})
		}
	}
}
