package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/kafka"
)

// errNoGroup is a named group that does not exist (exit status 1, as
// kafka-consumer-groups.sh's "Consumer group 'g' does not exist.").
var errNoGroup = errors.New("does not exist")

type groupsFlag []string

func (g *groupsFlag) String() string { return strings.Join(*g, ",") }

func (g *groupsFlag) Set(s string) error {
	if s == "" {
		return errors.New("empty group name")
	}
	*g = append(*g, s)
	return nil
}

// groupArgs parses the group selection of groups describe and offsets:
// group names, --group G (repeatable) and --all-groups, flags and names in
// any order. more registers the command's own flags.
func groupArgs(name string, args []string, more func(*flag.FlagSet)) (names []string, all bool, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var gs groupsFlag
	fs.Var(&gs, "group", "")
	allGroups := fs.Bool("all-groups", false, "")
	if more != nil {
		more(fs)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return nil, false, err
	}
	names = append([]string(gs), pos...)
	if *allGroups == (len(names) > 0) {
		return nil, false, errors.New("name groups or give --all-groups")
	}
	return names, *allGroups, nil
}

// parseInterleaved parses flags and positional arguments in any order.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

// selectGroups returns the named groups, deduplicated in order, or with
// all every group the cluster lists, sorted.
func (c *cli) selectGroups(ctx context.Context, names []string, all bool) ([]string, error) {
	if !all {
		var out []string
		seen := map[string]bool{}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
		return out, nil
	}
	listed, err := c.listGroups(ctx)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, g := range listed {
		out = append(out, g.Group)
	}
	return out, nil
}

type groupMember struct {
	Group      string             `json:"group"`
	ConsumerID string             `json:"consumer_id"`
	InstanceID string             `json:"instance_id"`
	Host       string             `json:"host"`
	ClientID   string             `json:"client_id"`
	Partitions int                `json:"partitions"`
	Assignment map[string][]int32 `json:"assignment"`
	// AssignmentBytes is set when the assignment is not in the consumer
	// protocol format.
	AssignmentBytes int `json:"assignment_bytes,omitempty"`
	// A consumer-protocol (KIP-848) member's epoch and target assignment.
	MemberEpoch *int32             `json:"member_epoch,omitempty"`
	Target      map[string][]int32 `json:"target,omitempty"`
}

// groupState is what groups describe --state shows of a group.
type groupState struct {
	Group         string `json:"group"`
	Coordinator   string `json:"coordinator"`
	CoordinatorID *int32 `json:"coordinator_id"`
	State         string `json:"state"`
	// Type is "classic", or "consumer" for a group of the consumer group
	// protocol (KIP-848), whose generation is its group epoch.
	Type         string `json:"type"`
	ProtocolType string `json:"protocol_type"`
	Protocol     string `json:"protocol"`
	Generation   *int32 `json:"generation"`
	NumMembers   int    `json:"num_members"`
	// AssignmentEpoch is a consumer group's target assignment epoch.
	AssignmentEpoch *int32 `json:"assignment_epoch,omitempty"`
}

// groupInfo is everything groups describe shows of a group.
type groupInfo struct {
	groupState
	TotalLag int64         `json:"total_lag"`
	Members  []groupMember `json:"members"`
	Offsets  []offsetRow   `json:"offsets"`
}

// offsetRow is one partition of a group, kafka-consumer-groups.sh's row.
type offsetRow struct {
	Group         string `json:"group"`
	Topic         string `json:"topic"`
	Partition     int32  `json:"partition"`
	CurrentOffset *int64 `json:"current_offset"`
	LogEndOffset  *int64 `json:"log_end_offset"`
	Lag           *int64 `json:"lag"`
	ConsumerID    string `json:"consumer_id"`
	Host          string `json:"host"`
	ClientID      string `json:"client_id"`
}

type tpKey struct {
	topic     string
	partition int32
}

// describeGroups describes groups as Kafka's admin client does: the
// consumer-protocol (KIP-848) groups among them with ConsumerGroupDescribe,
// the others with DescribeGroups (a KIP-848 group's DescribeGroups answer
// is not its state: Kafka refuses it, kfake answers it Stable with no
// members); each request goes to the group's coordinator. missing lists
// the groups that do not exist (Dead without an error below DescribeGroups
// v6, GROUP_ID_NOT_FOUND from it, as Kafka answers them).
func (c *cli) describeGroups(ctx context.Context, groups []string) (found map[string]*groupInfo, missing []string, err error) {
	found = map[string]*groupInfo{}
	if err := c.describeConsumerGroups(ctx, groups, found); err != nil {
		return nil, nil, err
	}
	var rest []string
	for _, g := range groups {
		if found[g] == nil {
			rest = append(rest, g)
		}
	}
	if len(rest) > 0 {
		err = c.byCoordinator(ctx, rest, func(br *kgo.Broker, groups []string) ([]string, error) {
			req := kmsg.NewPtrDescribeGroupsRequest()
			req.Groups = groups
			resp, err := req.RequestWith(ctx, br)
			if err != nil {
				return nil, err
			}
			var retry []string
			for _, g := range resp.Groups {
				if retriable(g.ErrorCode) {
					retry = append(retry, g.Group)
					continue
				}
				if g.ErrorCode == kerr.GroupIDNotFound.Code || (g.ErrorCode == 0 && g.State == "Dead") {
					continue
				}
				if err := codeErr("describe "+g.Group, g.ErrorCode); err != nil {
					return nil, err
				}
				found[g.Group] = classicInfo(g)
			}
			return retry, nil
		})
		if err != nil {
			return nil, nil, err
		}
	}
	for _, g := range rest {
		if found[g] == nil {
			missing = append(missing, g)
		}
	}
	return found, missing, nil
}

