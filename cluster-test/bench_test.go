package clustertest

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks start real clusters and take minutes; they run only with
// COHORT_CLUSTER_BENCH=1:
//
//	COHORT_CLUSTER_BENCH=1 go -C cluster-test test . -run 'TestBench' -v -timeout 30m
//
// COHORT_BENCH_KILLS (default 25) sets the number of leader kills,
// COHORT_BENCH_RAFT ("heartbeat,election,lease", default the harness's)
// the raft timeouts, COHORT_BENCH_DURATION (default 20s) the length of each
// throughput run and COHORT_BENCH_CONCURRENCY (default "1,8,32") the
// committers per run.
func benchEnabled(t *testing.T) {
	if os.Getenv("COHORT_CLUSTER_BENCH") != "1" {
		t.Skip("set COHORT_CLUSTER_BENCH=1 to run the cluster benchmarks")
	}
}

func benchOptions(t *testing.T) func(*Options) {
	return func(o *Options) {
		v := os.Getenv("COHORT_BENCH_RAFT")
		if v == "" {
			return
		}
		parts := strings.Split(v, ",")
		if len(parts) != 3 {
			t.Fatalf("COHORT_BENCH_RAFT=%q: want heartbeat,election,lease", v)
		}
		var ds [3]time.Duration
		for i, p := range parts {
			d, err := time.ParseDuration(p)
			if err != nil {
				t.Fatalf("COHORT_BENCH_RAFT=%q: %v", v, err)
			}
			ds[i] = d
		}
		o.HeartbeatTimeout, o.ElectionTimeout, o.LeaderLeaseTimeout = ds[0], ds[1], ds[2]
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// envDuration is the duration in variable name, def when unset.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

// envInts is the comma-separated integers in variable name, def when
// unset.
func envInts(t *testing.T, name string, def []int) []int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	var out []int
	for _, s := range strings.Split(v, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", name, v, err)
		}
		out = append(out, n)
	}
	return out
}

// percentile returns the q-quantile (nearest rank) of sorted ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds))+0.999999) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// prober commits an offset for a memberless group every few milliseconds
// through coordinator discovery and remembers when each node last answered
// one successfully.
type prober struct {
	coord *Coordinator
	topic string
	mu    sync.Mutex
	oks   []probeOK
}

type probeOK struct {
	at   time.Time
	node string
}

func (p *prober) run(ctx context.Context) {
	var off int64
	for ctx.Err() == nil {
		addr, err := p.coord.Addr(ctx)
		if err == nil {
			off++
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			var code int16
			code, err = CommitStandalone(rctx, p.coord.Conns, addr, p.coord.Group, p.topic, map[int32]int64{0: off})
			cancel()
			switch {
			case err == nil && code == errNone:
				p.mu.Lock()
				p.oks = append(p.oks, probeOK{time.Now(), addr})
				p.mu.Unlock()
			case err != nil || coordinatorMoved(code):
				p.coord.Forget()
			}
		}
		pause(ctx, 5*time.Millisecond)
	}
}

// firstOK returns the first success after since at a node other than not.
func (p *prober) firstOK(since time.Time, not string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ok := range p.oks {
		if ok.at.After(since) && ok.node != not {
			return ok.at, true
		}
	}
	return time.Time{}, false
}

