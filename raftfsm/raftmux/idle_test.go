package raftmux

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cohort-coord/cohort/internal/testcerts"
)

var (
	idleFor    = flag.Duration("idle", 0, "TestIdleCost: how long each cluster sits idle (0 skips the test)")
	idleShards = flag.String("idle.shards", "1,4,16,64", "TestIdleCost: the shard counts to measure")
	idlePeer   = flag.Bool("idle.peer", true, "TestIdleCost: also measure a port per Raft group (today's layout)")
	idleLease  = flag.Bool("idle.lease", true, "TestIdleCost: also measure the mux with cohort's leader lease renewal on every shard")
	idleTLS    = flag.Bool("idle.tls", true, "TestIdleCost: also measure the mux over TLS, with the lease renewal")
)

// sample is the process's use of the machine at one instant.
type sample struct {
	at         time.Time
	cpu        time.Duration // user + system, getrusage(RUSAGE_SELF)
	rss        int64         // bytes, VmRSS
	goroutines int
	fds        int
	frames     uint64 // RPCs sent through the muxes
	terms      uint64 // sum of every shard's term on every node
}

func take(t *testing.T, ns []*testNode) sample {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	s := sample{
		at:         time.Now(),
		cpu:        time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		rss:        vmRSS(t),
		goroutines: runtime.NumGoroutine(),
		fds:        len(fds),
	}
	for _, n := range ns {
		s.frames += n.sent()
		for _, sn := range n.shards {
			term, _ := strconv.ParseUint(sn.raft.Stats()["term"], 10, 64)
			s.terms += term
		}
	}
	return s
}

// loadAvg is the host's one-minute load average: the cores are shared,
// and a busy neighbour shows in the CPU figures.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}

func vmRSS(t *testing.T) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// idleCost is one node's idle cost with a given shard count.
type idleCost struct {
	shards     int
	cpu        float64 // fraction of one core
	rssMiB     float64 // growth over the process before the cluster
	goroutines float64
	fds        float64
	rpcs       float64 // RPCs sent per second
	elections  uint64  // term changes while idle, whole cluster
}

// TestIdleCost measures what an idle shard costs a node: three in-process
// nodes with S shards each over their muxes (raft-boltdb stores, cohort's
// Raft timing) sit idle for -idle, and the process's CPU, RSS,
// goroutines, descriptors and RPCs are divided by the three nodes. A least
// squares line over the shard counts gives the cost per shard per node.
// With -idle.peer (the default) each shard count is also measured with a
// port per Raft group, today's layout, in the same run.
//
//	go test ./raftfsm/raftmux -count=1 -run TestIdleCost -v -args -idle 10s
func TestIdleCost(t *testing.T) {
	if *idleFor <= 0 {
		t.Skip("set -idle (e.g. -idle 10s) to measure")
	}
	var shardCounts []int
	for _, f := range strings.Split(*idleShards, ",") {
		shards, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || shards < 1 {
			t.Fatalf("-idle.shards: %q", f)
		}
		shardCounts = append(shardCounts, shards)
	}
	layouts := []string{"mux"}
	if *idleLease {
		layouts = append(layouts, "mux+lease")
	}
	if *idleTLS {
		layouts = append(layouts, "tls+lease")
	}
	if *idlePeer {
		layouts = append(layouts, "ports")
	}
	costs := map[string][]idleCost{}
	for _, shards := range shardCounts {
		for _, layout := range layouts {
			t.Run(fmt.Sprintf("%s/shards=%d", layout, shards), func(t *testing.T) {
				costs[layout] = append(costs[layout], measureIdle(t, shards, layout))
			})
		}
	}
	for _, layout := range layouts {
		reportIdle(t, layout, costs[layout])
	}
}