// classicInfo is what a DescribeGroups answer tells of a group.
func classicInfo(g kmsg.DescribeGroupsResponseGroup) *groupInfo {
	info := &groupInfo{groupState: groupState{Group: g.Group, Type: "classic", State: g.State, ProtocolType: g.ProtocolType, Protocol: g.Protocol},
		Members: []groupMember{}, Offsets: []offsetRow{}}
	if gen, ok := kafka.GenerationFromTags(g.UnknownTags); ok {
		info.Generation = &gen
	}
	for _, m := range g.Members {
		gm := groupMember{Group: g.Group, ConsumerID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Assignment: map[string][]int32{}}
		if m.InstanceID != nil {
			gm.InstanceID = *m.InstanceID
		}
		if len(m.MemberAssignment) > 0 {
			var a kmsg.ConsumerMemberAssignment
			if g.ProtocolType == "consumer" && a.ReadFrom(m.MemberAssignment) == nil {
				for _, t := range a.Topics {
					gm.Assignment[t.Topic] = append(gm.Assignment[t.Topic], t.Partitions...)
					gm.Partitions += len(t.Partitions)
				}
				for _, ps := range gm.Assignment {
					slices.Sort(ps)
				}
			} else {
				gm.AssignmentBytes = len(m.MemberAssignment)
			}
		}
		info.Members = append(info.Members, gm)
	}
	slices.SortFunc(info.Members, func(a, b groupMember) int { return strings.Compare(a.ConsumerID, b.ConsumerID) })
	info.NumMembers = len(info.Members)
	return info
}

// describeConsumerGroups describes the consumer-protocol (KIP-848) groups
// among groups (ConsumerGroupDescribe) into found; a group that is not one,
// or a coordinator without the API, adds nothing.
func (c *cli) describeConsumerGroups(ctx context.Context, groups []string, found map[string]*groupInfo) error {
	return c.byCoordinator(ctx, groups, func(br *kgo.Broker, groups []string) ([]string, error) {
		req := kmsg.NewPtrConsumerGroupDescribeRequest()
		req.Groups = groups
		resp, err := req.RequestWith(ctx, br)
		if err != nil {
			// A coordinator without the API (a Kafka before 4.0): franz-go
			// refuses to send it, with an error it does not export.
			if errors.Is(err, kerr.UnsupportedVersion) || strings.Contains(err.Error(), "broker is too old") {
				return nil, nil
			}
			return nil, err
		}
		var retry []string
		for _, g := range resp.Groups {
			if retriable(g.ErrorCode) {
				retry = append(retry, g.Group)
				continue
			}
			if g.ErrorCode == kerr.GroupIDNotFound.Code || g.ErrorCode == kerr.UnsupportedVersion.Code {
				continue
			}
			if err := codeErr("describe "+g.Group, g.ErrorCode); err != nil {
				return nil, err
			}
			found[g.Group] = consumerInfo(g)
		}
		return retry, nil
	})
}

// consumerInfo is what a ConsumerGroupDescribe answer tells of a group.
func consumerInfo(g kmsg.ConsumerGroupDescribeResponseGroup) *groupInfo {
	epoch, assigned := g.Epoch, g.AssignmentEpoch
	info := &groupInfo{groupState: groupState{Group: g.Group, Type: "consumer", State: g.State, ProtocolType: "consumer", Protocol: g.AssignorName,
		Generation: &epoch, AssignmentEpoch: &assigned}, Members: []groupMember{}, Offsets: []offsetRow{}}
	for _, m := range g.Members {
		memberEpoch := m.MemberEpoch
		gm := groupMember{Group: g.Group, ConsumerID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, MemberEpoch: &memberEpoch,
			Assignment: map[string][]int32{}, Target: map[string][]int32{}}
		if m.InstanceID != nil {
			gm.InstanceID = *m.InstanceID
		}
		for _, t := range m.Assignment.TopicPartitions {
			gm.Assignment[t.Topic] = append(gm.Assignment[t.Topic], t.Partitions...)
			gm.Partitions += len(t.Partitions)
		}
		for _, t := range m.TargetAssignment.TopicPartitions {
			gm.Target[t.Topic] = append(gm.Target[t.Topic], t.Partitions...)
		}
		for _, l := range []map[string][]int32{gm.Assignment, gm.Target} {
			for _, ps := range l {
				slices.Sort(ps)
			}
		}
		info.Members = append(info.Members, gm)
	}
	slices.SortFunc(info.Members, func(a, b groupMember) int { return strings.Compare(a.ConsumerID, b.ConsumerID) })
	info.NumMembers = len(info.Members)
	return info
}

