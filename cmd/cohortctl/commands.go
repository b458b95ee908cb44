package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/kafka"
)

func codeErr(what string, code int16) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", what, kerr.ErrorForCode(code))
}

type listedGroup struct {
	Group        string `json:"group"`
	ProtocolType string `json:"protocol_type"`
	State        string `json:"state,omitempty"`
	Type         string `json:"type,omitempty"`
}

func (c *cli) groupsList(ctx context.Context) error {
	resp, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, c.cl)
	if err != nil {
		return err
	}
	if err := codeErr("list groups", resp.ErrorCode); err != nil {
		return err
	}
	rows := []listedGroup{}
	for _, g := range resp.Groups {
		rows = append(rows, listedGroup{g.Group, g.ProtocolType, g.GroupState, g.GroupType})
	}
	slices.SortFunc(rows, func(a, b listedGroup) int { return strings.Compare(a.Group, b.Group) })
	return c.print(rows, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "GROUP\tPROTOCOL TYPE\tSTATE\tTYPE")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Group, dash(r.ProtocolType), dash(r.State), dash(r.Type))
		}
	})
}

type groupMember struct {
	MemberID   string             `json:"member_id"`
	InstanceID string             `json:"instance_id,omitempty"`
	ClientID   string             `json:"client_id"`
	ClientHost string             `json:"client_host"`
	Assignment map[string][]int32 `json:"assignment"`
	// AssignmentBytes is set when the assignment is not in the consumer
	// protocol format.
	AssignmentBytes int `json:"assignment_bytes,omitempty"`
}

type groupInfo struct {
	Group        string        `json:"group"`
	State        string        `json:"state"`
	ProtocolType string        `json:"protocol_type"`
	Protocol     string        `json:"protocol"`
	Generation   *int32        `json:"generation,omitempty"`
	Members      []groupMember `json:"members"`
}

func (c *cli) describe(ctx context.Context, group string) (groupInfo, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return groupInfo{}, err
	}
	if len(resp.Groups) != 1 {
		return groupInfo{}, fmt.Errorf("describe %s: %d groups in the answer", group, len(resp.Groups))
	}
	g := resp.Groups[0]
	if err := codeErr("describe "+group, g.ErrorCode); err != nil {
		return groupInfo{}, err
	}
	info := groupInfo{Group: g.Group, State: g.State, ProtocolType: g.ProtocolType, Protocol: g.Protocol, Members: []groupMember{}}
	if gen, ok := kafka.GenerationFromTags(g.UnknownTags); ok {
		info.Generation = &gen
	}
	for _, m := range g.Members {
		gm := groupMember{MemberID: m.MemberID, ClientID: m.ClientID, ClientHost: m.ClientHost, Assignment: map[string][]int32{}}
		if m.InstanceID != nil {
			gm.InstanceID = *m.InstanceID
		}
		if len(m.MemberAssignment) > 0 {
			var a kmsg.ConsumerMemberAssignment
			if g.ProtocolType == "consumer" && a.ReadFrom(m.MemberAssignment) == nil {
				for _, t := range a.Topics {
					ps := slices.Clone(t.Partitions)
					slices.Sort(ps)
					gm.Assignment[t.Topic] = append(gm.Assignment[t.Topic], ps...)
				}
			} else {
				gm.AssignmentBytes = len(m.MemberAssignment)
			}
		}
		info.Members = append(info.Members, gm)
	}
	slices.SortFunc(info.Members, func(a, b groupMember) int { return strings.Compare(a.MemberID, b.MemberID) })
	return info, nil
}

// describeView selects what groups describe shows: everything, only the
// members (--members) or only the state (--state), as
// kafka-consumer-groups.sh --describe does.
type describeView int

const (
	viewAll describeView = iota
	viewMembers
	viewState
)

