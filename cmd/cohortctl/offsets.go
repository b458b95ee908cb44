package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The offset commands, as kafka-consumer-groups.sh and rpk group have them:
//
//	offsets reset GROUP (--topic T[:0,1] [--partitions 0,1] | --all-topics) MODE [--dry-run | --execute] [--export]
//	  MODE: --to-offset N | --shift-by N | --to-earliest | --to-latest | --to-current | --to-datetime T
//	offsets reset GROUP --from-file plan.csv [--dry-run | --execute]    (lines: topic,partition,offset)
//	offsets delete GROUP --topic T[:0,1] [--partitions 0,1]
//
// A reset prints its plan and changes nothing unless --execute is given;
// it is refused while the group has members, as Kafka refuses it, and when
// a planned partition does not exist (dry run or not). --export prints the
// plan as the CSV --from-file reads.
const (
	offsetsResetUsage  = "offsets reset GROUP (--topic T[:P,...] [--partitions P,...] | --all-topics) (--to-offset N | --shift-by N | --to-earliest | --to-latest | --to-current | --to-datetime T) [--dry-run | --execute] [--export]"
	offsetsDeleteUsage = "offsets delete GROUP --topic T[:P,...] [--partitions P,...]"
)

type resetRow struct {
	Group         string `json:"group"`
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	CurrentOffset *int64 `json:"current_offset"`
	NewOffset     int64  `json:"new_offset"`
	Executed      bool   `json:"executed"`
	Error         string `json:"error,omitempty"`
}

type partitionsFlag []int32

func (p *partitionsFlag) String() string { return fmt.Sprint([]int32(*p)) }

func (p *partitionsFlag) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || n < 0 {
			return fmt.Errorf("bad partition %q", f)
		}
		*p = append(*p, int32(n))
	}
	return nil
}

// topicSpec is one --topic: a topic, and the partitions after its colon
// (none: every partition, or those of --partitions).
type topicSpec struct {
	topic string
	parts []int32
}

type topicsFlag []topicSpec

func (t *topicsFlag) String() string { return fmt.Sprint(*t) }

func (t *topicsFlag) Set(s string) error {
	name, list, hasList := strings.Cut(s, ":")
	if name == "" {
		return fmt.Errorf("bad topic %q", s)
	}
	spec := topicSpec{topic: name}
	if hasList {
		var ps partitionsFlag
		if err := ps.Set(list); err != nil {
			return err
		}
		spec.parts = ps
	}
	*t = append(*t, spec)
	return nil
}

// parseGroupFlags parses GROUP and flags in any order; --group G names the
// group too.
func parseGroupFlags(fs *flag.FlagSet, args []string) (string, error) {
	var gs groupsFlag
	fs.Var(&gs, "group", "")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return "", err
	}
	names := append([]string(gs), pos...)
	if len(names) != 1 {
		return "", fmt.Errorf("want one group, got %q", names)
	}
	return names[0], nil
}

// topicFlags is the flag set of an offsets command with its --topic
// (repeatable, T or T:P,...) and --partitions (for every --topic without
// its own list).
func topicFlags(name string) (*flag.FlagSet, *topicsFlag, *partitionsFlag) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	parts, topics := &partitionsFlag{}, &topicsFlag{}
	fs.Var(parts, "partitions", "")
	fs.Var(topics, "topic", "")
	return fs, topics, parts
}

// specs returns the --topic specs with --partitions applied to those
// without a list of their own.
func specs(topics topicsFlag, parts partitionsFlag) []topicSpec {
	out := slices.Clone(topics)
	for i := range out {
		if out[i].parts == nil {
			out[i].parts = parts
		}
	}
	return out
}

// resetModes are the ways offsets reset computes new offsets, as
// kafka-consumer-groups.sh --reset-offsets names them.
var resetModes = []string{"to-offset", "shift-by", "to-earliest", "to-latest", "to-current", "to-datetime", "from-file"}

