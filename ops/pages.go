package ops

import (
	"cmp"
	"fmt"
	"html/template"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cohort-coord/cohort/actors"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

type pages struct{ src Source }

type overviewData struct {
	Ready   Readiness
	Cluster *clusterpb.StatusResponse
	Groups  []groupRow
	Now     time.Time
}

type groupRow struct {
	actors.GroupView
	LastRebalance string
}

func (p *pages) overview(w http.ResponseWriter, _ *http.Request) {
	d := overviewData{Ready: p.src.Readiness(), Cluster: p.src.ClusterStatus(), Now: time.Now()}
	for _, g := range p.src.Groups() {
		row := groupRow{GroupView: g, LastRebalance: "-"}
		if n := len(g.History); n > 0 {
			last := g.History[n-1]
			row.LastRebalance = fmt.Sprintf("%s ago (%s, %s)", ago(d.Now, last.Completed), last.Cause, seconds(last.Duration()))
		}
		d.Groups = append(d.Groups, row)
	}
	render(w, overviewTmpl, d)
}

type groupData struct {
	Group actors.GroupView
	// Consumer: a consumer-protocol group (KIP-848), whose generations are
	// group epochs and whose members have epochs and targets.
	Consumer bool
	Members  []memberRow
	Timeline timeline
	History  []historyRow
	Now      time.Time
}

type memberRow struct {
	actors.MemberView
	Assignment, Target string
}

type historyRow struct {
	actors.Rebalance
	When, Took   string
	Joined, Left string
	Moved        []string
}

func (p *pages) group(w http.ResponseWriter, r *http.Request) {
	g, ok := p.src.Group(r.PathValue("id"))
	if !ok {
		http.Error(w, "this node coordinates no group "+strconv.Quote(r.PathValue("id")), http.StatusNotFound)
		return
	}
	now := time.Now()
	d := groupData{Group: g, Consumer: g.Type == "consumer", Timeline: newTimeline(g.History, g.Type == "consumer"), Now: now}
	for _, m := range g.Members {
		row := memberRow{MemberView: m, Assignment: formatAssignment(m.Assignment())}
		if d.Consumer {
			row.Target = formatAssignment(m.Target)
		}
		d.Members = append(d.Members, row)
	}
	for i := len(g.History) - 1; i >= 0; i-- {
		h := g.History[i]
		row := historyRow{Rebalance: h, When: h.Completed.UTC().Format("15:04:05.000") + " (" + ago(now, h.Completed) + " ago)", Took: seconds(h.Duration()),
			Joined: strings.Join(h.Joined, ", "), Left: strings.Join(h.Left, ", ")}
		for _, mv := range h.Moved {
			row.Moved = append(row.Moved, fmt.Sprintf("%s/%d: %s → %s", mv.Topic, mv.Partition, dash(mv.From), dash(mv.To)))
		}
		d.History = append(d.History, row)
	}
	render(w, groupTmpl, d)
}

// timeline is the SVG drawing of a group's history: one column per
// generation, oldest on the left; a bar's height grows with the
// rebalance's duration and its colour says the cause. Members that joined
// (+) and left (−) and the partitions that moved are written under it.
type timeline struct {
	Width, Height int
	Items         []timelineItem
	Empty         bool
}

type timelineItem struct {
	X, BarY, BarH, CenterX int
	Colour                 string
	Label, Short           string // "generation", "gen"; "group epoch", "epoch"
	Generation             int32
	Cause, State           string
	Took, When             string
	Joined, Left, Moved    int
}

const (
	colWidth  = 110
	barTop    = 30
	barMaxH   = 90
	timelineH = 200
)

var causeColours = map[string]string{
	actors.CauseJoin:     "#2f7d32",
	actors.CauseMetadata: "#1565c0",
	actors.CauseLeave:    "#ef6c00",
	actors.CauseExpiry:   "#c62828",
	actors.CauseFailover: "#6a1b9a",
	actors.CauseEnforced: "#546e7a",
}

func newTimeline(h []actors.Rebalance, consumer bool) timeline {
	label, short := "generation", "gen"
	if consumer {
		label, short = "group epoch", "epoch"
	}
	t := timeline{Width: max(1, len(h)) * colWidth, Height: timelineH, Empty: len(h) == 0}
	for i, r := range h {
		// Height: log scale from 1 ms (a sliver) to 5 min (full).
		ms := max(1, float64(r.Duration().Milliseconds()))
		frac := math.Min(1, math.Log10(ms)/math.Log10(300_000))
		barH := 4 + int(frac*(barMaxH-4))
		t.Items = append(t.Items, timelineItem{
			X: i*colWidth + 10, CenterX: i*colWidth + colWidth/2, BarY: barTop + barMaxH - barH, BarH: barH,
			Colour: cmp.Or(causeColours[r.Cause], "#546e7a"), Label: label, Short: short, Generation: r.Generation, Cause: r.Cause, State: r.State,
			Took: seconds(r.Duration()), When: r.Completed.UTC().Format("15:04:05"),
			Joined: len(r.Joined), Left: len(r.Left), Moved: len(r.Moved),
		})
	}
	return t
}

func formatAssignment(a map[string][]int32) string {
	if len(a) == 0 {
		return "-"
	}
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(a)) {
		ps := make([]string, len(a[t]))
		for i, p := range a[t] {
			ps[i] = strconv.Itoa(int(p))
		}
		parts = append(parts, t+": "+strings.Join(ps, ","))
	}
	return strings.Join(parts, "; ")
}