// coordinators fills in each group's coordinator (FindCoordinator).
func (c *cli) coordinators(ctx context.Context, infos []*groupInfo) {
	if len(infos) == 0 {
		return
	}
	var keys []string
	for _, in := range infos {
		keys = append(keys, in.Group)
	}
	coords, err := c.findCoordinators(ctx, keys)
	if err != nil {
		return // the column stays "-": describing does not depend on it
	}
	for _, in := range infos {
		if co, ok := coords[in.Group]; ok && co.code == 0 {
			id := co.id
			in.CoordinatorID, in.Coordinator = &id, net.JoinHostPort(co.host, strconv.Itoa(int(co.port)))
		}
	}
}

// topicPartitions maps every existing topic to its partitions, from a
// Metadata request for all topics: naming a topic would create it on a
// broker with auto-creation (cohort's default, to serve librdkafka
// consumers that never ask for it).
func (c *cli) topicPartitions(ctx context.Context) (map[string][]int32, error) {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, c.cl)
	if err != nil {
		return nil, err
	}
	out := map[string][]int32{}
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		ps := []int32{}
		for _, p := range t.Partitions {
			ps = append(ps, p.Partition)
		}
		slices.Sort(ps)
		out[*t.Topic] = ps
	}
	return out, nil
}

// fillOffsets adds each group's partitions: committed offsets, owners,
// log ends and lag.
func (c *cli) fillOffsets(ctx context.Context, infos []*groupInfo) error {
	topics, err := c.topicPartitions(ctx)
	if err != nil {
		return err
	}
	ends := map[tpKey]int64{}
	want := map[tpKey]bool{}
	rowsOf := make([]map[tpKey]*offsetRow, len(infos))
	for i, in := range infos {
		rows := map[tpKey]*offsetRow{}
		row := func(t string, p int32) *offsetRow {
			k := tpKey{t, p}
			if rows[k] == nil {
				rows[k] = &offsetRow{Group: in.Group, Topic: t, Partition: p}
			}
			if slices.Contains(topics[t], p) {
				want[k] = true
			}
			return rows[k]
		}
		for _, m := range in.Members {
			for t, ps := range m.Assignment {
				for _, p := range ps {
					r := row(t, p)
					r.ConsumerID, r.ClientID, r.Host = m.ConsumerID, m.ClientID, m.Host
				}
			}
		}
		committed, err := c.committed(ctx, in.Group)
		if err != nil {
			return err
		}
		for k, off := range committed {
			row(k.topic, k.partition).CurrentOffset = &off
		}
		rowsOf[i] = rows
	}
	if len(want) > 0 {
		lo := kmsg.NewPtrListOffsetsRequest()
		byTopic := map[string]int{}
		for _, k := range slices.SortedFunc(maps.Keys(want), cmpKey) {
			i, ok := byTopic[k.topic]
			if !ok {
				t := kmsg.NewListOffsetsRequestTopic()
				t.Topic = k.topic
				lo.Topics = append(lo.Topics, t)
				i = len(lo.Topics) - 1
				byTopic[k.topic] = i
			}
			p := kmsg.NewListOffsetsRequestTopicPartition()
			p.Partition, p.Timestamp = k.partition, -1
			lo.Topics[i].Partitions = append(lo.Topics[i].Partitions, p)
		}
		if lor, err := lo.RequestWith(ctx, c.cl); err == nil {
			for _, t := range lor.Topics {
				for _, p := range t.Partitions {
					if p.ErrorCode == 0 {
						ends[tpKey{t.Topic, p.Partition}] = p.Offset
					}
				}
			}
		}
	}
	for i, in := range infos {
		for k, r := range rowsOf[i] {
			if end, ok := ends[k]; ok {
				r.LogEndOffset = &end
				if r.CurrentOffset != nil {
					lag := max(end-*r.CurrentOffset, 0)
					r.Lag = &lag
					in.TotalLag += lag
				}
			}
			in.Offsets = append(in.Offsets, *r)
		}
		slices.SortFunc(in.Offsets, func(a, b offsetRow) int {
			return cmpKey(tpKey{a.Topic, a.Partition}, tpKey{b.Topic, b.Partition})
		})
	}
	return nil
}