func (c *cli) offsetsReset(ctx context.Context, args []string) error {
	fs, topicsF, partsFlag := topicFlags("offsets reset")
	toOffset := fs.Int64("to-offset", -1, "")
	shiftBy := fs.Int64("shift-by", 0, "")
	fs.Bool("to-earliest", false, "")
	fs.Bool("to-latest", false, "")
	fs.Bool("to-current", false, "")
	toDatetime := fs.String("to-datetime", "", "")
	allTopics := fs.Bool("all-topics", false, "")
	fromFile := fs.String("from-file", "", "")
	execute := fs.Bool("execute", false, "")
	dryRun := fs.Bool("dry-run", false, "")
	export := fs.Bool("export", false, "")
	group, err := parseGroupFlags(fs, args)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() != "false" })
	var mode string
	modes := 0
	for _, m := range resetModes {
		if set[m] {
			mode = m
			modes++
		}
	}
	var at int64
	if set["to-datetime"] {
		t, perr := parseDatetime(*toDatetime)
		if perr != nil {
			return fmt.Errorf("%w: --to-datetime: %v", errUsage, perr)
		}
		at = t.UnixMilli()
	}
	switch {
	case err != nil:
		return fmt.Errorf("%w: %v: %s", errUsage, err, offsetsResetUsage)
	case modes != 1:
		return fmt.Errorf("%w: give one of --%s", errUsage, strings.Join(resetModes, ", --"))
	case set["from-file"] && (len(*topicsF) > 0 || len(*partsFlag) > 0 || *allTopics):
		return fmt.Errorf("%w: --from-file names its own partitions", errUsage)
	case *allTopics && len(*topicsF) > 0:
		return fmt.Errorf("%w: --all-topics and --topic exclude each other", errUsage)
	case !set["from-file"] && len(*topicsF) == 0 && !*allTopics:
		return fmt.Errorf("%w: name the partitions: --topic T[:P,...] (repeatable) or --all-topics", errUsage)
	case set["to-offset"] && *toOffset < 0:
		return fmt.Errorf("%w: --to-offset must not be negative", errUsage)
	case *execute && *dryRun:
		return fmt.Errorf("%w: --dry-run and --execute exclude each other", errUsage)
	case *execute && *export:
		return fmt.Errorf("%w: --export prints a dry run's plan; leave out --execute", errUsage)
	}

	found, _, err := c.describeGroups(ctx, []string{group})
	if err != nil { // a group not known yet has no members: Kafka resets its offsets too
		return err
	}
	if info := found[group]; info != nil && len(info.Members) > 0 {
		return fmt.Errorf("group %s has %d live members (state %s): stop them before resetting its offsets", group, len(info.Members), info.State)
	}
	topics, err := c.topicPartitions(ctx)
	if err != nil {
		return err
	}
	current, err := c.committed(ctx, group)
	if err != nil {
		return err
	}
	var plan []resetRow
	if set["from-file"] {
		if plan, err = readResetPlan(*fromFile); err != nil {
			return err
		}
	} else {
		sps := specs(*topicsF, *partsFlag)
		if *allTopics {
			// Kafka's --all-topics: every topic the group committed
			// offsets for, all of its partitions.
			seen := map[string]bool{}
			for k := range current {
				if !seen[k.topic] {
					seen[k.topic] = true
					sps = append(sps, topicSpec{topic: k.topic})
				}
			}
			if len(sps) == 0 {
				return fmt.Errorf("group %s has no committed offsets: --all-topics names no topic", group)
			}
			slices.SortFunc(sps, func(a, b topicSpec) int { return strings.Compare(a.topic, b.topic) })
		}
		for _, sp := range sps {
			ps := sp.parts
			if len(ps) == 0 {
				ps = topics[sp.topic]
			}
			if _, ok := topics[sp.topic]; !ok {
				return fmt.Errorf("topic %s does not exist", sp.topic)
			}
			for _, p := range ps {
				r := resetRow{Topic: sp.topic, Partition: p, NewOffset: *toOffset}
				if set["shift-by"] {
					r.NewOffset = max(0, current[tpKey{sp.topic, p}]+*shiftBy)
				}
				plan = append(plan, r)
			}
		}
	}
	for i := range plan {
		r := &plan[i]
		ps, ok := topics[r.Topic]
		switch {
		case !ok:
			return fmt.Errorf("topic %s does not exist", r.Topic)
		case !slices.Contains(ps, r.Partition):
			return fmt.Errorf("topic %s has no partition %d (it has %d)", r.Topic, r.Partition, len(ps))
		}
		r.Group = group
		if off, ok := current[tpKey{r.Topic, r.Partition}]; ok {
			r.CurrentOffset = &off
		}
	}
	if err := c.offsetsFor(ctx, mode, at, current, plan); err != nil {
		return err
	}
	slices.SortFunc(plan, func(a, b resetRow) int {
		return cmpKey(tpKey{a.Topic, a.Partition}, tpKey{b.Topic, b.Partition})
	})
	plan = slices.CompactFunc(plan, func(a, b resetRow) bool { return a.Topic == b.Topic && a.Partition == b.Partition })
	if *export {
		w := csv.NewWriter(c.out)
		for _, r := range plan {
			_ = w.Write([]string{r.Topic, strconv.Itoa(int(r.Partition)), strconv.FormatInt(r.NewOffset, 10)})
		}
		w.Flush()
		return w.Error()
	}
	if *execute {
		if err := c.commitPlan(ctx, group, plan); err != nil {
			return err
		}
	}
	var failed error
	for _, r := range plan {
		if r.Error != "" {
			failed = fmt.Errorf("reset %s: %s/%d: %s", group, r.Topic, r.Partition, r.Error)
			break
		}
	}
	err = c.print(plan, func(w *tabwriter.Writer) {
		if !*execute {
			fmt.Fprintf(w, "dry run: nothing changed (add --execute to commit these offsets for group %s)\n", group)
		}
		fmt.Fprintln(w, "GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tNEW-OFFSET\tRESULT")
		for _, r := range plan {
			res := "planned"
			switch {
			case r.Error != "":
				res = r.Error
			case r.Executed:
				res = "committed"
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\n", r.Group, r.Topic, r.Partition, num(r.CurrentOffset), r.NewOffset, res)
		}
	})
	return cmp.Or(failed, err)
}

