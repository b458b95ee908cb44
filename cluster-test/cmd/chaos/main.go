// Command chaos runs one chaos run of cohort against real cohortd processes
// and checks its history (from cluster-test/, a module of its own):
//
//	go run ./cmd/chaos --nodes 3 --duration 5m --nemesis kill,pause,partition,transfer,membership,snapshot --seed 7
//
// It prints a progress bar while faults run, then a summary table, and
// writes the raw history (history.json), the timeline picture
// (timeline.html) and the node logs to --out. --replay history.json runs the
// checkers again on a saved history. The exit code is 0 for a passed run,
// 1 for violations, 3 for a run below its workload floor, 2 for bad flags.
//
// A matrix of runs:
//
//	go run ./cmd/chaos --each --runs 10 --duration 5m --parallel 3 --seed 101 --out matrix
//
// runs every nemesis alone 10 times (seeds 101..110), 3 runs at a time,
// each into matrix/<nemesis>-<seed>, and prints one table over all of them
// (runs passed, failover p50/p99 per nemesis, violations, rebalances).
// --summarize dir... prints that table for runs saved earlier.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cohort-coord/cohort/cluster-test/chaos"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.Int("nodes", 3, "cohortd processes")
	dur := fs.Duration("duration", time.Minute, "how long faults are injected (heal and checks follow)")
	nem := fs.String("nemesis", strings.Join(chaos.Nemeses, ","), "comma-separated nemeses: "+strings.Join(chaos.Nemeses, ", "))
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "random seed (a run's seed replays its fault schedule)")
	bugs := fs.String("seeded-bugs", "", "switch seeded bugs on (a build with the seededbugs tag is made): ack-before-apply, no-generation-check, stale-leader, early-handout")
	out := fs.String("out", "", "directory for history.json, timeline.html and node logs (default chaos-<seed>); with --replay, where to write timeline.html")
	replay := fs.String("replay", "", "check a saved history.json again instead of running")
	quiet := fs.Duration("quiet", 2*time.Second, "shortest quiet window between faults")
	verbose := fs.Bool("v", false, "log every fault as it happens")
	runs := fs.Int("runs", 1, "runs per nemesis set, with seeds --seed, --seed+1, ...")
	each := fs.Bool("each", false, "run every nemesis of --nemesis alone (a matrix) instead of all together")
	parallel := fs.Int("parallel", 1, "runs at a time in a matrix")
	summarize := fs.Bool("summarize", false, "print the matrix table of the run directories given as arguments")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *summarize {
		return summarizeDirs(fs.Args(), stdout, stderr)
	}
	cfg := chaos.DefaultConfig(*dur, *seed)
	if *replay != "" {
		rec, err := chaos.Load(*replay)
		if err != nil {
			fmt.Fprintf(stderr, "chaos: %v\n", err)
			return 2
		}
		rep := chaos.Check(rec, cfg.Floor)
		fmt.Fprint(stdout, rep.Summary())
		if *out != "" {
			if err := os.WriteFile(filepath.Join(*out, "timeline.html"), []byte(rep.Timeline()), 0o644); err != nil {
				fmt.Fprintf(stderr, "chaos: %v\n", err)
			}
		}
		return verdict(rep)
	}
	cfg.Nodes, cfg.Bugs, cfg.Quiet = *nodes, *bugs, *quiet
	cfg.Nemeses = nil
	for _, n := range strings.Split(*nem, ",") {
		if n = strings.TrimSpace(n); n != "" {
			cfg.Nemeses = append(cfg.Nemeses, n)
		}
	}
	if len(cfg.Nemeses) == 0 || *dur <= 0 || *nodes < 3 || *runs < 1 || *parallel < 1 {
		fmt.Fprintln(stderr, "chaos: need at least one nemesis, a positive --duration, --nodes >= 3, --runs >= 1 and --parallel >= 1")
		return 2
	}
	for _, n := range cfg.Nemeses {
		if !slices.Contains(chaos.Nemeses, n) {
			fmt.Fprintf(stderr, "chaos: unknown nemesis %q (known: %s)\n", n, strings.Join(chaos.Nemeses, ", "))
			return 2
		}
	}
	if *runs > 1 || *each {
		return runMatrix(cfg, *runs, *each, *parallel, *out, stdout, stderr)
	}
	cfg.MoveLeaders()
	dir := *out
	if dir == "" {
		dir = fmt.Sprintf("chaos-%d", *seed)
	}
	rep, code := runOne(cfg, dir, *verbose, true, stderr)
	if rep == nil {
		return code
	}
	fmt.Fprint(stdout, rep.Summary())
	fmt.Fprintf(stdout, "\nhistory %s, picture %s, logs %s\n", filepath.Join(dir, "history.json"), filepath.Join(dir, "timeline.html"), dir)
	return code
}

