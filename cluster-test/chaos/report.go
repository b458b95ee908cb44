package chaos

import (
	"fmt"
	"html"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	clustertest "github.com/cohort-coord/cohort/cluster-test"
)

// Summary renders the report as plain-text tables: operations by kind and
// result, faults by kind, leader changes, failover percentiles and
// violations per invariant.
func (r *Report) Summary() string {
	rec := r.Record
	var b strings.Builder
	verdict := "PASSED"
	switch {
	case len(r.Violations) > 0:
		verdict = fmt.Sprintf("FAILED (%d violations)", len(r.Violations))
	case len(r.Invalid) > 0:
		verdict = "INVALID (below the workload floor: " + strings.Join(r.Invalid, "; ") + ")"
	}
	fmt.Fprintf(&b, "chaos run seed %d, %d nodes, nemeses %s", rec.Seed, len(rec.Nodes), strings.Join(rec.Nemeses, ","))
	if rec.Bugs != "" {
		fmt.Fprintf(&b, ", seeded bugs %s", rec.Bugs)
	}
	fmt.Fprintf(&b, "\nfaults %v, heal %v, checks %v: %s\n\n", rec.FaultsEnd.Sub(rec.Start).Round(time.Second),
		rec.Healed.Sub(rec.FaultsEnd).Round(100*time.Millisecond), rec.End.Sub(rec.Healed).Round(100*time.Millisecond), verdict)

	// Operations.
	type cnt struct{ ok, refused, unknown int }
	ops := map[string]*cnt{}
	codes := map[string]map[int16]int{}
	for _, o := range rec.Ops {
		kind := o.Kind
		if isZombie(o.Client) {
			kind = "commit (zombie)"
		}
		c := ops[kind]
		if c == nil {
			c = &cnt{}
			ops[kind] = c
			codes[kind] = map[int16]int{}
		}
		switch {
		case o.Unknown():
			c.unknown++
		case o.Code != 0:
			c.refused++
			codes[kind][o.Code]++
		default:
			c.ok++
		}
	}
	fmt.Fprintf(&b, "%-16s %8s %8s %8s  %s\n", "operation", "ok", "error", "unknown", "error codes")
	for _, k := range slices.Sorted(maps.Keys(ops)) {
		c := ops[k]
		var cs []string
		for _, code := range slices.Sorted(maps.Keys(codes[k])) {
			cs = append(cs, fmt.Sprintf("%d:%d", code, codes[k][code]))
		}
		fmt.Fprintf(&b, "%-16s %8d %8d %8d  %s\n", k, c.ok, c.refused, c.unknown, strings.Join(cs, " "))
	}

	// Faults.
	fmt.Fprintf(&b, "\n%-12s %5s  %s\n", "fault", "count", "details")
	byKind := map[string][]Fault{}
	for _, f := range rec.Faults {
		byKind[f.Kind] = append(byKind[f.Kind], f)
	}
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		det := map[string]int{}
		for _, f := range byKind[k] {
			d := f.Detail
			if k == "partition" && strings.HasPrefix(d, "minority") {
				d = "minority/majority"
			}
			if k == "partition" && strings.HasPrefix(d, "bridge") {
				d = "bridge"
			}
			if k == "snapshot" {
				d = f.Note
			}
			det[d]++
		}
		var ds []string
		for _, d := range slices.Sorted(maps.Keys(det)) {
			ds = append(ds, fmt.Sprintf("%s x%d", d, det[d]))
		}
		fmt.Fprintf(&b, "%-12s %5d  %s\n", k, len(byKind[k]), strings.Join(ds, ", "))
	}
	fmt.Fprintf(&b, "\nleader changes %d; snapshot installs %d; machine load (1-minute average) up to %.1f\n", rec.LeaderChanges(), rec.SnapshotInstalls, rec.MaxLoad())
	if len(r.Failovers) > 0 {
		fmt.Fprintf(&b, "\n%-12s %5s %8s %8s %8s  (fault -> first group request answered by another node)\n", "failover", "n", "p50", "p99", "max")
		var all []time.Duration
		for _, k := range slices.Sorted(maps.Keys(r.Failovers)) {
			ds := r.Failovers[k]
			all = append(all, ds...)
			fmt.Fprintf(&b, "%-12s %5d %8v %8v %8v\n", k, len(ds), Percentile(ds, .5).Round(time.Millisecond), Percentile(ds, .99).Round(time.Millisecond), Percentile(ds, 1).Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "%-12s %5d %8v %8v %8v\n", "all", len(all), Percentile(all, .5).Round(time.Millisecond), Percentile(all, .99).Round(time.Millisecond), Percentile(all, 1).Round(time.Millisecond))
	}

	// Violations.
	fmt.Fprintf(&b, "\n%-4s %10s  %s\n", "inv", "violations", "invariant")
	by := r.ByInvariant()
	for _, inv := range Invariants {
		fmt.Fprintf(&b, "%-4s %10d  %s\n", inv, by[inv], InvariantText[inv])
	}
	fmt.Fprintf(&b, "porcupine: %s\n", r.Porcupine)
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "... %d more\n", len(r.Violations)-20)
			break
		}
		at := ""
		if !v.At.IsZero() {
			at = fmt.Sprintf(" at %v", v.At.Sub(rec.Start).Round(time.Millisecond))
		}
		fmt.Fprintf(&b, "  %s%s: %s\n", v.Invariant, at, v.Text)
	}
	return b.String()
}

