package kafka

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metrics are the listener's Prometheus series. Requests are counted when
// their answer is written, labelled with the API and the answer's error
// code; the counter of each (API, code) pair is resolved once.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	apis     [maxAPIKey + 1]apiMetrics
}

const maxAPIKey = 80

type apiMetrics struct {
	name    string
	latency prometheus.Observer
	// The counter of each error code, resolved on first use: codes -1 to
	// 126 in an array (no hashing on the hot path), any other in the map.
	common [128]atomic.Pointer[counter]
	codes  sync.Map // int16 -> *counter
}

type counter struct{ prometheus.Counter }

func newMetrics(reg prometheus.Registerer, l *Listener) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cohort_kafka_requests_total",
			Help: "Kafka requests answered, by API and the answer's error code (NONE for success).",
		}, []string{"api", "error"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cohort_kafka_request_duration_seconds",
			Help:    "Time from a Kafka request's dispatch to its answer being written, by API.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"api"}),
	}
	for k := range l.apis {
		if k >= 0 && int(k) <= maxAPIKey {
			m.apis[k].name = kmsg.NameForKey(k)
			m.apis[k].latency = m.latency.WithLabelValues(m.apis[k].name)
		}
	}
	reg.MustRegister(m.requests, m.latency, &connCollector{l: l})
	return m
}

// observe counts one answer; start is when its request was dispatched.
func (m *metrics) observe(key int16, resp kmsg.Response, start time.Time) {
	if m == nil || key < 0 || int(key) > maxAPIKey {
		return
	}
	a := &m.apis[key]
	if a.latency == nil {
		return // not an API the listener serves
	}
	a.latency.Observe(time.Since(start).Seconds())
	code := errorCodeOf(resp)
	if i := int(code) + 1; i >= 0 && i < len(a.common) {
		c := a.common[i].Load()
		if c == nil {
			c = m.counterFor(a, code)
			a.common[i].Store(c)
		}
		c.Inc()
		return
	}
	c, ok := a.codes.Load(code)
	if !ok {
		c, _ = a.codes.LoadOrStore(code, m.counterFor(a, code))
	}
	c.(*counter).Inc()
}

// counterFor resolves the counter of one API and error code; racing
// resolutions get the same series.
func (m *metrics) counterFor(a *apiMetrics, code int16) *counter {
	name := "NONE"
	if code != 0 {
		name = "UNKNOWN"
		if e, ok := kerr.ErrorForCode(code).(*kerr.Error); ok {
			name = e.Message
		}
	}
	return &counter{m.requests.WithLabelValues(a.name, name)}
}

// errorCodeOf returns the error code that speaks for a whole answer: its
// top-level code, or that of its first group, topic or partition.
func errorCodeOf(resp kmsg.Response) int16 {
	switch r := resp.(type) {
	case *kmsg.HeartbeatResponse:
		return r.ErrorCode
	case *kmsg.JoinGroupResponse:
		return r.ErrorCode
	case *kmsg.SyncGroupResponse:
		return r.ErrorCode
	case *kmsg.LeaveGroupResponse:
		return r.ErrorCode
	case *kmsg.OffsetCommitResponse:
		if len(r.Topics) > 0 && len(r.Topics[0].Partitions) > 0 {
			return r.Topics[0].Partitions[0].ErrorCode
		}
	case *kmsg.OffsetFetchResponse:
		if len(r.Groups) > 0 {
			return r.Groups[0].ErrorCode
		}
		return r.ErrorCode
	case *kmsg.FindCoordinatorResponse:
		if len(r.Coordinators) > 0 {
			return r.Coordinators[0].ErrorCode
		}
		return r.ErrorCode
	case *kmsg.DescribeGroupsResponse:
		if len(r.Groups) > 0 {
			return r.Groups[0].ErrorCode
		}
	case *kmsg.ListGroupsResponse:
		return r.ErrorCode
	case *kmsg.DeleteGroupsResponse:
		if len(r.Groups) > 0 {
			return r.Groups[0].ErrorCode
		}
	case *kmsg.OffsetDeleteResponse:
		return r.ErrorCode
	case *kmsg.ApiVersionsResponse:
		return r.ErrorCode
	case *kmsg.CreateTopicsResponse:
		if len(r.Topics) > 0 {
			return r.Topics[0].ErrorCode
		}
	case *kmsg.DeleteTopicsResponse:
		if len(r.Topics) > 0 {
			return r.Topics[0].ErrorCode
		}
	case *kmsg.FetchResponse:
		return r.ErrorCode
	}
	return 0
}

// connCollector reports the connection counters the listener keeps anyway.
type connCollector struct{ l *Listener }

var (
	connsOpenDesc     = prometheus.NewDesc("cohort_kafka_connections", "Open Kafka connections.", nil, nil)
	connsAcceptedDesc = prometheus.NewDesc("cohort_kafka_connections_accepted_total", "Kafka connections accepted.", nil, nil)
	connsBadDesc      = prometheus.NewDesc("cohort_kafka_connections_closed_bad_input_total", "Kafka connections closed on bad input (malformed or oversized frames, unknown API keys).", nil, nil)
	callErrorsDesc    = prometheus.NewDesc("cohort_kafka_group_call_errors_total", "Group calls from the Kafka listener that failed and were answered with a retriable error code.", nil, nil)
)

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- connsOpenDesc
	ch <- connsAcceptedDesc
	ch <- connsBadDesc
	ch <- callErrorsDesc
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.l.Stats()
	ch <- prometheus.MustNewConstMetric(connsOpenDesc, prometheus.GaugeValue, float64(s.Open))
	ch <- prometheus.MustNewConstMetric(connsAcceptedDesc, prometheus.CounterValue, float64(s.Accepted))
	ch <- prometheus.MustNewConstMetric(connsBadDesc, prometheus.CounterValue, float64(s.BadConnections))
	ch <- prometheus.MustNewConstMetric(callErrorsDesc, prometheus.CounterValue, float64(s.CallErrors))
}
