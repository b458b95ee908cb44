package raftfsm

import (
	"sync"
	"time"

	gometrics "github.com/armon/go-metrics"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics registers the node's Raft metrics with reg: state, term
// and indexes read at scrape time, the stored groups and offsets, and the
// timings hashicorp/raft and raft-boltdb report through go-metrics (commit,
// FSM apply, snapshot, log store with its fsync), bridged rather than
// measured again. go-metrics is process-wide: the first call installs the
// process's go-metrics sink, and with several nodes in one process (tests)
// each sees the timings of all.
func (n *Node) RegisterMetrics(reg prometheus.Registerer) error {
	b := newBridge()
	for _, c := range []prometheus.Collector{&raftCollector{n: n}, b.commit, b.apply, b.snapshot, b.snapshots, b.store} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	if l := n.shardLog; l != nil {
		for _, c := range []prometheus.Collector{
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cohort_raft_shared_log_transactions_total", Help: "Transactions the shards' shared Raft log committed (each with its fsyncs)."},
				func() float64 { return float64(l.commits.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "cohort_raft_shared_log_writes_total", Help: "Shard log writes (appends, truncations, term and vote updates) those transactions carried."},
				func() float64 { return float64(l.writes.Load()) }),
		} {
			if err := reg.Register(c); err != nil {
				return err
			}
		}
	}
	sinks.add(b)
	n.unregister = append(n.unregister, func() { sinks.remove(b) })
	return nil
}

var (
	raftStateDesc = prometheus.NewDesc("cohort_raft_state", "1 for the Raft state this node is in (Follower, Candidate, Leader, Shutdown), 0 for the others.", []string{"state"}, nil)
	raftTermDesc  = prometheus.NewDesc("cohort_raft_term", "Current Raft term.", nil, nil)
	commitDesc    = prometheus.NewDesc("cohort_raft_commit_index", "Index of the last committed Raft log entry.", nil, nil)
	appliedDesc   = prometheus.NewDesc("cohort_raft_applied_index", "Index of the last Raft log entry applied to the FSM.", nil, nil)
	snapIndexDesc = prometheus.NewDesc("cohort_raft_last_snapshot_index", "Index of the last Raft snapshot.", nil, nil)
	leaderDesc    = prometheus.NewDesc("cohort_raft_leader_known", "1 when this node knows a Raft leader.", nil, nil)
	groupsDesc    = prometheus.NewDesc("cohort_stored_groups", "Groups in the replicated state (with a record or committed offsets).", nil, nil)
	offsetsDesc   = prometheus.NewDesc("cohort_stored_offsets", "Committed offsets in the replicated state.", nil, nil)
)

type raftCollector struct{ n *Node }

func (c *raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{raftStateDesc, raftTermDesc, commitDesc, appliedDesc, snapIndexDesc, leaderDesc, groupsDesc, offsetsDesc} {
		ch <- d
	}
}

func (c *raftCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.Status()
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		v := 0.0
		if s.String() == st.State {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(raftStateDesc, prometheus.GaugeValue, v, s.String())
	}
	ch <- prometheus.MustNewConstMetric(raftTermDesc, prometheus.GaugeValue, float64(st.Term))
	ch <- prometheus.MustNewConstMetric(commitDesc, prometheus.GaugeValue, float64(st.CommitIndex))
	ch <- prometheus.MustNewConstMetric(appliedDesc, prometheus.GaugeValue, float64(st.AppliedIndex))
	ch <- prometheus.MustNewConstMetric(snapIndexDesc, prometheus.GaugeValue, float64(st.LastSnapshotIndex))
	known := 0.0
	if c.n.LeaderID() != "" {
		known = 1
	}
	ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, known)
	groups, offsets := c.n.FSM.Counts()
	ch <- prometheus.MustNewConstMetric(groupsDesc, prometheus.GaugeValue, float64(groups))
	ch <- prometheus.MustNewConstMetric(offsetsDesc, prometheus.GaugeValue, float64(offsets))
}

// Counts returns how many groups and committed offsets the state holds.
func (f *FSM) Counts() (groups, offsets int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, g := range f.state.groups {
		offsets += len(g.offsets)
	}
	return len(f.state.groups), offsets
}

// bridge turns the go-metrics samples of one node into Prometheus
// histograms.
type bridge struct {
	commit, apply, store prometheus.Histogram
	snapshot             *prometheus.HistogramVec
	snapshots            prometheus.Counter
}

