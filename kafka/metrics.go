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
	latency  *latencyCollector
	apis     [maxAPIKey + 1]apiMetrics
}

const maxAPIKey = 80

type apiMetrics struct {
	name    string
	latency *latencyHistogram
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
		latency: &latencyCollector{desc: prometheus.NewDesc("cohort_kafka_request_duration_seconds",
			"Time from a Kafka request's arrival (the read that brought it) to its answer being written, by API.",
			[]string{"api"}, nil)},
	}
	for k := range l.apis {
		if k >= 0 && int(k) <= maxAPIKey {
			m.apis[k].name = kmsg.NameForKey(k)
			m.apis[k].latency = &latencyHistogram{api: m.apis[k].name}
			m.latency.apis = append(m.latency.apis, m.apis[k].latency)
		}
	}
	reg.MustRegister(m.requests, m.latency, &connCollector{l: l})
	return m
}

// observe counts one answer written now; start is when its request
// arrived, shard the connection's latency shard.
func (m *metrics) observe(key int16, resp kmsg.Response, start time.Time, shard uint32) {
	if m == nil {
		return
	}
	m.record(key, errorCodeOf(resp), time.Since(start), shard)
}

// record counts one answer of API key with error code, d after its request
// arrived.
func (m *metrics) record(key, code int16, d time.Duration, shard uint32) {
	if m == nil || key < 0 || int(key) > maxAPIKey {
		return
	}
	a := &m.apis[key]
	if a.latency == nil {
		return // not an API the listener serves
	}
	a.latency.observe(d, shard)
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
	case *kmsg.CreatePartitionsResponse:
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

// latencyBounds are the request duration histogram's upper bounds.
var latencyBounds = [...]time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 30 * time.Second,
}

// latencyShards spreads each API's histogram over this many copies. Every
// answer updates its API's histogram, from the reader or writer goroutine
// of its connection: with one copy (Prometheus's histogram), the cores
// serving different connections took turns owning the same cache lines on
// every answer. A connection writes to its own shard; a scrape adds the
// shards up.
const latencyShards = 8

// latencyHistogram is one API's request duration histogram.
type latencyHistogram struct {
	api    string
	shards [latencyShards]latencyShard
}

// latencyShard is one copy of a histogram, padded to whole cache lines so
// that neighbouring shards share at most the line where they meet.
type latencyShard struct {
	counts [len(latencyBounds) + 1]atomic.Uint64 // the last: above every bound
	sum    atomic.Int64                          // nanoseconds
	_      [64 - (len(latencyBounds)+2)*8%64]byte
}

func (h *latencyHistogram) observe(d time.Duration, shard uint32) {
	s := &h.shards[shard%latencyShards]
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	s.counts[i].Add(1)
	s.sum.Add(int64(d))
}

// snapshot returns the cumulative count at every bound, the count and the
// sum in seconds. The count is the buckets' total, so a scrape during
// answers never shows more samples in the buckets than in the count.
func (h *latencyHistogram) snapshot() (map[float64]uint64, uint64, float64) {
	var counts [len(latencyBounds) + 1]uint64
	var sum int64
	for i := range h.shards {
		s := &h.shards[i]
		for j := range counts {
			counts[j] += s.counts[j].Load()
		}
		sum += s.sum.Load()
	}
	buckets := make(map[float64]uint64, len(latencyBounds))
	var total uint64
	for j, b := range latencyBounds {
		total += counts[j]
		buckets[b.Seconds()] = total
	}
	total += counts[len(latencyBounds)]
	return buckets, total, time.Duration(sum).Seconds()
}

// latencyCollector reports the histograms of every API the listener
// serves, labelled by API.
type latencyCollector struct {
	desc *prometheus.Desc
	apis []*latencyHistogram
}

func (c *latencyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *latencyCollector) Collect(ch chan<- prometheus.Metric) {
	for _, h := range c.apis {
		buckets, count, sum := h.snapshot()
		ch <- prometheus.MustNewConstHistogram(c.desc, count, sum, buckets, h.api)
	}
}
