// Command chaos runs one chaos run of cohort against real cohortd processes
// and checks its history:
//
//	go run ./cluster-test/cmd/chaos --nodes 3 --duration 5m --nemesis kill,pause,partition,transfer,membership,snapshot --seed 7
//
// It prints a progress bar while faults run, then a summary table, and
// writes the raw history (history.json), the timeline picture
// (timeline.html) and the node logs to --out. --replay history.json runs the
// checkers again on a saved history. The exit code is 0 for a passed run,
// 1 for violations, 3 for a run below its workload floor, 2 for bad flags.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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
	if err := fs.Parse(args); err != nil {
		return 2
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
	// Nemeses that move leadership must have moved it: at least once a
	// minute of faults.
	for _, n := range cfg.Nemeses {
		if n == "kill" || n == "pause" || n == "partition" || n == "transfer" {
			cfg.Floor.LeaderChanges = max(1, int(*dur/time.Minute))
		}
	}
	if len(cfg.Nemeses) == 0 || *dur <= 0 || *nodes < 3 {
		fmt.Fprintln(stderr, "chaos: need at least one nemesis, a positive --duration and --nodes >= 3")
		return 2
	}
	dir := *out
	if dir == "" {
		dir = fmt.Sprintf("chaos-%d", *seed)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return 2
	}
	logf, err := os.Create(filepath.Join(dir, "run.log"))
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return 2
	}
	defer logf.Close()
	cfg.Logf = func(format string, a ...any) {
		line := fmt.Sprintf(format, a...)
		fmt.Fprintf(logf, "%s %s\n", time.Now().Format("15:04:05.000"), line)
		if *verbose {
			fmt.Fprintf(stderr, "\r\033[K%s\n", line)
		}
	}
	cfg.Progress = func(p chaos.Progress) {
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
	tb := chaos.NewTB("chaos", cfg.Logf)
	rep, err := chaos.Run(tb, cfg)
	fmt.Fprint(stderr, "\r\033[K")
	keepLogs(tb, dir)
	tb.Close()
	chaos.RemoveSeededBinary()
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v (log: %s)\n", err, filepath.Join(dir, "run.log"))
		return 2
	}
	if err := rep.Record.Save(filepath.Join(dir, "history.json")); err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "timeline.html"), []byte(rep.Timeline()), 0o644); err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
	}
	fmt.Fprint(stdout, rep.Summary())
	fmt.Fprintf(stdout, "\nhistory %s, picture %s, logs %s\n", filepath.Join(dir, "history.json"), filepath.Join(dir, "timeline.html"), dir)
	return verdict(rep)
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
