package node

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// shardMetrics reports the shards as this node runs them: which it leads
// and coordinates, the groups each holds, and leadership moves made for
// placement.
type shardMetrics struct {
	n        *Node
	moves    *prometheus.CounterVec
	forwards prometheus.Counter
}

var (
	shardCountDesc  = prometheus.NewDesc("cohort_shards", "Shards (Raft groups) that hold the cluster's groups.", nil, nil)
	shardLeaderDesc = prometheus.NewDesc("cohort_shard_leader", "1 when this node leads the shard.", []string{"shard"}, nil)
	shardActiveDesc = prometheus.NewDesc("cohort_shard_active", "1 when this node coordinates the shard's groups (it leads the shard and loaded them).", []string{"shard"}, nil)
	shardGroupsDesc = prometheus.NewDesc("cohort_shard_groups", "Groups in this node's replica of the shard.", []string{"shard"}, nil)
)

func (n *Node) registerShardMetrics() error {
	m := &shardMetrics{n: n, moves: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cohort_shard_moves_total",
		Help: "Shard leadership moves this node started to spread leaders over the nodes, by result (ok, failed).",
	}, []string{"result"}), forwards: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cohort_shard_forwarded_requests_total",
		Help: "Group requests this node forwarded to the leader of a shard it handed over on purpose, for clients still connected to it.",
	})}
	m.moves.WithLabelValues("ok") // exported at zero before the first move
	m.moves.WithLabelValues("failed")
	n.metrics = m
	if n.cfg.MetricsOff {
		return nil
	}
	for _, c := range []prometheus.Collector{m.moves, m.forwards} {
		if err := n.registry.Register(c); err != nil {
			return err
		}
	}
	return n.registry.Register(m)
}

func (m *shardMetrics) moved(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.moves.WithLabelValues("failed").Inc()
		return
	}
	m.moves.WithLabelValues("ok").Inc()
}

func (m *shardMetrics) forwarded() {
	if m != nil {
		m.forwards.Inc()
	}
}

func (m *shardMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- shardCountDesc
	ch <- shardLeaderDesc
	ch <- shardActiveDesc
	ch <- shardGroupsDesc
}

func (m *shardMetrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(shardCountDesc, prometheus.GaugeValue, float64(len(m.n.shards)))
	for _, gs := range m.n.shards {
		id := strconv.Itoa(gs.id)
		ch <- prometheus.MustNewConstMetric(shardLeaderDesc, prometheus.GaugeValue, b2f(gs.rep.IsLeader()), id)
		ch <- prometheus.MustNewConstMetric(shardActiveDesc, prometheus.GaugeValue, b2f(gs.active.Load()), id)
		groups, _ := gs.rep.FSM.Counts()
		ch <- prometheus.MustNewConstMetric(shardGroupsDesc, prometheus.GaugeValue, float64(groups), id)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