// TestBenchLeaderKill kills the raft leader repeatedly and measures the time
// from SIGKILL to the first successful group request (an offset commit)
// answered by the new leader; the killed node restarts and rejoins before
// the next kill. A 5-member group heartbeats and commits throughout; its
// rejoins are reported (the target is 0) and its history is checked.
func TestBenchLeaderKill(t *testing.T) {
	benchEnabled(t)
	kills := envInt(t, "COHORT_BENCH_KILLS", 25)
	c := StartCluster(t, 3, benchOptions(t))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := DefaultWorkload()
	cfg.Groups = 1
	w, err := StartWorkload(ctx, c.KafkaAddrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := w.WaitStable(60*time.Second, time.Second); err != nil {
		t.Fatal(err)
	}
	joins := w.Joins()
	w.SetCommits(true)
	conns := NewConns("probe")
	defer conns.Close()
	p := &prober{coord: &Coordinator{Conns: conns, Seeds: c.KafkaAddrs, Group: "probe"}, topic: "probe"}
	if err := CreateTopic(ctx, p.coord, p.topic, 1); err != nil {
		t.Fatal(err)
	}
	go p.run(ctx)
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := p.firstOK(start, ""); ok {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("the prober had no success within 30s")
		}
	}

	ids := c.ids()
	var lat []time.Duration
	for i := range kills {
		leader := c.WaitVoters(ids, 60*time.Second)
		if _, ok := p.firstOK(time.Now().Add(-time.Second), ""); !ok {
			t.Fatalf("kill %d: the prober had no success in the last second", i)
		}
		killed := time.Now()
		c.Kill(leader.Index)
		var at time.Time
		for {
			var ok bool
			if at, ok = p.firstOK(killed, leader.KafkaAddr); ok {
				break
			}
			if time.Since(killed) > 30*time.Second {
				t.Fatalf("kill %d (%s): no group request succeeded on a new leader within 30s", i, leader.ID)
			}
			time.Sleep(2 * time.Millisecond)
		}
		lat = append(lat, at.Sub(killed))
		c.Restart(leader.Index)
	}
	slices.Sort(lat)
	o := c.Opts
	t.Logf("raft heartbeat/election/lease timeouts %v/%v/%v", o.HeartbeatTimeout, o.ElectionTimeout, o.LeaderLeaseTimeout)
	t.Logf("leader kill -> first successful group request on the new leader, %d kills: p50 %v p90 %v p99 %v max %v",
		len(lat), percentile(lat, 0.5).Round(time.Millisecond), percentile(lat, 0.9).Round(time.Millisecond),
		percentile(lat, 0.99).Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
	t.Logf("all: %v", lat)
	t.Logf("JoinGroup requests of the heartbeating group caused by %d failovers: %d", kills, w.Joins()-joins)
	if err := w.StopCommits(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	checkHistory(t, c, w, fetchAll(t, ctx, c, w, c.WaitLeader(10*time.Second).KafkaAddr))
}

// TestBenchCommitThroughput measures offset commits on 3 nodes with fsync on
// (raft-boltdb syncs every log write): each committer is a closed loop of
// single-partition commits on its own connection.
func TestBenchCommitThroughput(t *testing.T) {
	benchEnabled(t)
	dur := envDuration(t, "COHORT_BENCH_DURATION", 20*time.Second)
	conc := envInts(t, "COHORT_BENCH_CONCURRENCY", []int{1, 8, 32})
	c := StartCluster(t, 3, benchOptions(t))
	ctx := context.Background()
	seedConns := NewConns("bench-admin")
	defer seedConns.Close()
	coord := &Coordinator{Conns: seedConns, Seeds: c.KafkaAddrs, Group: "bench"}
	if err := CreateTopic(ctx, coord, "bench", 64); err != nil {
		t.Fatal(err)
	}
	leader, err := coord.Find(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%-11s %10s %9s %9s %9s %7s", "committers", "commits/s", "p50", "p99", "p99.9", "errors")
	for _, n := range conc {
		var (
			mu   sync.Mutex
			lat  []time.Duration
			errs atomic.Int64
			wg   sync.WaitGroup
		)
		end := time.Now().Add(dur)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conns := NewConns(fmt.Sprintf("bench-%d", i))
				defer conns.Close()
				group := fmt.Sprintf("bench-%d-%d", n, i)
				var mine []time.Duration
				for off := int64(1); time.Now().Before(end); off++ {
					start := time.Now()
					rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					code, err := CommitStandalone(rctx, conns, leader, group, "bench", map[int32]int64{int32(i % 64): off})
					cancel()
					if err != nil || code != errNone {
						errs.Add(1)
						continue
					}
					mine = append(mine, time.Since(start))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		slices.Sort(lat)
		t.Logf("%-11d %10.0f %9v %9v %9v %7d", n, float64(len(lat))/dur.Seconds(),
			percentile(lat, 0.5).Round(10*time.Microsecond), percentile(lat, 0.99).Round(10*time.Microsecond),
			percentile(lat, 0.999).Round(10*time.Microsecond), errs.Load())
	}
}
