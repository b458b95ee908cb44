package chaos

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	clustertest "github.com/cohort-coord/cohort/cluster-test"
)

// Invariants are the checks a report lists, in order.
var Invariants = []string{"I1", "I2", "I3", "I4", "I5", "I7", "L1", "L2", "L3"}

// InvariantText says what each invariant means, for the summary.
var InvariantText = map[string]string{
	"I1": "no acknowledged commit lost or reordered (commit/fetch linearizable per group-partition)",
	"I2": "nothing stamped with generation g succeeds after a higher one was handed out",
	"I3": "generations increase per group; one membership and assignment per generation",
	"I4": "no partition owned by two members at overlapping times",
	"I5": "after the heal every partition has one live owner within 2 x session timeout",
	"I7": "every node reaches the same FSM hash",
	"L1": "every rebalance completes within rebalance timeout + 5s once faults stop",
	"L2": "no rebalance caused by a coordinator failover while members kept heartbeating",
	"L3": "a crashed member's partitions are owned again within its session timeout + one failover + the rebalance timeout + 5s",
}

// Report is a checked run.
type Report struct {
	Record     *Record
	Violations []Violation
	// Invalid lists why the run is below its workload floor (a run that is
	// invalid has not passed, whatever the checkers say).
	Invalid []string
	// Failovers are, per fault that took the leader away, the time until
	// a group request succeeded at another node.
	Failovers map[string][]time.Duration
	// Porcupine says whether the linearizability check finished.
	Porcupine porcupine.CheckResult
}

// Passed reports whether the run is valid and found no violation.
func (r *Report) Passed() bool { return len(r.Invalid) == 0 && len(r.Violations) == 0 }

// ByInvariant counts the violations per invariant.
func (r *Report) ByInvariant() map[string]int {
	out := map[string]int{}
	for _, v := range r.Violations {
		out[v.Invariant]++
	}
	return out
}

// Check runs every checker on a record and applies the floor.
func Check(rec *Record, floor Floor) *Report {
	rep := &Report{Record: rec, Failovers: failovers(rec)}
	ops := rec.ClusterOps()
	var vs []Violation
	res, i1 := checkLinearizable(rec)
	rep.Porcupine = res
	vs = append(vs, i1...)
	vs = append(vs, checkFinal(rec, ops)...)
	vs = append(vs, checkFencing(rec)...)
	vs = append(vs, checkGenerations(rec, ops)...)
	vs = append(vs, checkOwnership(rec)...)
	vs = append(vs, checkFailoverRebalances(rec)...)
	vs = append(vs, checkCrashLiveness(rec)...)
	for _, k := range slices.Sorted(maps.Keys(rec.Live)) {
		vs = append(vs, rec.Live[k]...)
	}
	sort.SliceStable(vs, func(i, j int) bool {
		return slices.Index(Invariants, vs[i].Invariant) < slices.Index(Invariants, vs[j].Invariant)
	})
	rep.Violations = vs

	d := rec.FaultsEnd.Sub(rec.FaultsStart).Seconds()
	okOps := 0
	for _, o := range rec.Ops {
		if o.OK() && !o.Start.Before(rec.FaultsStart) && !o.Start.After(rec.FaultsEnd) {
			okOps++
		}
	}
	if d > 0 && float64(okOps)/d < floor.OKOpsPerSecond {
		rep.Invalid = append(rep.Invalid, fmt.Sprintf("%.1f successful requests/s during the faults, floor %.1f", float64(okOps)/d, floor.OKOpsPerSecond))
	}
	if len(rec.Faults) < floor.Faults {
		rep.Invalid = append(rep.Invalid, fmt.Sprintf("%d faults, floor %d", len(rec.Faults), floor.Faults))
	}
	if lc := rec.LeaderChanges(); lc < floor.LeaderChanges {
		rep.Invalid = append(rep.Invalid, fmt.Sprintf("%d leader changes, floor %d", lc, floor.LeaderChanges))
	}
	if res == porcupine.Unknown {
		rep.Invalid = append(rep.Invalid, "the linearizability check timed out")
	}
	return rep
}

