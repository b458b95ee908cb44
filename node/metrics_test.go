package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/cohort-coord/cohort/internal/buildinfo"
	"github.com/cohort-coord/cohort/security"
)

// scrape reads a node's /metrics, checks it with promtool and parses it.
func scrape(t *testing.T, n *Node) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", res.StatusCode, err)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed (make deps installs Debian's prometheus package)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value is the value of the series of name with these labels ("k=v"),
// 0 when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
next:
	for _, m := range fams[name].GetMetric() {
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			found := false
			for _, lp := range m.GetLabel() {
				found = found || (lp.GetName() == k && lp.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		return m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return 0
}

type unknownMechanism struct{}

func (unknownMechanism) Name() string { return "X-CUSTOM" }
func (unknownMechanism) Authenticate(context.Context, string) (sasl.Session, []byte, error) {
	return nil, nil, errors.New("the handshake refuses the mechanism first")
}

func saslClient(t *testing.T, addr string, m sasl.Mechanism) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(m), kgo.RequestRetries(0), kgo.RetryTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// /metrics of a node with SASL and ACLs counts, from real clients, a wrong
// password, an unknown mechanism and an ACL denial, has cohort_build_info,
// and passes promtool.
func TestSecurityAndBuildMetrics(t *testing.T) {
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte("admin:admin-pw\nalice:alice-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, false, func(c *Config) {
		c.HTTPAddr = "127.0.0.1:0"
		c.Security = SecurityConfig{
			Listeners:  []security.Listener{{Protocol: security.SASLPlaintext, Addr: "127.0.0.1:0"}},
			Authorizer: true, SuperUsers: []security.Principal{security.User("admin")}, ScramUsersFile: users,
		}
	})
	addr, ctx := n.KafkaAddr(), context.Background()
	alice := scram.Auth{User: "alice", Pass: "alice-pw"}.AsSha512Mechanism()
	// The leader creates the users from the file once it leads.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, saslClient(t, addr, alice))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice never authenticated: %v", err)
		}
	}
	before := scrape(t, n)
	const sasl, denials = "cohort_kafka_sasl_authentications_total", "cohort_kafka_authorization_denials_total"

	wrong := scram.Auth{User: "alice", Pass: "wrong"}.AsSha512Mechanism()
	if _, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, saslClient(t, addr, wrong)); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("wrong password: %v", err)
	}
	if _, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, saslClient(t, addr, unknownMechanism{})); !errors.Is(err, kerr.UnsupportedSaslMechanism) {
		t.Fatalf("unknown mechanism: %v", err)
	}
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{"payroll"}
	if _, err := req.RequestWith(ctx, saslClient(t, addr, alice)); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("alice describes payroll without an ACL: %v", err)
	}

	after := scrape(t, n)
	for _, c := range []struct {
		name   string
		labels []string
		delta  float64
	}{
		{sasl, []string{"mechanism=SCRAM-SHA-512", "result=failed"}, 1},
		{sasl, []string{"mechanism=other", "result=unsupported_mechanism"}, 1},
		{denials, []string{"resource=group", "operation=describe"}, 1},
	} {
		if d := value(after, c.name, c.labels...) - value(before, c.name, c.labels...); d != c.delta {
			t.Errorf("%s%v went up by %v, want %v", c.name, c.labels, d, c.delta)
		}
	}
	if v := value(after, sasl, "mechanism=SCRAM-SHA-512", "result=success"); v < 2 {
		t.Errorf("SCRAM-SHA-512 successes %v, want at least alice's two", v)
	}
	bi := buildinfo.Read()
	if v := value(after, "cohort_build_info", "version="+bi.Version, "revision="+bi.Revision, "goversion="+bi.GoVersion); v != 1 {
		t.Errorf("cohort_build_info{%+v} = %v, want 1", bi, v)
	}
}

// has reports whether name has a series with these labels ("k=v").
func has(fams map[string]*dto.MetricFamily, name string, labels ...string) bool {
next:
	for _, m := range fams[name].GetMetric() {
		for _, l := range labels {
			k, v, _ := strings.Cut(l, "=")
			found := false
			for _, lp := range m.GetLabel() {
				found = found || (lp.GetName() == k && lp.GetValue() == v)
			}
			if !found {
				continue next
			}
		}
		return true
	}
	return false
}

// The counters docs/observability.md documents are exported at zero on a
// node that has seen none of their events, so that rate() and absent()
// alerts work from the start.
func TestCountersExportedAtZero(t *testing.T) {
	n := startNode(t, false, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	fams := scrape(t, n)
	for _, c := range []struct {
		name   string
		labels []string
	}{
		{"cohort_shard_moves_total", []string{"result=ok"}},
		{"cohort_shard_moves_total", []string{"result=failed"}},
		{"cohort_kafka_sasl_authentications_total", []string{"mechanism=PLAIN", "result=success"}},
		{"cohort_kafka_sasl_authentications_total", []string{"mechanism=SCRAM-SHA-512", "result=failed"}},
		{"cohort_kafka_sasl_authentications_total", []string{"mechanism=SCRAM-SHA-256", "result=unsupported_mechanism"}},
		{"cohort_kafka_authorization_denials_total", []string{"resource=group", "operation=read"}},
		{"cohort_kafka_authorization_denials_total", []string{"resource=topic", "operation=describe"}},
		{"cohort_kafka_authorization_denials_total", []string{"resource=cluster", "operation=alter"}},
	} {
		if !has(fams, c.name, c.labels...) || value(fams, c.name, c.labels...) != 0 {
			t.Errorf("%s%v: not exported at zero", c.name, c.labels)
		}
	}
}