func measureIdle(t *testing.T, shards int, layout string) idleCost {
	const nodes = 3
	var cfg Config
	if layout == "tls+lease" {
		ca := testcerts.NewCA(t, "raftmux-ca")
		cfg.TLS = ca.Issue(t, testcerts.Options{CommonName: "node"}).Write(t, t.TempDir(), "node", ca).Load(t)
	}
	debug.FreeOSMemory() // the previous cluster's heap leaves the RSS baseline
	base := take(t, nil)
	start := time.Now()
	ns := startClusterOn(t, nodes, shards, cfg, layout == "ports")
	waitLeaders(t, ns, 2*time.Minute)
	elected := time.Since(start)
	if strings.HasSuffix(layout, "+lease") {
		renewLeases(t, ns)
	}
	time.Sleep(2 * time.Second) // let the pools fill and the first rounds settle
	a := take(t, ns)
	time.Sleep(*idleFor)
	b := take(t, ns)
	secs := b.at.Sub(a.at).Seconds()
	c := idleCost{
		shards:     shards,
		cpu:        (b.cpu - a.cpu).Seconds() / secs / nodes,
		rssMiB:     float64(b.rss-base.rss) / (1 << 20) / nodes,
		goroutines: float64(b.goroutines-base.goroutines) / nodes,
		fds:        float64(b.fds-base.fds) / nodes,
		rpcs:       float64(b.frames-a.frames) / secs / nodes,
		elections:  b.terms - a.terms,
	}
	t.Logf("elected in %v; per node: cpu %.2f%% of a core, rss +%.1f MiB, %.0f goroutines, %.0f fds, %.0f RPC/s sent; %d term changes while idle; host load average %s",
		elected.Round(time.Millisecond), 100*c.cpu, c.rssMiB, c.goroutines, c.fds, c.rpcs, c.elections, loadAvg())
	return c
}

// renewLeases does on every shard what node/lease.go's renewLease does on
// today's one Raft group: while the shard's instance leads, a VerifyLeader
// round every 100 ms (a fifth of its basis, capped at 500 ms), the next one only
// after the last is answered; one goroutine per shard per node.
func renewLeases(t *testing.T, ns []*testNode) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range ns {
		for _, sn := range n.shards {
			wg.Go(func() {
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					if sn.raft.State() == raft.Leader {
						sn.raft.VerifyLeader().Error()
					}
				}
			})
		}
	}
	t.Cleanup(func() { close(stop); wg.Wait() }) // before the cluster stops
}

// reportIdle logs the table of costs and the least squares fit over them.
func reportIdle(t *testing.T, layout string, costs []idleCost) {
	t.Logf("%s:", layout)
	t.Logf("| shards | CPU %%core/node | per shard | RSS MiB/node | per shard | goroutines/node | per shard | fds/node | per shard | RPC/s/node | per shard | term changes |")
	t.Logf("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range costs {
		s := float64(c.shards)
		t.Logf("| %d | %.2f | %.3f | %.1f | %.2f | %.0f | %.1f | %.0f | %.1f | %.0f | %.1f | %d |",
			c.shards, 100*c.cpu, 100*c.cpu/s, c.rssMiB, c.rssMiB/s, c.goroutines, c.goroutines/s, c.fds, c.fds/s, c.rpcs, c.rpcs/s, c.elections)
	}
	if len(costs) < 2 {
		return
	}
	fit := func(y func(idleCost) float64) (a, b float64) {
		var sx, sy, sxx, sxy float64
		for _, c := range costs {
			x := float64(c.shards)
			sx, sy, sxx, sxy = sx+x, sy+y(c), sxx+x*x, sxy+x*y(c)
		}
		n := float64(len(costs))
		b = (n*sxy - sx*sy) / (n*sxx - sx*sx)
		return (sy - b*sx) / n, b
	}
	ca, cb := fit(func(c idleCost) float64 { return 100 * c.cpu })
	ra, rb := fit(func(c idleCost) float64 { return c.rssMiB })
	ga, gb := fit(func(c idleCost) float64 { return c.goroutines })
	fa, fb := fit(func(c idleCost) float64 { return c.fds })
	pa, pb := fit(func(c idleCost) float64 { return c.rpcs })
	t.Logf("least squares per node, y = a + b*S:")
	t.Logf("  CPU        %%core  a = %6.2f  b = %.3f per shard", ca, cb)
	t.Logf("  RSS        MiB    a = %6.2f  b = %.3f per shard", ra, rb)
	t.Logf("  goroutines        a = %6.1f  b = %.2f per shard", ga, gb)
	t.Logf("  fds               a = %6.1f  b = %.2f per shard", fa, fb)
	t.Logf("  RPC/s sent        a = %6.1f  b = %.2f per shard", pa, pb)
	if cb > 0 {
		t.Logf("  idle CPU reaches 10%% of a core per node at S = %.0f, 25%% at S = %.0f", (10-ca)/cb, (25-ca)/cb)
	}
}