// surelyRefused reports whether an OffsetCommit error code means the
// commit was not written: the coordinator refused it before proposing it
// (or its fence refused it whole). Every other code may hide a write that
// was proposed and committed after all, so it is an unknown outcome.
func surelyRefused(code int16) bool {
	switch code {
	case 22, 25, 27, 82: // ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID
		return true
	}
	return false
}

// offsetInput is one operation on one committed offset.
type offsetInput struct {
	commit bool
	offset int64 // commit: the offset sent
}

type offsetOutput struct {
	unknown bool
	offset  int64 // fetch: the offset read
}

// offsetModel is a register per group-partition: a commit writes it, a
// fetch must read the latest write. A commit without an answer may or may
// not have happened.
var offsetModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{int64(-1)} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(int64), input.(offsetInput), output.(offsetOutput)
		if in.commit {
			if out.unknown {
				return []any{s, in.offset}
			}
			return []any{in.offset}
		}
		if out.offset == s {
			return []any{s}
		}
		return nil
	},
	Equal: func(a, b any) bool { return a.(int64) == b.(int64) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(offsetInput), output.(offsetOutput)
		if in.commit {
			if out.unknown {
				return fmt.Sprintf("commit %d -> ?", in.offset)
			}
			return fmt.Sprintf("commit %d", in.offset)
		}
		return fmt.Sprintf("fetch -> %d", out.offset)
	},
}

type gp struct {
	group     string
	partition int32
}

// checkLinearizable is I1: porcupine on commit/fetch per group-partition.
// Acknowledged commits are writes, commits refused before the write are
// left out, every other commit is a write of unknown outcome. Fetches that
// were answered are reads. Unknown writes are resolved from the reads
// first, as etcd's robustness tests resolve them from the WAL (offsets are
// unique per partition): one that no read returned can be left out (no
// linearization needs it, since no read sits between it and the next
// write), and one that a read returned did happen, before that read ended.
// Without this every unknown write would stay open to the end of the
// history, and proving an illegal history illegal would explode.
func checkLinearizable(rec *Record) (porcupine.CheckResult, []Violation) {
	hist := map[gp][]porcupine.Operation{}
	readEnd := map[gp]map[int64]int64{} // value -> earliest end of a read returning it
	for _, o := range rec.Ops {
		if o.Kind != OpFetch || !o.OK() {
			continue
		}
		for p, off := range o.Offsets {
			k := gp{o.Group, p}
			if readEnd[k] == nil {
				readEnd[k] = map[int64]int64{}
			}
			if e, ok := readEnd[k][off]; !ok || o.End.UnixNano() < e {
				readEnd[k][off] = o.End.UnixNano()
			}
		}
	}
	// franz-go and the member library retry a commit themselves after
	// NOT_COORDINATOR or a lost connection: the refusal they report may
	// answer a retry, while an earlier attempt took effect. Only one
	// request's own refusal is sure.
	retries := map[string]bool{}
	for _, g := range rec.Groups {
		retries[g.ID] = g.Style == "cooperative" || g.Style == styleConsumerProtocol || strings.HasPrefix(g.Style, "library")
	}
	for _, o := range rec.Ops {
		switch o.Kind {
		case clustertest.OpCommit:
			for p, off := range o.Offsets {
				k := gp{o.Group, p}
				ret := o.End.UnixNano()
				switch {
				case o.Acked[p]:
				case !o.Unknown() && surelyRefused(o.Code) && !retries[o.Group]:
					continue
				default:
					e, read := readEnd[k][off]
					if !read {
						continue
					}
					ret = max(e, o.Start.UnixNano())
				}
				hist[k] = append(hist[k], porcupine.Operation{ClientId: len(hist[k]), Input: offsetInput{true, off}, Call: o.Start.UnixNano(), Output: offsetOutput{}, Return: ret})
			}
		case OpFetch:
			if !o.OK() {
				continue
			}
			for p, off := range o.Offsets {
				k := gp{o.Group, p}
				hist[k] = append(hist[k], porcupine.Operation{ClientId: len(hist[k]), Input: offsetInput{}, Call: o.Start.UnixNano(), Output: offsetOutput{offset: off}, Return: o.End.UnixNano()})
			}
		}
	}
	model := offsetModel.ToModel()
	result := porcupine.Ok
	var vs []Violation
	keys := slices.SortedFunc(maps.Keys(hist), func(a, b gp) int {
		if a.group != b.group {
			if a.group < b.group {
				return -1
			}
			return 1
		}
		return int(a.partition - b.partition)
	})
	for _, k := range keys {
		ops := hist[k]
		res, info := porcupine.CheckOperationsVerbose(model, ops, 20*time.Second)
		switch res {
		case porcupine.Unknown:
			result = porcupine.Unknown
		case porcupine.Illegal:
			if result == porcupine.Ok {
				result = porcupine.Illegal
			}
			vs = append(vs, illegalAt(rec, k, ops, info))
		}
	}
	return result, vs
}

