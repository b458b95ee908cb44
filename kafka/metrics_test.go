package kafka

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
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

// The sharded latency histogram reports what Prometheus's own histogram
// with the same bounds reports for the same durations, whichever shards
// they went to.
func TestLatencyHistogramMatchesPrometheus(t *testing.T) {
	bounds := make([]float64, len(latencyBounds))
	for i, b := range latencyBounds {
		bounds[i] = b.Seconds()
	}
	want := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h", Help: "h", Buckets: bounds})
	h := &latencyHistogram{api: "Heartbeat"}
	durations := []time.Duration{0, time.Nanosecond, 100 * time.Microsecond, 100*time.Microsecond + 1,
		3 * time.Millisecond, time.Second, 30 * time.Second, 31 * time.Second, time.Hour}
	for i, d := range durations {
		want.Observe(d.Seconds())
		h.observe(d, uint32(i*3))
	}
	var w dto.Metric
	if err := want.Write(&w); err != nil {
		t.Fatal(err)
	}
	c := &latencyCollector{desc: prometheus.NewDesc("h", "h", []string{"api"}, nil), apis: []*latencyHistogram{h}}
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var g dto.Metric
	if err := (<-ch).Write(&g); err != nil {
		t.Fatal(err)
	}
	wh, gh := w.GetHistogram(), g.GetHistogram()
	if wh.GetSampleCount() != gh.GetSampleCount() || math.Abs(wh.GetSampleSum()-gh.GetSampleSum()) > 1e-6 {
		t.Fatalf("count/sum %d/%v, want %d/%v", gh.GetSampleCount(), gh.GetSampleSum(), wh.GetSampleCount(), wh.GetSampleSum())
	}
	if len(wh.GetBucket()) != len(gh.GetBucket()) {
		t.Fatalf("%d buckets, want %d", len(gh.GetBucket()), len(wh.GetBucket()))
	}
	for i, b := range wh.GetBucket() {
		if gb := gh.GetBucket()[i]; gb.GetUpperBound() != b.GetUpperBound() || gb.GetCumulativeCount() != b.GetCumulativeCount() {
			t.Errorf("bucket %d: le %v count %d, want le %v count %d", i, gb.GetUpperBound(), gb.GetCumulativeCount(), b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
	if l := g.GetLabel(); len(l) != 1 || l[0].GetValue() != "Heartbeat" {
		t.Errorf("labels %v", l)
	}
}