// runMatrix runs every nemesis set (each nemesis alone with each) runs
// times, parallel at a time, and prints the matrix table.
func runMatrix(base chaos.Config, runs int, each bool, parallel int, out string, stdout, stderr io.Writer) int {
	if out == "" {
		out = fmt.Sprintf("chaos-matrix-%d", base.Seed)
	}
	sets := [][]string{base.Nemeses}
	if each {
		sets = nil
		for _, n := range base.Nemeses {
			sets = append(sets, []string{n})
		}
	}
	type job struct {
		cfg chaos.Config
		dir string
	}
	var jobs []job
	for i := range runs {
		for _, set := range sets {
			cfg := base
			cfg.Seed = base.Seed + uint64(i)
			cfg.Nemeses = set
			cfg.MoveLeaders()
			jobs = append(jobs, job{cfg, filepath.Join(out, fmt.Sprintf("%s-%d", strings.Join(set, "+"), cfg.Seed))})
		}
	}
	var (
		mu    sync.Mutex
		reps  []*chaos.Report
		codes = map[int]bool{}
		done  int
	)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	start := time.Now()
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rep, code := runOne(j.cfg, j.dir, false, false, stderr)
			mu.Lock()
			defer mu.Unlock()
			done++
			verdict := map[int]string{0: "passed", 1: "VIOLATIONS", 2: "ERROR", 3: "INVALID"}[code]
			fmt.Fprintf(stderr, "[%d/%d, %v] %s seed %d: %s (%s)\n", done, len(jobs), time.Since(start).Round(time.Second),
				strings.Join(j.cfg.Nemeses, ","), j.cfg.Seed, verdict, j.dir)
			if rep != nil {
				reps = append(reps, rep)
			}
			codes[code] = true
		})
	}
	wg.Wait()
	fmt.Fprint(stdout, chaos.Matrix(reps))
	for _, code := range []int{1, 2, 3} { // violations first, then errors, then invalid runs
		if codes[code] {
			return code
		}
	}
	return 0
}

// summarizeDirs prints the matrix table of saved runs.
func summarizeDirs(dirs []string, stdout, stderr io.Writer) int {
	if len(dirs) == 0 {
		fmt.Fprintln(stderr, "chaos: --summarize needs run directories (each with a history.json)")
		return 2
	}
	var reps []*chaos.Report
	for _, d := range dirs {
		rec, err := chaos.Load(filepath.Join(d, "history.json"))
		if err != nil {
			fmt.Fprintf(stderr, "chaos: %v\n", err)
			return 2
		}
		cfg := chaos.DefaultConfig(rec.FaultsEnd.Sub(rec.FaultsStart), rec.Seed)
		cfg.Nemeses = rec.Nemeses
		cfg.MoveLeaders()
		reps = append(reps, chaos.Check(rec, cfg.Floor))
	}
	fmt.Fprint(stdout, chaos.Matrix(reps))
	return 0
}

// runOne runs one chaos run into dir (history, picture, node logs) and
// returns its report and exit code; the report is nil when the run could
// not be set up.
func runOne(cfg chaos.Config, dir string, verbose, progress bool, stderr io.Writer) (*chaos.Report, int) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return nil, 2
	}
	logf, err := os.Create(filepath.Join(dir, "run.log"))
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return nil, 2
	}
	defer logf.Close()
	cfg.Logf = func(format string, a ...any) {
		line := fmt.Sprintf(format, a...)
		fmt.Fprintf(logf, "%s %s\n", time.Now().Format("15:04:05.000"), line)
		if verbose {
			fmt.Fprintf(stderr, "\r\033[K%s\n", line)
		}
	}
	if progress {
		cfg.Progress = progressBar(stderr)
	}
	tb := chaos.NewTB("chaos", cfg.Logf)
	rep, err := chaos.Run(tb, cfg)
	if progress {
		fmt.Fprint(stderr, "\r\033[K")
	}
	keepLogs(tb, dir)
	tb.Close()
	if cfg.Bugs != "" {
		chaos.RemoveSeededBinary()
	}
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v (log: %s)\n", err, filepath.Join(dir, "run.log"))
		return nil, 2
	}
	if err := rep.Record.Save(filepath.Join(dir, "history.json")); err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "timeline.html"), []byte(rep.Timeline()), 0o644); err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
	}
	os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(rep.Summary()), 0o644)
	return rep, verdict(rep)
}

// progressBar draws the run's progress on one terminal line.
func progressBar(stderr io.Writer) func(chaos.Progress) {
	return func(p chaos.Progress) {
		const w = 30
		frac := min(1, p.Elapsed.Seconds()/p.Total.Seconds())
		k := int(w * frac)
		active := p.Active
		if active == "" {
			active = "quiet"
		}
		fmt.Fprintf(stderr, "\r\033[K[%s%s] %3.0f%% %v/%v faults %d ops %d leader %s (%s)", strings.Repeat("#", k), strings.Repeat(".", w-k),
			100*frac, p.Elapsed.Round(time.Second), p.Total, p.Faults, p.Ops, p.Leader, active)
	}
}

func verdict(rep *chaos.Report) int {
	switch {
	case len(rep.Violations) > 0:
		return 1
	case len(rep.Invalid) > 0:
		return 3
	}
	return 0
}

// keepLogs copies every node's log next to the history before the
// temporary directories go.
func keepLogs(tb *chaos.TB, dir string) {
	for _, p := range chaos.NodeLogs(tb) {
		if b, err := os.ReadFile(p); err == nil {
			os.WriteFile(filepath.Join(dir, filepath.Base(p)), b, 0o644)
		}
	}
}