// illegalAt describes where the longest linearization of an illegal
// history stops: the first operation that could not be placed.
func illegalAt(rec *Record, k gp, ops []porcupine.Operation, info porcupine.LinearizationInfo) Violation {
	placed := map[int]bool{}
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > len(placed) {
				placed = map[int]bool{}
				for _, i := range lin {
					placed[i] = true
				}
			}
		}
	}
	// The earliest-starting read that no linearization could place.
	first := -1
	for i, o := range ops {
		if placed[i] || o.Input.(offsetInput).commit {
			continue
		}
		if first < 0 || o.Call < ops[first].Call {
			first = i
		}
	}
	v := Violation{Invariant: "I1", Text: fmt.Sprintf("%s partition %d: commits and fetches are not linearizable", k.group, k.partition)}
	if first >= 0 {
		o := ops[first]
		v.At = time.Unix(0, o.Call)
		// The newest acknowledged commit that ended before this read.
		var last int64 = -1
		var lastEnd int64
		for _, c := range ops {
			if in := c.Input.(offsetInput); in.commit && !c.Output.(offsetOutput).unknown && c.Return < o.Call && c.Return > lastEnd {
				last, lastEnd = in.offset, c.Return
			}
		}
		v.Text += fmt.Sprintf(": fetch at %s read %d after commit %d was acknowledged", v.At.Sub(rec.Start).Round(time.Millisecond), o.Output.(offsetOutput).offset, last)
	}
	return v
}

// checkFinal is the final read after the heal (part of I1): every
// acknowledged commit survives, through cluster-test's CheckOffsets.
func checkFinal(rec *Record, ops []*clustertest.Op) []Violation {
	fetched := map[clustertest.OffsetKey]int64{}
	groups := map[string]bool{}
	for _, f := range rec.Final {
		fetched[clustertest.OffsetKey{Group: f.Group, Topic: f.Topic, Partition: f.Partition}] = f.Offset
		groups[f.Group] = true
	}
	// Zombie commits are refused in a correct run and interleave with the
	// members' own; CheckOffsets assumes one writer per partition.
	var own []*clustertest.Op
	for _, o := range ops {
		if o.Kind == clustertest.OpCommit && groups[o.Group] && !isZombie(o.Client) {
			own = append(own, o)
		}
	}
	var vs []Violation
	for _, err := range clustertest.CheckOffsets(own, fetched) {
		vs = append(vs, Violation{Invariant: "I1", At: rec.Healed, Text: "final read: " + err.Error()})
	}
	return vs
}

func isZombie(client string) bool { return len(client) > 7 && client[:7] == "zombie-" }