func seconds(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	}
	return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
}

func ago(now, t time.Time) string { return seconds(now.Sub(t).Truncate(time.Millisecond)) }

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func render(w http.ResponseWriter, t *template.Template, data any) {
	var b strings.Builder
	if err := t.Execute(&b, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, b.String())
}

const style = `<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
table{border-collapse:collapse;background:#fff} th,td{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0} code{font-size:12px} .ok{color:#2f7d32} .fail{color:#c62828}
.badge{display:inline-block;padding:2px 8px;border-radius:10px;color:#fff;font-size:12px}
svg text{font:11px system-ui,sans-serif}
</style>`

// refresh reloads a status page every few seconds, so that a page left
// open follows the cluster (a meta refresh: the pages stay script-free).
const refresh = `<meta http-equiv="refresh" content="5">`

var overviewTmpl = template.Must(template.New("overview").Parse(`<!doctype html>
<html><head><meta charset="utf-8">` + refresh + `<title>cohort {{.Cluster.NodeId}}</title>` + style + `</head><body>
<h1>cohort node {{.Cluster.NodeId}}</h1>
<p id="readiness">{{if .Ready.Ready}}<span class="badge" style="background:#2f7d32">ready</span>{{else}}<span class="badge" style="background:#c62828">not ready</span>{{end}}
{{range .Ready}} <span class="{{if .OK}}ok{{else}}fail{{end}}">{{.Name}}{{if not .OK}}: {{.Detail}}{{end}}</span>{{end}}</p>
<h2>Cluster</h2>
<table id="cluster"><tr><th>state</th><th>leader</th><th>term</th><th>applied index</th><th>commit index</th><th>FSM hash</th></tr>
<tr><td>{{.Cluster.State}}</td><td>{{or .Cluster.LeaderId "none"}}</td><td>{{.Cluster.Term}}</td><td>{{.Cluster.AppliedIndex}}</td><td>{{.Cluster.CommitIndex}}</td><td><code>{{.Cluster.FsmHash}}</code></td></tr></table>
<h2>Nodes</h2>
<table id="nodes"><tr><th>node</th><th>suffrage</th><th>raft</th><th>native API</th><th>Kafka</th><th></th></tr>
{{range .Cluster.Members}}<tr><td>{{.NodeId}}</td><td>{{.Suffrage}}</td><td>{{.RaftAddr}}</td><td>{{.RemoteAddr}}</td><td>{{.KafkaAddr}}</td><td>{{if .Leader}}leader{{end}}</td></tr>
{{end}}</table>
{{if gt (len .Cluster.Shards) 1}}<h2>Shards</h2>
<table id="shards"><tr><th>shard</th><th>leader</th><th>this node</th><th>groups</th><th>applied index</th></tr>
{{range .Cluster.Shards}}<tr><td>{{.Id}}</td><td>{{or .LeaderId "none"}}</td><td>{{if .Active}}<b>coordinates</b>{{else}}{{.State}}{{end}}</td><td>{{.Groups}}</td><td>{{.AppliedIndex}}</td></tr>
{{end}}</table>{{end}}
<h2>Groups</h2>
{{if .Groups}}<table id="groups"><tr><th>group</th><th>type</th><th>state</th><th>protocol type</th><th>protocol</th><th>generation (epoch)</th><th>members</th><th>last rebalance</th></tr>
{{range .Groups}}<tr><td><a href="/groups/{{.ID}}">{{.ID}}</a></td><td>{{.Type}}</td><td>{{.State}}</td><td>{{.ProtocolType}}</td><td>{{.Protocol}}</td><td>{{.Generation}}</td><td>{{.MemberCount}}</td><td>{{.LastRebalance}}</td></tr>
{{end}}</table>{{else}}<p id="groups">No groups coordinated here{{if and (ne .Cluster.State "Leader") (le (len .Cluster.Shards) 1)}} (groups live on the leader, {{or .Cluster.LeaderId "none known"}}){{end}}.</p>{{end}}
</body></html>`))

