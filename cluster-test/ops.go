package clustertest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// HTTPGet fetches path from n's operator HTTP listener and returns the
// status code and body.
func (n *Node) HTTPGet(path string) (int, []byte, error) {
	if n.HTTPAddr == "" {
		return 0, nil, fmt.Errorf("%s serves no HTTP listener (Options.HTTP)", n.ID)
	}
	cl := http.Client{Timeout: 5 * time.Second}
	res, err := cl.Get("http://" + n.HTTPAddr + path)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// Metrics is one scrape of a node's /metrics.
type Metrics struct {
	Text     []byte
	families map[string]*dto.MetricFamily
}

// Scrape reads n's /metrics.
func (n *Node) Scrape() (*Metrics, error) {
	code, body, err := n.HTTPGet("/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s /metrics: status %d", n.ID, code)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s /metrics: %w", n.ID, err)
	}
	return &Metrics{Text: body, families: fams}, nil
}

// Value returns the value of the series name{labels} ("k=v" pairs); a
// histogram gives its sample count. ok is false when there is no such
// series.
func (m *Metrics) Value(name string, labels ...string) (v float64, ok bool) {
	f := m.families[name]
	if f == nil {
		return 0, false
	}
next:
	for _, s := range f.GetMetric() {
		for _, l := range labels {
			k, want, _ := strings.Cut(l, "=")
			found := false
			for _, lp := range s.GetLabel() {
				if lp.GetName() == k {
					found = lp.GetValue() == want
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case s.Counter != nil:
			return s.GetCounter().GetValue(), true
		case s.Gauge != nil:
			return s.GetGauge().GetValue(), true
		case s.Histogram != nil:
			return float64(s.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// Sum adds every series of name whose labels match.
func (m *Metrics) Sum(name string, labels ...string) float64 {
	f := m.families[name]
	if f == nil {
		return 0
	}
	total := 0.0
	for _, s := range f.GetMetric() {
		one := &Metrics{families: map[string]*dto.MetricFamily{name: {Name: f.Name, Type: f.Type, Metric: []*dto.Metric{s}}}}
		if v, ok := one.Value(name, labels...); ok {
			total += v
		}
	}
	return total
}