// checkFencing is I2: once a JoinGroup answered generation g' of a group, no
// Heartbeat, SyncGroup or OffsetCommit stamped with an older generation
// that started later succeeds (cluster-test's CheckFencing, with times).
func checkFencing(rec *Record) []Violation {
	joins := handedOut(rec)
	var vs []Violation
	for _, o := range rec.Ops {
		if o.Kind == clustertest.OpJoin || o.Kind == OpFetch || !o.OK() || o.Gen < 0 {
			continue
		}
		if g := joins.before(o.Group, o.Start); g > o.Gen {
			vs = append(vs, Violation{"I2", o.Start, fmt.Sprintf("%s: %s of %s with generation %d succeeded at %s after generation %d was handed out",
				o.Group, o.Kind, o.Client, o.Gen, rec.nodeOfAddr(o.Node), g)})
		}
	}
	return vs
}

var (
	genRe       = regexp.MustCompile(`group (\S+) generation (\d+)`)
	twoOwnersRe = regexp.MustCompile(`assigned to (\S+) and (\S+)$`)
	notListedRe = regexp.MustCompile(`member (\S+) answered but not in the leader's list \[(.*)\]$`)
	leadersRe   = regexp.MustCompile(`answered with leader/protocol (\S+)/(\S*) and (\S+)/(\S*)$`)
)

// checkGenerations is I3: cluster-test's CheckGenerations (one leader,
// member list and assignment per generation; a client's generations never
// go back), and across clients: a generation first handed out after a
// higher one was is a generation that went back.
func checkGenerations(rec *Record, ops []*clustertest.Op) []Violation {
	first := map[genKey]time.Time{}
	for _, o := range rec.Ops {
		if o.OK() && (o.Kind == clustertest.OpJoin || o.Kind == clustertest.OpSync) {
			k := genKey{o.Group, o.Gen}
			if t, ok := first[k]; !ok || o.End.Before(t) {
				first[k] = o.End
			}
		}
	}
	// A static member that joins again without its member id replaces
	// itself (Kafka fences the old id and keeps the generation): two ids of
	// one client in one generation are one consumer, not two. When it
	// leads, the group's leader becomes its new id in that generation.
	client := map[string]string{}
	for _, o := range rec.Ops {
		// Zombies reuse the ids of the members they imitate.
		if o.MemberID != "" && !isZombie(o.Client) {
			client[o.MemberID] = o.Client
		}
	}
	sameClient := func(a string, others ...string) bool {
		for _, b := range others {
			if a != b && client[a] != "" && client[a] == client[b] {
				return true
			}
		}
		return false
	}
	var vs []Violation
	for _, err := range clustertest.CheckGenerations(ops) {
		if m := twoOwnersRe.FindStringSubmatch(err.Error()); m != nil && sameClient(m[1], m[2]) {
			continue
		}
		if m := notListedRe.FindStringSubmatch(err.Error()); m != nil && sameClient(m[1], strings.Fields(m[2])...) {
			continue
		}
		if m := leadersRe.FindStringSubmatch(err.Error()); m != nil && m[2] == m[4] && sameClient(m[1], m[3]) {
			continue
		}
		v := Violation{Invariant: "I3", Text: err.Error()}
		if m := genRe.FindStringSubmatch(err.Error()); m != nil {
			g, _ := strconv.Atoi(m[2])
			v.At = first[genKey{m[1], int32(g)}]
		}
		vs = append(vs, v)
	}
	// Across clients, in real time: a JoinGroup that started after another
	// one had been answered generation g' is never answered an older one.
	joins := handedOut(rec)
	for _, o := range rec.Ops {
		if o.Kind != clustertest.OpJoin || !o.OK() {
			continue
		}
		if g := joins.before(o.Group, o.Start); g > o.Gen {
			vs = append(vs, Violation{"I3", o.End, fmt.Sprintf("group %s: %s joined generation %d after generation %d was handed out", o.Group, o.Client, o.Gen, g)})
		}
	}
	return vs
}

// answered is when a JoinGroup answer ended and the highest generation any
// answer of the group carried by then.
type answered struct {
	end time.Time
	gen int32
}