var groupTmpl = template.Must(template.New("group").Parse(`<!doctype html>
<html><head><meta charset="utf-8">` + refresh + `<title>group {{.Group.ID}}</title>` + style + `</head><body>
<p><a href="/">← cluster</a></p>
<h1>group {{.Group.ID}}</h1>
{{if .Consumer}}<table id="summary"><tr><th>type</th><th>state</th><th>server assignor</th><th>group epoch</th><th>assignment epoch</th><th>members</th></tr>
<tr><td>consumer</td><td>{{.Group.State}}</td><td>{{.Group.Protocol}}</td><td>{{.Group.Generation}}</td><td>{{.Group.AssignmentEpoch}}</td><td>{{.Group.MemberCount}}</td></tr></table>
<h2>Members</h2>
<table id="members"><tr><th>member</th><th>instance</th><th>client</th><th>host</th><th>epoch</th><th>reconciliation</th><th>holds</th><th>target</th></tr>
{{range .Members}}<tr><td><code>{{.MemberID}}</code></td><td>{{or .InstanceID "-"}}</td><td>{{.ClientID}}</td><td>{{.ClientHost}}</td><td>{{.MemberEpoch}}</td><td>{{.Reconciliation}}</td><td>{{.Assignment}}</td><td>{{.Target}}</td></tr>
{{end}}</table>{{else}}<table id="summary"><tr><th>state</th><th>protocol type</th><th>protocol</th><th>generation</th><th>members</th></tr>
<tr><td>{{.Group.State}}</td><td>{{.Group.ProtocolType}}</td><td>{{.Group.Protocol}}</td><td>{{.Group.Generation}}</td><td>{{.Group.MemberCount}}</td></tr></table>
<h2>Members</h2>
<table id="members"><tr><th>member</th><th>instance</th><th>client</th><th>host</th><th>assignment</th></tr>
{{range .Members}}<tr><td><code>{{.MemberID}}</code></td><td>{{or .InstanceID "-"}}</td><td>{{.ClientID}}</td><td>{{.ClientHost}}</td><td>{{.Assignment}}</td></tr>
{{end}}</table>{{end}}
<h2>Rebalance timeline</h2>
{{with .Timeline}}{{if .Empty}}<p id="timeline">No rebalance completed since this node took the group.</p>{{else}}
<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="rebalance timeline">
<line x1="0" y1="120" x2="{{.Width}}" y2="120" stroke="#999"/>
{{range .Items}}<g class="rebalance" data-generation="{{.Generation}}" data-cause="{{.Cause}}">
<title>{{.Label}} {{.Generation}}: {{.Cause}}, {{.Took}}, +{{.Joined}} −{{.Left}}, {{.Moved}} moved</title>
<text x="{{.CenterX}}" y="20" text-anchor="middle" font-weight="bold">{{.Short}} {{.Generation}}</text>
<rect x="{{.X}}" y="{{.BarY}}" width="90" height="{{.BarH}}" rx="3" fill="{{.Colour}}"/>
<circle cx="{{.CenterX}}" cy="120" r="4" fill="{{.Colour}}"/>
<text x="{{.CenterX}}" y="138" text-anchor="middle">{{.Cause}} · {{.Took}}</text>
<text x="{{.CenterX}}" y="154" text-anchor="middle"><tspan fill="#2f7d32">+{{.Joined}}</tspan> <tspan fill="#c62828">−{{.Left}}</tspan> · {{.Moved}} moved</text>
<text x="{{.CenterX}}" y="170" text-anchor="middle" fill="#666">{{.When}} UTC</text>
<text x="{{.CenterX}}" y="186" text-anchor="middle" fill="#666">{{.State}}</text>
</g>
{{end}}</svg>{{end}}{{end}}
<h2>History (newest first)</h2>
<table id="history"><tr><th>{{if .Consumer}}group epoch{{else}}generation{{end}}</th><th>completed</th><th>cause</th><th>took</th><th>joined</th><th>left</th><th>partitions moved</th></tr>
{{range .History}}<tr><td>{{.Generation}}</td><td>{{.When}}</td><td>{{.Cause}}</td><td>{{.Took}}</td><td><code>{{.Joined}}</code></td><td><code>{{.Left}}</code></td><td>{{range .Moved}}{{.}}<br>{{end}}</td></tr>
{{end}}</table>
</body></html>`))