func cmpKey(a, b tpKey) int {
	return cmp.Or(strings.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
}

// describeView selects what groups describe shows: everything, only the
// members (--members) or only the state (--state), as
// kafka-consumer-groups.sh --describe does.
type describeView int

const (
	viewAll describeView = iota
	viewMembers
	viewState
	viewOffsets // the offsets command: the partition table alone
)

// groupsDescribe describes the selected groups. Groups that do not exist
// are reported after the others, as one error.
func (c *cli) groupsDescribe(ctx context.Context, names []string, all bool, view describeView) error {
	groups, err := c.selectGroups(ctx, names, all)
	if err != nil {
		return err
	}
	var infos []*groupInfo
	var missing []string
	if len(groups) > 0 {
		found, miss, err := c.describeGroups(ctx, groups)
		if err != nil {
			return err
		}
		missing = miss
		for _, g := range groups {
			if found[g] != nil {
				infos = append(infos, found[g])
			}
		}
	}
	if view != viewMembers && view != viewOffsets {
		c.coordinators(ctx, infos)
	}
	if view == viewAll || view == viewOffsets {
		if err := c.fillOffsets(ctx, infos); err != nil {
			return err
		}
	}
	if err := c.printGroups(infos, view); err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("group %s %w", strings.Join(missing, ", "), errNoGroup)
	}
	return nil
}

const offsetsHeader = "GROUP\tTOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER-ID\tHOST\tCLIENT-ID"

func (c *cli) printGroups(infos []*groupInfo, view describeView) error {
	switch view {
	case viewState:
		states := []groupState{}
		for _, in := range infos {
			states = append(states, in.groupState)
		}
		return c.print(states, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "GROUP\tCOORDINATOR\tSTATE\tPROTOCOL-TYPE\tASSIGNMENT-STRATEGY\tGENERATION\t#MEMBERS")
			for _, s := range states {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", s.Group, coordinatorCell(s), s.State, dash(s.ProtocolType), dash(s.Protocol), num32(s.Generation), s.NumMembers)
			}
		})
	case viewMembers:
		members := []groupMember{}
		for _, in := range infos {
			members = append(members, in.Members...)
		}
		return c.print(members, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "GROUP\tCONSUMER-ID\tINSTANCE-ID\tHOST\tCLIENT-ID\t#PARTITIONS\tASSIGNMENT")
			for _, m := range members {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.Group, m.ConsumerID, dash(m.InstanceID), m.Host, m.ClientID, m.Partitions, formatAssignment(m))
			}
		})
	case viewOffsets:
		rows := []offsetRow{}
		for _, in := range infos {
			rows = append(rows, in.Offsets...)
		}
		return c.print(rows, func(w *tabwriter.Writer) { writeOffsetRows(w, rows) })
	}
	list := []groupInfo{}
	for _, in := range infos {
		list = append(list, *in)
	}
	return c.print(list, func(w *tabwriter.Writer) {
		for i, in := range list {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "GROUP\t%s\nCOORDINATOR\t%s\nSTATE\t%s\nPROTOCOL-TYPE\t%s\nASSIGNMENT-STRATEGY\t%s\nGENERATION\t%s\nMEMBERS\t%d\nTOTAL-LAG\t%d\n\n",
				in.Group, coordinatorCell(in.groupState), in.State, dash(in.ProtocolType), dash(in.Protocol), num32(in.Generation), in.NumMembers, in.TotalLag)
			writeOffsetRows(w, in.Offsets)
		}
	})
}

func writeOffsetRows(w *tabwriter.Writer, rows []offsetRow) {
	fmt.Fprintln(w, offsetsHeader)
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Group, r.Topic, r.Partition, num(r.CurrentOffset), num(r.LogEndOffset), num(r.Lag),
			dash(r.ConsumerID), dash(r.Host), dash(r.ClientID))
	}
}

func coordinatorCell(s groupState) string {
	if s.CoordinatorID == nil {
		return "-"
	}
	return fmt.Sprintf("%s (%d)", s.Coordinator, *s.CoordinatorID)
}

func num32(v *int32) string {
	if v == nil {
		return "-"
	}
	return strconv.Itoa(int(*v))
}

func formatAssignment(m groupMember) string {
	if m.AssignmentBytes > 0 {
		return fmt.Sprintf("<%d bytes>", m.AssignmentBytes)
	}
	if len(m.Assignment) == 0 {
		return "-"
	}
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(m.Assignment)) {
		ps := make([]string, len(m.Assignment[t]))
		for i, p := range m.Assignment[t] {
			ps[i] = strconv.Itoa(int(p))
		}
		parts = append(parts, t+":"+strings.Join(ps, ","))
	}
	return strings.Join(parts, " ")
}