// generations holds, per group, its JoinGroup answers in time order.
type generations map[string][]answered

// handedOut collects the successful JoinGroup answers of every group.
func handedOut(rec *Record) generations {
	joins := generations{}
	for _, o := range rec.Ops {
		if o.Kind == clustertest.OpJoin && o.OK() {
			joins[o.Group] = append(joins[o.Group], answered{o.End, o.Gen})
		}
	}
	for _, js := range joins {
		sort.Slice(js, func(i, j int) bool { return js[i].end.Before(js[j].end) })
		for i := 1; i < len(js); i++ {
			js[i].gen = max(js[i].gen, js[i-1].gen)
		}
	}
	return joins
}

// before is the highest generation group had handed out before t (-1: none).
func (g generations) before(group string, t time.Time) int32 {
	js := g[group]
	i := sort.Search(len(js), func(i int) bool { return !js[i].end.Before(t) })
	if i == 0 {
		return -1
	}
	return js[i-1].gen
}

type genKey struct {
	group string
	gen   int32
}

// Interval is one member's ownership of one partition.
type Interval struct {
	Group     string
	Partition int32
	Client    string
	From, To  time.Time
}

// Ownership derives every ownership interval: an emulated member owns its
// SyncGroup assignment from the answer until it starts its next JoinGroup
// (eager: it gives everything up first), crashes, or the run ends; a
// franz-go consumer owns what its callbacks say. Either way a member that
// had no successful request for a session timeout owns nothing from then
// on: the coordinator may expire it and hand its partitions out (Kafka's
// rule; a client is expected to stop by itself), and a consumer blocked on
// a paused coordinator learns it only when it next gets an answer.
func Ownership(rec *Record) []Interval {
	return clipSilent(rec, ownership(rec))
}

// clipSilent ends each interval a session timeout after the owner's last
// successful request when it had none for that long.
func clipSilent(rec *Record, iv []Interval) []Interval {
	if rec.SessionTimeout <= 0 {
		return iv
	}
	contact := map[string][]time.Time{}
	for _, o := range rec.Ops {
		if o.OK() && o.Kind != OpFetch {
			contact[o.Client] = append(contact[o.Client], o.End)
		}
	}
	for _, e := range rec.Events {
		if e.Kind == "assigned" {
			contact[e.Client] = append(contact[e.Client], e.At)
		}
	}
	for _, ts := range contact {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	}
	out := iv[:0]
	for _, in := range iv {
		last := in.From
		ts := contact[in.Client]
		i, _ := slices.BinarySearchFunc(ts, in.From, func(a, b time.Time) int { return a.Compare(b) })
		for ; i < len(ts) && ts[i].Before(in.To); i++ {
			if ts[i].Sub(last) > rec.SessionTimeout {
				break
			}
			last = ts[i]
		}
		if end := last.Add(rec.SessionTimeout); end.Before(in.To) {
			in.To = end
		}
		if in.To.After(in.From) {
			out = append(out, in)
		}
	}
	return out
}