type groupState struct {
	Group        string `json:"group"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
	Protocol     string `json:"protocol"`
	Generation   *int32 `json:"generation,omitempty"`
	Members      int    `json:"members"`
}

func (c *cli) groupsDescribe(ctx context.Context, group string, view describeView) error {
	info, err := c.describe(ctx, group)
	if err != nil {
		return err
	}
	gen := "-"
	if info.Generation != nil {
		gen = strconv.Itoa(int(*info.Generation))
	}
	switch view {
	case viewState:
		st := groupState{info.Group, info.State, info.ProtocolType, info.Protocol, info.Generation, len(info.Members)}
		return c.print(st, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "GROUP\tSTATE\tPROTOCOL TYPE\tPROTOCOL\tGENERATION\tMEMBERS")
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\n", st.Group, st.State, dash(st.ProtocolType), dash(st.Protocol), gen, st.Members)
		})
	case viewMembers:
		return c.print(info.Members, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "MEMBER\tINSTANCE\tCLIENT\tHOST\tPARTITIONS\tASSIGNMENT")
			for _, m := range info.Members {
				n := 0
				for _, ps := range m.Assignment {
					n += len(ps)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\n", m.MemberID, dash(m.InstanceID), m.ClientID, m.ClientHost, n, formatAssignment(m))
			}
		})
	}
	return c.print(info, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "GROUP\t%s\nSTATE\t%s\nPROTOCOL TYPE\t%s\nPROTOCOL\t%s\nGENERATION\t%s\nMEMBERS\t%d\n\n",
			info.Group, info.State, dash(info.ProtocolType), dash(info.Protocol), gen, len(info.Members))
		if len(info.Members) == 0 {
			return
		}
		fmt.Fprintln(w, "MEMBER\tINSTANCE\tCLIENT\tHOST\tASSIGNMENT")
		for _, m := range info.Members {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.MemberID, dash(m.InstanceID), m.ClientID, m.ClientHost, formatAssignment(m))
		}
	})
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

func (c *cli) groupsDelete(ctx context.Context, group string) error {
	req := kmsg.NewPtrDeleteGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return err
	}
	if len(resp.Groups) != 1 {
		return fmt.Errorf("delete %s: %d groups in the answer", group, len(resp.Groups))
	}
	if err := codeErr("delete "+group, resp.Groups[0].ErrorCode); err != nil {
		return err
	}
	return c.printDeleted("group", group)
}

// printDeleted reports that the named group or topic was deleted.
func (c *cli) printDeleted(kind, name string) error {
	return c.print(map[string]any{kind: name, "deleted": true}, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "deleted %s %s\n", kind, name)
	})
}

type offsetRow struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Committed *int64 `json:"committed"`
	LogEnd    *int64 `json:"log_end"`
	Lag       *int64 `json:"lag"`
	MemberID  string `json:"member_id,omitempty"`
	ClientID  string `json:"client_id,omitempty"`
	Host      string `json:"host,omitempty"`
}

type tpKey struct {
	topic     string
	partition int32
}

func (c *cli) offsets(ctx context.Context, group string) error {
	info, err := c.describe(ctx, group)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) { // no group: no offsets, no owners
		return err
	}
	rows := map[tpKey]*offsetRow{}
	row := func(t string, p int32) *offsetRow {
		k := tpKey{t, p}
		if rows[k] == nil {
			rows[k] = &offsetRow{Topic: t, Partition: p}
		}
		return rows[k]
	}
	for _, m := range info.Members {
		for t, ps := range m.Assignment {
			for _, p := range ps {
				r := row(t, p)
				r.MemberID, r.ClientID, r.Host = m.MemberID, m.ClientID, m.ClientHost
			}
		}
	}

	// Committed offsets: every topic (null topic list).
	committed, err := c.committed(ctx, group)
	if err != nil {
		return err
	}
	for k, off := range committed {
		r := row(k.topic, k.partition)
		r.Committed = &off
	}

	// Log end offsets, for lag.
	if len(rows) > 0 {
		lo := kmsg.NewPtrListOffsetsRequest()
		byTopic := map[string]*kmsg.ListOffsetsRequestTopic{}
		for k := range rows {
			t := byTopic[k.topic]
			if t == nil {
				nt := kmsg.NewListOffsetsRequestTopic()
				nt.Topic = k.topic
				t = &nt
				byTopic[k.topic] = t
			}
			p := kmsg.NewListOffsetsRequestTopicPartition()
			p.Partition, p.Timestamp = k.partition, -1
			t.Partitions = append(t.Partitions, p)
		}
		for _, t := range byTopic {
			lo.Topics = append(lo.Topics, *t)
		}
		if lor, err := lo.RequestWith(ctx, c.cl); err == nil {
			for _, t := range lor.Topics {
				for _, p := range t.Partitions {
					r := rows[tpKey{t.Topic, p.Partition}]
					if r == nil || p.ErrorCode != 0 {
						continue
					}
					end := p.Offset
					r.LogEnd = &end
					if r.Committed != nil {
						lag := max(end-*r.Committed, 0)
						r.Lag = &lag
					}
				}
			}
		}
	}

	out := make([]offsetRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		return cmp.Or(strings.Compare(out[i].Topic, out[j].Topic), cmp.Compare(out[i].Partition, out[j].Partition)) < 0
	})
	return c.print(out, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "TOPIC\tPARTITION\tCOMMITTED\tLOG-END\tLAG\tMEMBER\tCLIENT\tHOST")
		for _, r := range out {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Topic, r.Partition, num(r.Committed), num(r.LogEnd), num(r.Lag),
				dash(r.MemberID), dash(r.ClientID), dash(r.Host))
		}
	})
}

type topicInfo struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	ID         string `json:"id"`
}

func (c *cli) topicsList(ctx context.Context) error {
	req := kmsg.NewPtrMetadataRequest()
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return err
	}
	rows := []topicInfo{}
	for _, t := range resp.Topics {
		if t.Topic == nil || t.ErrorCode != 0 {
			continue
		}
		rows = append(rows, topicInfo{Name: *t.Topic, Partitions: len(t.Partitions), ID: uuid(t.TopicID)})
	}
	slices.SortFunc(rows, func(a, b topicInfo) int { return strings.Compare(a.Name, b.Name) })
	return c.print(rows, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "TOPIC\tPARTITIONS\tID")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%d\t%s\n", r.Name, r.Partitions, dash(r.ID))
		}
	})
}

func (c *cli) topicsCreate(ctx context.Context, name string, partitions int32, rf int16) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.TimeoutMillis = int32(c.timeout.Milliseconds())
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = name, partitions, rf
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("create %s: %d topics in the answer", name, len(resp.Topics))
	}
	rt := resp.Topics[0]
	if rt.ErrorCode != 0 {
		err := codeErr("create "+name, rt.ErrorCode)
		if rt.ErrorMessage != nil && *rt.ErrorMessage != "" {
			err = fmt.Errorf("%w (%s)", err, *rt.ErrorMessage)
		}
		return err
	}
	n := rt.NumPartitions
	if n <= 0 {
		n = partitions
	}
	info := topicInfo{Name: name, Partitions: int(n), ID: uuid(rt.TopicID)}
	return c.print(info, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "created topic %s with %d partitions\n", name, n)
	})
}

func uuid(id [16]byte) string {
	if id == ([16]byte{}) {
		return ""
	}
	h := hex.EncodeToString(id[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func num(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}
