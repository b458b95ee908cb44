package kafka

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/coordinator"
	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Answers are counted by API and error code, with their latency, and the
// series pass the Prometheus lint. (Inline heartbeats, answered on the
// reader, are counted in the cluster tests, whose service answers them so.)
func TestMetricsCountAnswersByCode(t *testing.T) {
	reg := prometheus.NewRegistry()
	fg := &fakeGroups{fn: func(_ context.Context, req proto.Message) (proto.Message, error) {
		if hb, ok := req.(*grouppb.HeartbeatRequest); ok && hb.GetMemberId() == "gone" {
			return &grouppb.HeartbeatResponse{ErrorCode: coordinator.ErrUnknownMemberID}, nil
		}
		return emptyAnswer(req), nil
	}}
	s := startServer(t, fg, func(c *Config) { c.Metrics = reg })
	c := dial(t, s.l.Addr())
	hb := func(member string) *kmsg.HeartbeatRequest {
		r := kmsg.NewPtrHeartbeatRequest()
		r.SetVersion(4)
		r.Group, r.Generation, r.MemberID = "g", 1, member
		return r
	}
	for range 3 {
		c.do(hb("m1"))
	}
	c.do(hb("gone"))
	lg := kmsg.NewPtrListGroupsRequest()
	lg.SetVersion(3)
	c.do(lg)
	m := s.l.metrics
	for _, w := range []struct {
		api, code string
		want      float64
	}{{"Heartbeat", "NONE", 3}, {"Heartbeat", "UNKNOWN_MEMBER_ID", 1}, {"ListGroups", "NONE", 1}} {
		if got := testutil.ToFloat64(m.requests.WithLabelValues(w.api, w.code)); got != w.want {
			t.Errorf("%s %s: %v, want %v", w.api, w.code, got, w.want)
		}
	}
	// Every served API has its latency series from the start.
	if n := testutil.CollectAndCount(m.latency); n != len(s.l.apis) {
		t.Errorf("%d latency series, want %d", n, len(s.l.apis))
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	for _, f := range fams {
		if f.GetName() == "cohort_kafka_request_duration_seconds" {
			for _, m := range f.GetMetric() {
				counts[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	if counts["Heartbeat"] != 4 || counts["ListGroups"] != 1 || counts["JoinGroup"] != 0 {
		t.Errorf("latency samples %v", counts)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