func ownership(rec *Record) []Interval {
	var out []Interval
	type cur struct {
		parts []int32
		from  time.Time
		group string
	}
	open := map[string]*cur{}
	closeAll := func(client string, at time.Time) {
		if c := open[client]; c != nil {
			for _, p := range c.parts {
				out = append(out, Interval{c.group, p, client, c.from, at})
			}
			delete(open, client)
		}
	}
	type ev struct {
		at     time.Time
		client string
		group  string
		kind   string // own, release, crash
		parts  []int32
	}
	var evs []ev
	for _, o := range rec.Ops {
		switch {
		case o.Kind == clustertest.OpSync && o.OK():
			evs = append(evs, ev{o.End, o.Client, o.Group, "own", o.Assignment})
		case o.Kind == clustertest.OpJoin:
			evs = append(evs, ev{o.Start, o.Client, o.Group, "release", nil})
		}
	}
	kgoOwned := map[string]map[int32]time.Time{}
	for _, e := range rec.Events {
		switch e.Kind {
		case "crash":
			evs = append(evs, ev{e.At, e.Client, e.Group, "release", nil})
		case "assigned", "revoked", "lost":
			evs = append(evs, ev{e.At, e.Client, e.Group, "kgo-" + e.Kind, e.Partitions})
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	for _, e := range evs {
		switch e.kind {
		case "own":
			closeAll(e.client, e.at)
			open[e.client] = &cur{slices.Clone(e.parts), e.at, e.group}
		case "release":
			closeAll(e.client, e.at)
		case "kgo-assigned":
			if kgoOwned[e.client] == nil {
				kgoOwned[e.client] = map[int32]time.Time{}
			}
			for _, p := range e.parts {
				if _, ok := kgoOwned[e.client][p]; !ok {
					kgoOwned[e.client][p] = e.at
				}
			}
		case "kgo-revoked", "kgo-lost":
			for _, p := range e.parts {
				if from, ok := kgoOwned[e.client][p]; ok {
					out = append(out, Interval{e.group, p, e.client, from, e.at})
					delete(kgoOwned[e.client], p)
				}
			}
		}
	}
	for c := range open {
		closeAll(c, rec.End)
	}
	for c, ps := range kgoOwned {
		g := ""
		for _, e := range rec.Events {
			if e.Client == c {
				g = e.Group
				break
			}
		}
		for p, from := range ps {
			out = append(out, Interval{g, p, c, from, rec.End})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.From.Before(b.From)
	})
	return out
}

// checkOwnership is I4: per group-partition, no two clients' intervals
// overlap.
func checkOwnership(rec *Record) []Violation {
	var vs []Violation
	iv := Ownership(rec)
	for i := 0; i < len(iv); i++ {
		for j := i + 1; j < len(iv) && iv[j].Group == iv[i].Group && iv[j].Partition == iv[i].Partition; j++ {
			a, b := iv[i], iv[j]
			if a.Client != b.Client && b.From.Before(a.To) && a.From.Before(b.To) {
				vs = append(vs, Violation{"I4", b.From, fmt.Sprintf("%s partition %d owned by %s (from %s) and %s (from %s) at once for %v",
					a.Group, a.Partition, a.Client, a.From.Sub(rec.Start).Round(time.Millisecond), b.Client, b.From.Sub(rec.Start).Round(time.Millisecond),
					minTime(a.To, b.To).Sub(b.From).Round(time.Millisecond))})
			}
		}
	}
	return vs
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// checkFailoverRebalances is L2: a new generation of an emulated group is
// explained by a membership change of the workload (a member added or
// crashed in the session + rebalance timeout before), or by a member that
// could not heartbeat for a session timeout (it may have expired); any
// other new generation was caused by the coordinator.
func checkFailoverRebalances(rec *Record) []Violation {
	var vs []Violation
	window := rec.SessionTimeout + rec.RebalanceTimeout + 2*time.Second
	for _, g := range rec.Groups {
		if g.Style == "cooperative" || g.Style == styleConsumerProtocol {
			continue // franz-go rejoins on its own after any session loss
		}
		first := map[int32]time.Time{}
		var gens []int32
		for _, o := range rec.Ops {
			if o.Group == g.ID && o.Kind == clustertest.OpJoin && o.OK() {
				if _, ok := first[o.Gen]; !ok {
					first[o.Gen] = o.End
					gens = append(gens, o.Gen)
				}
			}
		}
		slices.Sort(gens)
		// A member added or crashed causes the next generation, however
		// late: a crashed member expires a session timeout after its last
		// heartbeat plus up to one failover (L3 bounds it), and a join
		// phase may wait a rebalance timeout for members on the far side
		// of a fault.
		caused := map[int32]bool{}
		for _, e := range rec.Events {
			if e.Group != g.ID || e.Kind != "add" && e.Kind != "crash" && e.Kind != "leave" {
				continue
			}
			for _, gen := range gens {
				if first[gen].After(e.At) {
					caused[gen] = true
					break
				}
			}
		}
		for i, gen := range gens {
			at := first[gen]
			if i == 0 || at.Before(rec.FaultsStart) {
				continue // the workload forming before the faults began
			}
			if caused[gen] || explained(rec, g.ID, at, window) {
				continue
			}
			vs = append(vs, Violation{"L2", at, fmt.Sprintf("%s: generation %d at %s without a membership change or a member out of contact for a session timeout",
				g.ID, gen, at.Sub(rec.Start).Round(time.Millisecond))})
		}
	}
	return vs
}

func explained(rec *Record, group string, at time.Time, window time.Duration) bool {
	for _, e := range rec.Events {
		if e.Group == group && (e.Kind == "add" || e.Kind == "crash" || e.Kind == "leave") && !e.At.After(at) && at.Sub(e.At) <= window {
			return true
		}
	}
	// A member whose requests all failed for a session timeout before the
	// rebalance: its session may have ended.
	last := map[string]time.Time{}
	firstSeen := map[string]time.Time{}
	for _, o := range rec.Ops {
		// The rebalance's own JoinGroup answers do not count as contact.
		if o.Group != group || o.Kind == OpFetch || o.Kind == clustertest.OpJoin || isZombie(o.Client) || o.Start.After(at) {
			continue
		}
		if _, ok := firstSeen[o.Client]; !ok {
			firstSeen[o.Client] = o.Start
		}
		if o.OK() && o.End.After(last[o.Client]) {
			last[o.Client] = o.End
		}
	}
	for c, t := range last {
		if at.Sub(t) >= rec.SessionTimeout-time.Second && !crashedBefore(rec, c, at) {
			return true
		}
	}
	// A member told UNKNOWN_MEMBER_ID (its session ended) after it had no
	// successful request for a session timeout: the expiry was earned.
	for _, o := range rec.Ops {
		if o.Group != group || o.Code != 25 || o.End.After(at) || at.Sub(o.End) > window {
			continue
		}
		var lastOK time.Time
		for _, p := range rec.Ops {
			if p.Client == o.Client && p.OK() && p.End.Before(o.Start) && p.End.After(lastOK) {
				lastOK = p.End
			}
		}
		if !lastOK.IsZero() && o.Start.Sub(lastOK) >= rec.SessionTimeout-time.Second {
			return true
		}
	}
	return false
}

func crashedBefore(rec *Record, client string, at time.Time) bool {
	for _, e := range rec.Events {
		if e.Client == client && e.Kind == "crash" && e.At.Before(at) {
			return true
		}
	}
	return false
}

// failovers measures, for every fault that took the leader away (a killed,
// paused, isolated, removed or transferred leader), the time from the fault
// until a group request (heartbeat, commit, join or sync) that started after
// it succeeded at another node.
func failovers(rec *Record) map[string][]time.Duration {
	out := map[string][]time.Duration{}
	for _, f := range rec.Faults {
		if !leaderMoved(rec, f) {
			continue
		}
		old := rec.KafkaAddrs[f.Leader]
		var best time.Time
		for _, o := range rec.Ops {
			if o.Kind == OpFetch || !o.OK() || o.Start.Before(f.Start) || o.Node == old {
				continue
			}
			if best.IsZero() || o.End.Before(best) {
				best = o.End
			}
		}
		if !best.IsZero() {
			out[f.Kind] = append(out[f.Kind], best.Sub(f.Start))
		}
	}
	return out
}

// leaderMoved reports whether another node led during the fault or within
// 5 s after it.
func leaderMoved(rec *Record, f Fault) bool {
	for _, s := range rec.Leaders {
		if !s.At.Before(f.Start) && !s.At.After(f.End.Add(5*time.Second)) && s.Leader != "" && s.Leader != f.Leader {
			return true
		}
	}
	return false
}

// Percentile returns the q-quantile of ds (nearest rank).
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