// readResetPlan reads topic,partition,offset lines (Kafka's --from-file
// format).
func readResetPlan(path string) ([]resetRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord, r.TrimLeadingSpace, r.Comment = 3, true, '#'
	var out []resetRow
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		line, _ := r.FieldPos(0)
		p, perr := strconv.ParseInt(rec[1], 10, 32)
		o, oerr := strconv.ParseInt(rec[2], 10, 64)
		if rec[0] == "" || perr != nil || oerr != nil || p < 0 || o < 0 {
			return nil, fmt.Errorf("%s:%d: want topic,partition,offset with a non-negative partition and offset, got %q", path, line, strings.Join(rec, ","))
		}
		out = append(out, resetRow{Topic: rec[0], Partition: int32(p), NewOffset: o})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no offsets in the file", path)
	}
	return out, nil
}

// committed returns the group's committed offsets.
func (c *cli) committed(ctx context.Context, group string) (map[tpKey]int64, error) {
	var r *kmsg.OffsetFetchResponse
	err := c.byCoordinator(ctx, []string{group}, func(br *kgo.Broker, groups []string) ([]string, error) {
		of := kmsg.NewPtrOffsetFetchRequest()
		of.Group = group
		g := kmsg.NewOffsetFetchRequestGroup()
		g.Group = group
		of.Groups = append(of.Groups, g)
		resp, err := of.RequestWith(ctx, br)
		if err != nil {
			return nil, err
		}
		if retriable(resp.ErrorCode) || (len(resp.Groups) > 0 && retriable(resp.Groups[0].ErrorCode)) {
			return groups, nil
		}
		r = resp
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	var names map[[16]byte]string
	out := map[tpKey]int64{}
	add := func(t string, p int32, off int64, code int16) error {
		if err := codeErr(fmt.Sprintf("offset of %s/%d", t, p), code); err != nil {
			return err
		}
		if off >= 0 {
			out[tpKey{t, p}] = off
		}
		return nil
	}
	if len(r.Groups) > 0 {
		if r.Groups[0].ErrorCode == kerr.GroupIDNotFound.Code {
			return out, nil // no group: no offsets
		}
		if err := codeErr("fetch offsets", r.Groups[0].ErrorCode); err != nil {
			return nil, err
		}
		for _, t := range r.Groups[0].Topics {
			name := t.Topic
			if name == "" && t.TopicID != ([16]byte{}) {
				if names == nil {
					if _, names, err = c.topicIDs(ctx); err != nil {
						return nil, err
					}
				}
				name = names[t.TopicID]
			}
			for _, p := range t.Partitions {
				if err := add(name, p.Partition, p.Offset, p.ErrorCode); err != nil {
					return nil, err
				}
			}
		}
		return out, nil
	}
	if r.ErrorCode == kerr.GroupIDNotFound.Code {
		return out, nil
	}
	if err := codeErr("fetch offsets", r.ErrorCode); err != nil {
		return nil, err
	}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if err := add(t.Topic, p.Partition, p.Offset, p.ErrorCode); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// topicIDs maps every topic's id to its name and back (OffsetCommit and
// OffsetFetch v10 name topics by id).
func (c *cli) topicIDs(ctx context.Context) (map[string][16]byte, map[[16]byte]string, error) {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, c.cl)
	if err != nil {
		return nil, nil, err
	}
	ids, names := map[string][16]byte{}, map[[16]byte]string{}
	for _, t := range resp.Topics {
		if t.Topic != nil && t.TopicID != ([16]byte{}) {
			ids[*t.Topic], names[t.TopicID] = t.TopicID, *t.Topic
		}
	}
	return ids, names, nil
}

// commitPlan commits the plan as an admin commit (no member, generation
// -1), which an empty group accepts.
func (c *cli) commitPlan(ctx context.Context, group string, plan []resetRow) error {
	ids, names, err := c.topicIDs(ctx)
	if err != nil {
		return err
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	idx := map[string]int{}
	for _, r := range plan {
		i, ok := idx[r.Topic]
		if !ok {
			t := kmsg.NewOffsetCommitRequestTopic()
			t.Topic, t.TopicID = r.Topic, ids[r.Topic]
			req.Topics = append(req.Topics, t)
			i = len(req.Topics) - 1
			idx[r.Topic] = i
		}
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Partition, p.Offset, p.LeaderEpoch = r.Partition, r.NewOffset, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
	}
	var resp *kmsg.OffsetCommitResponse
	err = c.byCoordinator(ctx, []string{group}, func(br *kgo.Broker, groups []string) ([]string, error) {
		r, err := req.RequestWith(ctx, br)
		if err != nil {
			return nil, err
		}
		for _, t := range r.Topics {
			for _, p := range t.Partitions {
				if retriable(p.ErrorCode) {
					return groups, nil
				}
			}
		}
		resp = r
		return nil, nil
	})
	if err != nil {
		return err
	}
	results := map[tpKey]int16{}
	for _, t := range resp.Topics {
		name := cmp.Or(t.Topic, names[t.TopicID])
		for _, p := range t.Partitions {
			results[tpKey{name, p.Partition}] = p.ErrorCode
		}
	}
	for i := range plan {
		code, ok := results[tpKey{plan[i].Topic, plan[i].Partition}]
		switch {
		case !ok:
			plan[i].Error = "no answer for this partition"
		case code != 0:
			plan[i].Error = codeErr("commit", code).Error()
		default:
			plan[i].Executed = true
		}
	}
	return nil
}

type deleteRow struct {
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Deleted   bool   `json:"deleted"`
	Error     string `json:"error,omitempty"`
}

func (c *cli) offsetsDelete(ctx context.Context, args []string) error {
	fs, topicsF, partsFlag := topicFlags("offsets delete")
	group, err := parseGroupFlags(fs, args)
	if err != nil || len(*topicsF) == 0 {
		return fmt.Errorf("%w: %s", errUsage, offsetsDeleteUsage)
	}
	var current map[tpKey]int64
	req := kmsg.NewPtrOffsetDeleteRequest()
	req.Group = group
	for _, sp := range specs(*topicsF, *partsFlag) {
		if len(sp.parts) == 0 {
			if current == nil {
				if current, err = c.committed(ctx, group); err != nil {
					return err
				}
			}
			for k := range current {
				if k.topic == sp.topic {
					sp.parts = append(sp.parts, k.partition)
				}
			}
			slices.Sort(sp.parts)
			if len(sp.parts) == 0 {
				return fmt.Errorf("group %s has no committed offsets for topic %s", group, sp.topic)
			}
		}
		t := kmsg.NewOffsetDeleteRequestTopic()
		t.Topic = sp.topic
		for _, p := range sp.parts {
			rp := kmsg.NewOffsetDeleteRequestTopicPartition()
			rp.Partition = p
			t.Partitions = append(t.Partitions, rp)
		}
		req.Topics = append(req.Topics, t)
	}
	var resp *kmsg.OffsetDeleteResponse
	err = c.byCoordinator(ctx, []string{group}, func(br *kgo.Broker, groups []string) ([]string, error) {
		r, err := req.RequestWith(ctx, br)
		if err != nil {
			return nil, err
		}
		if retriable(r.ErrorCode) {
			return groups, nil
		}
		resp = r
		return nil, nil
	})
	if err != nil {
		return err
	}
	if resp.ErrorCode == kerr.GroupIDNotFound.Code {
		return fmt.Errorf("group %s %w", group, errNoGroup)
	}
	if err := codeErr("delete offsets of "+group, resp.ErrorCode); err != nil {
		return err
	}
	var rows []deleteRow
	var failed error
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			r := deleteRow{Group: group, Topic: rt.Topic, Partition: rp.Partition, Deleted: rp.ErrorCode == 0}
			if err := codeErr(fmt.Sprintf("delete %s/%d", rt.Topic, rp.Partition), rp.ErrorCode); err != nil {
				r.Error = err.Error()
				failed = cmp.Or(failed, err)
			}
			rows = append(rows, r)
		}
	}
	slices.SortFunc(rows, func(a, b deleteRow) int {
		return cmpKey(tpKey{a.Topic, a.Partition}, tpKey{b.Topic, b.Partition})
	})
	err = c.print(rows, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "GROUP\tTOPIC\tPARTITION\tRESULT")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", r.Group, r.Topic, r.Partition, cmp.Or(r.Error, "deleted"))
		}
	})
	return cmp.Or(failed, err)
}

