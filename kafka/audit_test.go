package kafka

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/cohort-coord/cohort/internal/testlog"
	"github.com/cohort-coord/cohort/security"
)

// unknownMechanism is a SASL mechanism the listener does not offer.
type unknownMechanism struct{}

func (unknownMechanism) Name() string { return "X-CUSTOM" }
func (unknownMechanism) Authenticate(context.Context, string) (sasl.Session, []byte, error) {
	return nil, nil, errors.New("never reached: the handshake refuses the mechanism")
}

// SASL outcomes by mechanism and result, and ACL denials by resource and
// operation, counted and logged, from a real client's requests.
func TestSecurityCountedAndLogged(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs testlog.Buffer
	s, _ := secureServerWith(t, true, slog.New(slog.NewTextHandler(&logs, nil)), reg)
	addr := s.l.Addr().String()
	ctx := context.Background()

	ok := saslClient(t, addr, scram512(aliceUser, alicePass))
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{"payroll"}
	// kgo finds the coordinator first, which needs DESCRIBE on the group.
	if _, err := req.RequestWith(ctx, ok); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("alice describes payroll without an ACL: %v", err)
	}
	// Listings leave out what alice may not see, without a denial.
	if _, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, ok); err != nil {
		t.Fatal(err)
	}
	if _, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, saslClient(t, addr, scram512(aliceUser, "wrong"))); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("wrong password: %v", err)
	}
	if _, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, saslClient(t, addr, plain.Auth{User: "mallory", Pass: "x"}.AsMechanism())); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("unknown user: %v", err)
	}
	if _, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, saslClient(t, addr, unknownMechanism{})); !errors.Is(err, kerr.UnsupportedSaslMechanism) {
		t.Fatalf("unknown mechanism: %v", err)
	}

	a := s.l.audit
	for _, w := range []struct {
		mech, result string
		want         float64
	}{
		{security.MechanismScramSHA512, saslFailed, 1},
		{security.MechanismPlain, saslFailed, 1},
		{"other", saslUnsupported, 1},
	} {
		if got := testutil.ToFloat64(a.sasl.WithLabelValues(w.mech, w.result)); got != w.want {
			t.Errorf("sasl %s %s = %v, want %v", w.mech, w.result, got, w.want)
		}
	}
	// kgo authenticates its seed connection and then one to the broker.
	if got := testutil.ToFloat64(a.sasl.WithLabelValues(security.MechanismScramSHA512, saslSuccess)); got < 1 || got > 2 {
		t.Errorf("sasl SCRAM-SHA-512 success = %v, want 1 or 2 (one per connection)", got)
	}
	if got := testutil.ToFloat64(a.denials.WithLabelValues("group", "describe")); got != 1 {
		t.Errorf("denials group describe = %v, want 1", got)
	}
	// Every resource and operation a denial can name is exported from the
	// start at zero; only the one denial counts (listings count none).
	if got := sumOf(t, a.denials); got != 1 {
		t.Errorf("%v denials in all, want 1 (listings count none)", got)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	out := logs.String()
	for _, want := range []string{
		`msg="authorization denied" listener=kafka principal=User:alice host=127.0.0.1 operation=describe resource=group name=payroll`,
		`msg="SASL authentication failed"`, `mechanism=X-CUSTOM user="" result=unsupported_mechanism`,
		`mechanism=SCRAM-SHA-512 user=alice result=failed`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// sumOf is the sum of every series of c.
func sumOf(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		sum += pb.GetCounter().GetValue()
	}
	return sum
}