// faultColor is the colour of each fault kind in the picture.
var faultColor = map[string]string{
	"kill": "#d62728", "pause": "#ff7f0e", "partition": "#9467bd", "transfer": "#17becf",
	"membership": "#8c564b", "snapshot": "#e377c2", "move": "#2ca02c",
}

var clientColors = []string{"#1f77b4", "#2ca02c", "#bcbd22", "#17becf", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#ff7f0e", "#aec7e8", "#98df8a", "#c5b0d5"}

// Timeline renders the run as a self-contained HTML page with one SVG: a
// time axis, a lane per node (leader, killed, paused), a lane of faults, a
// lane per group with its generations, a lane per partition with its
// owners, and a red line with the invariant name wherever a violation
// happened. Every shape has a tooltip.
func (r *Report) Timeline() string {
	rec := r.Record
	t0, t1 := rec.Start, rec.End
	if t1.Sub(t0) <= 0 {
		t1 = t0.Add(time.Second)
	}
	const left, width, lane = 190.0, 1400.0, 18.0
	x := func(t time.Time) float64 {
		if t.Before(t0) {
			t = t0
		}
		return left + width*float64(t.Sub(t0))/float64(t1.Sub(t0))
	}
	var body strings.Builder
	y := 40.0
	label := func(s string) {
		fmt.Fprintf(&body, `<text x="4" y="%.1f" class="l">%s</text>`, y+lane*0.7, html.EscapeString(s))
	}
	rect := func(a, b time.Time, fill, tip string, h float64) {
		w := max(x(b)-x(a), 1.5)
		fmt.Fprintf(&body, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`, x(a), y+(lane-h)/2, w, h, fill, html.EscapeString(tip))
	}
	rel := func(t time.Time) string { return t.Sub(t0).Round(10 * time.Millisecond).String() }

	// Axis.
	span := t1.Sub(t0)
	step := 5 * time.Second
	for span/step > 30 {
		step *= 2
	}
	for t := time.Duration(0); t <= span; t += step {
		xx := x(t0.Add(t))
		fmt.Fprintf(&body, `<line x1="%.1f" y1="30" x2="%.1f" y2="%%H%%" class="grid"/><text x="%.1f" y="24" class="t">%ds</text>`, xx, xx, xx-8, int(t.Seconds()))
	}
	// Phases.
	fmt.Fprintf(&body, `<rect x="%.1f" y="30" width="%.1f" height="6" fill="#2ca02c"><title>heal: every node back, links whole (%s to %s)</title></rect>`, x(rec.FaultsEnd), max(x(rec.Healed)-x(rec.FaultsEnd), 1), rel(rec.FaultsEnd), rel(rec.Healed))
	fmt.Fprintf(&body, `<rect x="%.1f" y="30" width="%.1f" height="6" fill="#bbb"><title>checks after the heal</title></rect>`, x(rec.Healed), max(x(rec.End)-x(rec.Healed), 1))

	// Nodes: leader spans from the samples, faults on the node.
	for _, id := range rec.Nodes {
		label(id)
		fmt.Fprintf(&body, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#eee"/>`, left, y+2, width, lane-4)
		for i, s := range rec.Leaders {
			end := rec.End
			if i+1 < len(rec.Leaders) {
				end = rec.Leaders[i+1].At
			}
			if s.Leader == id {
				rect(s.At, end, "#2ca02c", fmt.Sprintf("%s leader, term %d, %s to %s", id, s.Term, rel(s.At), rel(end)), lane-4)
			}
		}
		for _, f := range rec.Faults {
			if !slices.Contains(f.Targets, id) || f.Kind == "partition" || f.Kind == "transfer" {
				continue
			}
			rect(f.Start, f.End, faultColor[f.Kind], fmt.Sprintf("%s %s %s: %s to %s %s", id, f.Kind, f.Detail, rel(f.Start), rel(f.End), f.Note), 6)
		}
		y += lane
	}
	// Faults.
	y += 4
	label("faults")
	for _, f := range rec.Faults {
		rect(f.Start, f.End, faultColor[f.Kind], fmt.Sprintf("%s %s %v (leader %s): %s to %s %s", f.Kind, f.Detail, f.Targets, f.Leader, rel(f.Start), rel(f.End), f.Note), lane-4)
	}
	y += lane
	label("workload events")
	for _, e := range rec.Events {
		if e.Kind == "add" || e.Kind == "crash" || e.Kind == "leave" {
			c := "#2ca02c"
			switch e.Kind {
			case "crash":
				c = "#d62728"
			case "leave":
				c = "#ff7f0e"
			}
			fmt.Fprintf(&body, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"><title>%s %s %s at %s</title></circle>`, x(e.At), y+lane/2, c, e.Group, e.Client, e.Kind, rel(e.At))
		}
	}
	y += lane + 6

	// Groups: generations, then partitions.
	iv := Ownership(rec)
	colorOf := map[string]string{}
	for _, g := range rec.Groups {
		label(fmt.Sprintf("%s (%s) gen", g.ID, g.Style))
		type gs struct {
			gen int32
			at  time.Time
		}
		var gens []gs
		seen := map[int32]bool{}
		for _, o := range rec.Ops {
			if o.Group == g.ID && o.OK() && o.Kind == clustertest.OpJoin && !seen[o.Gen] {
				seen[o.Gen] = true
				gens = append(gens, gs{o.Gen, o.End})
			}
			if o.Group == g.ID && o.OK() && o.Kind == clustertest.OpCommit && o.Gen > 0 && !seen[o.Gen] {
				seen[o.Gen] = true
				gens = append(gens, gs{o.Gen, o.End})
			}
		}
		for _, e := range rec.Events {
			if e.Group == g.ID && e.Gen > 0 && !seen[e.Gen] {
				seen[e.Gen] = true
				gens = append(gens, gs{e.Gen, e.At})
			}
		}
		sort.Slice(gens, func(i, j int) bool { return gens[i].at.Before(gens[j].at) })
		for i, gg := range gens {
			end := rec.End
			if i+1 < len(gens) {
				end = gens[i+1].at
			}
			fill := "#c6dbef"
			if i%2 == 1 {
				fill = "#9ecae1"
			}
			rect(gg.at, end, fill, fmt.Sprintf("%s generation %d from %s", g.ID, gg.gen, rel(gg.at)), lane-4)
			if x(end)-x(gg.at) > 14 {
				fmt.Fprintf(&body, `<text x="%.1f" y="%.1f" class="g">%d</text>`, x(gg.at)+2, y+lane*0.7, gg.gen)
			}
		}
		y += lane
		for p := int32(0); p < g.Partitions; p++ {
			label(fmt.Sprintf("  %s/%d", g.Topic, p))
			// An interval that overlaps an earlier owner's is drawn in the
			// lower half with a red outline, so two owners show as two bars.
			var prev []Interval
			for _, in := range iv {
				if in.Group != g.ID || in.Partition != p {
					continue
				}
				c, ok := colorOf[in.Client]
				if !ok {
					c = clientColors[len(colorOf)%len(clientColors)]
					colorOf[in.Client] = c
				}
				tip := fmt.Sprintf("%s/%d owned by %s from %s to %s", g.Topic, p, in.Client, rel(in.From), rel(in.To))
				overlap := false
				for _, o := range prev {
					overlap = overlap || o.Client != in.Client && in.From.Before(o.To) && o.From.Before(in.To)
				}
				prev = append(prev, in)
				if !overlap {
					rect(in.From, in.To, c, tip, lane-6)
					continue
				}
				w := max(x(in.To)-x(in.From), 1.5)
				fmt.Fprintf(&body, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="#e00" stroke-width="1.5"><title>%s (a second owner)</title></rect>`,
					x(in.From), y+lane/2, w, lane/2-3, c, html.EscapeString(tip))
			}
			y += lane - 4
		}
		y += 6
	}
	// Violations: a red line across the picture with the invariant.
	h := y + 10
	drawn := map[string]int{}
	for i, v := range r.Violations {
		if drawn[v.Invariant]++; drawn[v.Invariant] > 50 {
			continue // the list below has them all
		}
		at := v.At
		if at.IsZero() {
			at = rec.End
		}
		xx := x(at)
		fmt.Fprintf(&body, `<line x1="%.1f" y1="30" x2="%.1f" y2="%.1f" class="v"><title>%s at %s: %s</title></line>`, xx, xx, h, v.Invariant, rel(at), html.EscapeString(v.Text))
		fmt.Fprintf(&body, `<text x="%.1f" y="%.1f" class="vt">%s<title>%s</title></text>`, xx+2, 12+float64(i%3)*9, v.Invariant, html.EscapeString(v.Text))
	}
	svg := strings.ReplaceAll(body.String(), "%H%", fmt.Sprintf("%.1f", h))

	var legend strings.Builder
	for _, k := range ShardNemeses {
		fmt.Fprintf(&legend, `<span style="background:%s">&nbsp;&nbsp;&nbsp;</span> %s &nbsp; `, faultColor[k], k)
	}
	var viol strings.Builder
	for i, v := range r.Violations {
		if i == 500 {
			fmt.Fprintf(&viol, "<li>... %d more</li>", len(r.Violations)-500)
			break
		}
		when := "the end"
		if !v.At.IsZero() {
			when = rel(v.At)
		}
		fmt.Fprintf(&viol, "<li><b>%s</b> at %s: %s</li>", v.Invariant, when, html.EscapeString(v.Text))
	}
	if viol.Len() == 0 {
		viol.WriteString("<li>none</li>")
	}
	return fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><title>cohort chaos seed %d</title>
<style>body{font:13px sans-serif;margin:12px}.l{font:11px monospace}.t{font:10px sans-serif;fill:#555}.g{font:10px monospace}
.grid{stroke:#ddd;stroke-width:1}.v{stroke:#e00;stroke-width:2}.vt{font:bold 10px sans-serif;fill:#e00}pre{background:#f6f6f6;padding:8px}</style></head><body>
<h3>cohort chaos run, seed %d</h3>
<p>Green node bars: Raft leader. Small bars on a node: a fault on it. Blue bands: a group's generations (number inside).
Coloured bars per partition: which member owned it (one colour per member; hover for names and times). Red lines: violations.
Green strip at the top: the heal; grey: the checks after it. %s</p>
<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f">%s</svg>
<h4>violations</h4><ul>%s</ul>
<h4>summary</h4><pre>%s</pre></body></html>`, rec.Seed, rec.Seed, legend.String(), left+width+20, h+10, svg, viol.String(), html.EscapeString(r.Summary()))
}

// Matrix summarizes many runs, one row per nemesis set: runs and how many
// passed, faults, leader changes, answered operations, violations per
// invariant, failover times pooled over the runs (p50/p99/max), and the
// rebalances: every new generation handed out, and those a failover caused
// while members kept heartbeating (L2).
func Matrix(reps []*Report) string {
	type row struct {
		runs, passed, invalid, faults, leaders, ok, gens int
		load                                             float64
		inv                                              map[string]int
		failovers                                        []time.Duration
		seeds                                            []string
	}
	rows := map[string]*row{}
	for _, r := range reps {
		key := strings.Join(r.Record.Nemeses, ",")
		if r.Record.Bugs != "" {
			key += " (bug " + r.Record.Bugs + ")"
		}
		w := rows[key]
		if w == nil {
			w = &row{inv: map[string]int{}}
			rows[key] = w
		}
		w.runs++
		switch {
		case r.Passed():
			w.passed++
		case len(r.Violations) == 0:
			w.invalid++
		default:
			w.seeds = append(w.seeds, fmt.Sprint(r.Record.Seed))
		}
		w.faults += len(r.Record.Faults)
		w.load = max(w.load, r.Record.MaxLoad())
		w.leaders += r.Record.LeaderChanges()
		seen := map[string]bool{}
		for _, o := range r.Record.Ops {
			if !o.OK() {
				continue
			}
			w.ok++
			if o.Kind == "join" && o.Gen > 0 {
				seen[fmt.Sprintf("%s/%d", o.Group, o.Gen)] = true
			}
		}
		w.gens += len(seen)
		for k, n := range r.ByInvariant() {
			w.inv[k] += n
		}
		for _, ds := range r.Failovers {
			w.failovers = append(w.failovers, ds...)
		}
	}
	var b strings.Builder
	const layout = "%-12s %4v %6v %6v %7v %8v %10v %9v %8v %8v %8v %11v %10v %5v  %v\n"
	fmt.Fprintf(&b, layout, "nemeses", "runs", "passed", "faults", "leaders", "ok-ops", "violations", "failovers", "p50", "p99", "max", "generations", "failover-", "max", "failed seeds")
	fmt.Fprintf(&b, layout, "", "", "", "", "changed", "", "", "", "", "", "", "", "rebalances", "load", "")
	for _, k := range slices.Sorted(maps.Keys(rows)) {
		w := rows[k]
		nv := 0
		for _, n := range w.inv {
			nv += n
		}
		ms := func(q float64) string {
			if len(w.failovers) == 0 {
				return "-"
			}
			return Percentile(w.failovers, q).Round(time.Millisecond).String()
		}
		passed := fmt.Sprint(w.passed)
		if w.invalid > 0 {
			passed += fmt.Sprintf(" (%d invalid)", w.invalid)
		}
		fmt.Fprintf(&b, layout, k, w.runs, passed, w.faults, w.leaders, w.ok, nv,
			len(w.failovers), ms(.5), ms(.99), ms(1), w.gens, w.inv["L2"], fmt.Sprintf("%.1f", w.load), strings.Join(w.seeds, " "))
	}
	var total []string
	for _, inv := range Invariants {
		n := 0
		for _, w := range rows {
			n += w.inv[inv]
		}
		total = append(total, fmt.Sprintf("%s %d", inv, n))
	}
	fmt.Fprintf(&b, "\nviolations by invariant over all runs: %s\n", strings.Join(total, ", "))
	return b.String()
}