func (c *cli) topicsDelete(ctx context.Context, name string) error {
	req := kmsg.NewPtrDeleteTopicsRequest()
	req.TimeoutMillis = int32(c.timeout.Milliseconds())
	req.TopicNames = []string{name}
	t := kmsg.NewDeleteTopicsRequestTopic()
	t.Topic = &name
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("delete %s: %d topics in the answer", name, len(resp.Topics))
	}
	if err := codeErr("delete "+name, resp.Topics[0].ErrorCode); err != nil {
		return err
	}
	return c.printDeleted("topic", name)
}

// offsetsFor sets the new offsets of the modes that read the log:
// --to-earliest, --to-latest and --to-datetime (ListOffsets), and
// --to-current (the committed offset; the log end for a partition with
// none, as Kafka does).
func (c *cli) offsetsFor(ctx context.Context, mode string, at int64, current map[tpKey]int64, plan []resetRow) error {
	var ts int64
	switch mode {
	case "to-earliest":
		ts = -2
	case "to-latest", "to-current":
		ts = -1
	case "to-datetime":
		ts = at
	default:
		return nil
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	idx := map[string]int{}
	for _, r := range plan {
		i, ok := idx[r.Topic]
		if !ok {
			t := kmsg.NewListOffsetsRequestTopic()
			t.Topic = r.Topic
			req.Topics = append(req.Topics, t)
			i = len(req.Topics) - 1
			idx[r.Topic] = i
		}
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition, p.Timestamp, p.CurrentLeaderEpoch = r.Partition, ts, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, p)
	}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return err
	}
	got := map[tpKey]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := codeErr(fmt.Sprintf("list offsets of %s/%d", t.Topic, p.Partition), p.ErrorCode); err != nil {
				return err
			}
			got[tpKey{t.Topic, p.Partition}] = p.Offset
		}
	}
	var ends map[tpKey]int64
	for i := range plan {
		k := tpKey{plan[i].Topic, plan[i].Partition}
		off, ok := got[k]
		if !ok {
			return fmt.Errorf("list offsets: no answer for %s/%d", k.topic, k.partition)
		}
		if cur, ok := current[k]; ok && mode == "to-current" {
			off = cur
		}
		if off < 0 && mode == "to-datetime" {
			// No record at or after the time: the log end, as Kafka.
			if ends == nil {
				ends = map[tpKey]int64{}
				latest := slices.Clone(plan)
				if err := c.offsetsFor(ctx, "to-latest", 0, nil, latest); err != nil {
					return err
				}
				for _, r := range latest {
					ends[tpKey{r.Topic, r.Partition}] = r.NewOffset
				}
			}
			off = ends[k]
		}
		plan[i].NewOffset = max(off, 0)
	}
	return nil
}

// parseDatetime reads --to-datetime as kafka-consumer-groups.sh does:
// YYYY-MM-DDTHH:mm:SS.sss, the fraction optional, with a zone (Z or
// +hh:mm) or in local time.
func parseDatetime(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02T15:04:05.999999999Z07:00", "2006-01-02T15:04:05.999999999Z0700"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	if t, err := time.ParseInLocation("2006-01-02T15:04:05.999999999", s, time.Local); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q: want YYYY-MM-DDTHH:mm:SS[.sss] with an optional Z or +hh:mm", s)
}