var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func newBridge() *bridge {
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets})
	}
	return &bridge{
		commit: h("cohort_raft_commit_duration_seconds", "Time from a leader's dispatch of a log entry to its commit (raft.commitTime)."),
		apply:  h("cohort_raft_fsm_apply_duration_seconds", "Time the FSM takes to apply one log entry (raft.fsm.apply)."),
		store:  h("cohort_raft_log_store_duration_seconds", "Time to write a batch of log entries to the Raft log, fsync included (raft.boltdb.storeLogs; with shards, their shared log's wait included)."),
		snapshot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cohort_raft_snapshot_duration_seconds",
			Help:    "Time to take a snapshot, by phase: create (capture the FSM and open the sink) and persist (encode and write it).",
			Buckets: latencyBuckets,
		}, []string{"phase"}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: "cohort_raft_snapshots_total", Help: "Snapshots persisted."}),
	}
}

// The go-metrics timings bridged (keys without their "raft" head).
const (
	sampleNone = iota
	sampleCommit
	sampleApply
	sampleStore
	sampleSnapshotCreate
	sampleSnapshotPersist
)

// sampleOf names a go-metrics key without allocating: raft reports many
// samples per entry, most of them not bridged.
func sampleOf(key []string) int {
	if len(key) < 2 || key[0] != "raft" {
		return sampleNone
	}
	switch {
	case len(key) == 2 && key[1] == "commitTime":
		return sampleCommit
	case len(key) != 3:
		return sampleNone
	case key[1] == "fsm" && key[2] == "apply":
		return sampleApply
	case key[1] == "boltdb" && key[2] == "storeLogs":
		return sampleStore
	case key[1] == "snapshot" && key[2] == "create":
		return sampleSnapshotCreate
	case key[1] == "snapshot" && key[2] == "persist":
		return sampleSnapshotPersist
	}
	return sampleNone
}

// sample takes one go-metrics timing, in milliseconds.
func (b *bridge) sample(kind int, ms float32) {
	s := float64(ms) / 1000
	switch kind {
	case sampleCommit:
		b.commit.Observe(s)
	case sampleApply:
		b.apply.Observe(s)
	case sampleStore:
		b.store.Observe(s)
	case sampleSnapshotCreate:
		b.snapshot.WithLabelValues("create").Observe(s)
	case sampleSnapshotPersist:
		b.snapshot.WithLabelValues("persist").Observe(s)
		b.snapshots.Inc()
	}
}

// sinkSet is the go-metrics sink of the process: it hands every sample to
// the bridges of the nodes running.
type sinkSet struct {
	once sync.Once
	mu   sync.RWMutex
	set  map[*bridge]struct{}
}

var sinks sinkSet

func (s *sinkSet) add(b *bridge) {
	s.once.Do(func() {
		cfg := gometrics.DefaultConfig("")
		cfg.EnableHostname = false
		cfg.EnableHostnameLabel = false
		cfg.EnableRuntimeMetrics = false
		cfg.TimerGranularity = time.Millisecond
		_, _ = gometrics.NewGlobal(cfg, s)
	})
	s.mu.Lock()
	if s.set == nil {
		s.set = map[*bridge]struct{}{}
	}
	s.set[b] = struct{}{}
	s.mu.Unlock()
}

func (s *sinkSet) remove(b *bridge) {
	s.mu.Lock()
	delete(s.set, b)
	s.mu.Unlock()
}

func (s *sinkSet) AddSample(key []string, val float32) {
	kind := sampleOf(key)
	if kind == sampleNone {
		return
	}
	s.mu.RLock()
	for b := range s.set {
		b.sample(kind, val)
	}
	s.mu.RUnlock()
}

func (s *sinkSet) AddSampleWithLabels(key []string, val float32, _ []gometrics.Label) {
	s.AddSample(key, val)
}

func (s *sinkSet) SetGauge([]string, float32)                                 {}
func (s *sinkSet) SetGaugeWithLabels([]string, float32, []gometrics.Label)    {}
func (s *sinkSet) EmitKey([]string, float32)                                  {}
func (s *sinkSet) IncrCounter([]string, float32)                              {}
func (s *sinkSet) IncrCounterWithLabels([]string, float32, []gometrics.Label) {}
