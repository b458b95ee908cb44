package node

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/internal/buildinfo"
	"github.com/cohort-coord/cohort/ops"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

// readyCheck is one condition of readiness: nil when it holds, else why not.
type readyCheck struct {
	name string
	fn   func(n *Node) error
}

// readyChecks are the conditions /readyz and `cohortctl cluster status`
// report, in order; the node is ready when all hold. A new condition is
// one more entry.
var readyChecks = []readyCheck{
	{"raft-leader-known", func(n *Node) error {
		if n.raft.LeaderID() == "" {
			return errors.New("no Raft leader known")
		}
		var none []int
		for _, gs := range n.shards {
			if gs.rep.LeaderID() == "" {
				none = append(none, gs.id)
			}
		}
		if len(none) > 0 {
			return fmt.Errorf("no leader known for shard(s) %v", none)
		}
		return nil
	}},
	{"caught-up", func(n *Node) error {
		if !n.caughtUp.Ready() {
			return errors.New("has not yet applied every entry its log held at start")
		}
		return nil
	}},
	{"groups-loaded", func(n *Node) error {
		var errs []error
		for _, gs := range n.shards {
			name := "leader"
			if len(n.shards) > 1 {
				name = fmt.Sprintf("leader of shard %d", gs.id)
			}
			switch {
			case !gs.rep.IsLeader():
			case !gs.active.Load():
				errs = append(errs, fmt.Errorf("%s, but its group service is not active yet", name))
			case gs.svc.Loading() > 0:
				errs = append(errs, fmt.Errorf("%s, %d groups still loading", name, gs.svc.Loading()))
			}
		}
		return errors.Join(errs...)
	}},
}

// Readiness evaluates every readiness condition now.
func (n *Node) Readiness() ops.Readiness {
	out := make(ops.Readiness, 0, len(readyChecks))
	for _, c := range readyChecks {
		chk := ops.Check{Name: c.name, OK: true}
		if err := c.fn(n); err != nil {
			chk.OK, chk.Detail = false, err.Error()
		}
		out = append(out, chk)
	}
	return out
}

// Metrics returns the registry the node's metrics are in.
func (n *Node) Metrics() *prometheus.Registry { return n.registry }

// HTTPAddr returns the address of the operator HTTP listener ("" when off).
func (n *Node) HTTPAddr() string {
	if n.http == nil {
		return ""
	}
	return n.http.Addr()
}

// startMetrics sets up the registry and the group observer, before the
// components that report into them start.
func (n *Node) startMetrics() error {
	n.registry = n.cfg.Metrics
	if n.registry == nil {
		n.registry = prometheus.NewRegistry()
		n.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if n.cfg.MetricsOff {
		return nil
	}
	bi := buildinfo.Read()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cohort_build_info",
		Help: "Always 1; its labels say which build the node runs: the module version, the VCS revision and the Go version.",
	}, []string{"version", "revision", "goversion"})
	build.WithLabelValues(bi.Version, bi.Revision, bi.GoVersion).Set(1)
	n.registry.MustRegister(build)
	n.observer = actors.NewObserver(n.registry)
	return n.raft.RegisterMetrics(n.registry)
}

// registerGuardMetrics exports the ownership guard's counters (summed over
// every group this node coordinated since it started).
func (n *Node) registerGuardMetrics() {
	if n.cfg.MetricsOff {
		return
	}
	sum := func(f func(coordinator.GuardStats) uint64) func() float64 {
		return func() float64 {
			var t uint64
			for _, gs := range n.shards {
				t += f(gs.svc.GuardStats())
			}
			return float64(t)
		}
	}
	n.registry.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cohort_group_guard_withheld_partitions_total",
			Help: "Partitions the ownership guard left out of a SyncGroup answer because another member still owned them.",
		}, sum(func(s coordinator.GuardStats) uint64 { return s.Withheld })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "cohort_group_guard_follow_up_rebalances_total",
			Help: "Rebalances the ownership guard started to hand withheld partitions over once their owners released them.",
		}, sum(func(s coordinator.GuardStats) uint64 { return s.FollowUps })),
	)
}

// startHTTP serves the operator listener when configured.
func (n *Node) startHTTP() error {
	if n.cfg.HTTPAddr == "" {
		return nil
	}
	s, err := ops.Start(n.cfg.HTTPAddr, n.registry, opsSource{n}, n.log.With("component", "http"))
	if err != nil {
		return err
	}
	n.http = s
	n.log.Info("listening", "listener", "http", "addr", s.Addr(), "paths", "/metrics,/healthz,/readyz,/")
	return nil
}

func (n *Node) stopHTTP() {
	if n.http != nil {
		if err := n.http.Close(); err != nil {
			n.log.Warn("http listener close", "err", err)
		}
	}
}

// opsSource is what the operator listener shows of the node.
type opsSource struct{ n *Node }

func (s opsSource) Readiness() ops.Readiness                 { return s.n.Readiness() }
func (s opsSource) ClusterStatus() *clusterpb.StatusResponse { return s.n.status() }
func (s opsSource) Groups() []actors.GroupView {
	if s.n.observer == nil {
		return nil
	}
	return s.n.observer.Groups()
}

func (s opsSource) Group(id string) (actors.GroupView, bool) {
	if s.n.observer == nil {
		return actors.GroupView{}, false
	}
	return s.n.observer.Group(id)
}
