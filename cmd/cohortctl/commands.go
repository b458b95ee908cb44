package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func codeErr(what string, code int16) error {
	if code == 0 {
		return nil
	}
	return fmt.Errorf("%s: %w", what, kerr.ErrorForCode(code))
}

// codeMsgErr is codeErr with the broker's own message, when it sent one,
// in place of the code's generic description (INVALID_PARTITIONS is
// "Number of partitions is below 1." whatever was wrong).
func codeMsgErr(what string, code int16, msg *string) error {
	err := codeErr(what, code)
	var ke *kerr.Error
	if err == nil || msg == nil || *msg == "" || !errors.As(err, &ke) {
		return err
	}
	return fmt.Errorf("%s: %w", what, &brokerError{ke, *msg})
}

// brokerError is a Kafka error code with the broker's message.
type brokerError struct {
	code *kerr.Error
	msg  string
}

func (e *brokerError) Error() string { return e.code.Message + ": " + e.msg }

func (e *brokerError) Unwrap() error { return e.code }

type listedGroup struct {
	Group        string `json:"group"`
	ProtocolType string `json:"protocol_type"`
	State        string `json:"state,omitempty"`
	Type         string `json:"type,omitempty"`
}

func (c *cli) groupsList(ctx context.Context) error {
	groups, err := c.listGroups(ctx)
	if err != nil {
		return err
	}
	rows := []listedGroup{}
	for _, g := range groups {
		rows = append(rows, listedGroup{g.Group, g.ProtocolType, g.GroupState, g.GroupType})
	}
	return c.print(rows, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "GROUP\tPROTOCOL-TYPE\tSTATE\tTYPE")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Group, dash(r.ProtocolType), dash(r.State), dash(r.Type))
		}
	})
}

// listGroups asks every broker that answers for the groups it
// coordinates (ListGroups), as kafka-consumer-groups.sh --list does, and
// returns them sorted by name; a group two brokers list (it moved between
// the two answers) once. A broker that answers with an error is named on
// stderr and left out, unless every broker does.
func (c *cli) listGroups(ctx context.Context) ([]kmsg.ListGroupsResponseGroup, error) {
	resps, err := c.eachBroker(ctx, func() kmsg.Request { return kmsg.NewPtrListGroupsRequest() })
	if err != nil {
		return nil, err
	}
	var out []kmsg.ListGroupsResponseGroup
	seen := map[string]bool{}
	var failed []error
	for _, r := range resps {
		resp := r.resp.(*kmsg.ListGroupsResponse)
		if retriable(resp.ErrorCode) {
			// A shard of this broker is loading (it just took the shard
			// over): ask it again.
			resp = c.listGroupsAgain(ctx, r.id, resp)
		}
		if err := codeErr("list groups", resp.ErrorCode); err != nil {
			failed = append(failed, fmt.Errorf("broker %d: %w", r.id, err))
			continue
		}
		for _, g := range resp.Groups {
			if !seen[g.Group] {
				seen[g.Group] = true
				out = append(out, g)
			}
		}
	}
	if len(failed) == len(resps) {
		return nil, failed[0]
	}
	for _, err := range failed {
		c.warnf("%v", err)
	}
	slices.SortFunc(out, func(a, b kmsg.ListGroupsResponseGroup) int { return strings.Compare(a.Group, b.Group) })
	return out, nil
}

// listGroupsAgain asks the broker that answered resp with a retriable
// error again, every 200 ms, until it answers otherwise or ctx ends.
func (c *cli) listGroupsAgain(ctx context.Context, id int32, resp *kmsg.ListGroupsResponse) *kmsg.ListGroupsResponse {
	br := c.cl.Broker(int(id))
	for retriable(resp.ErrorCode) {
		select {
		case <-ctx.Done():
			return resp
		case <-time.After(200 * time.Millisecond):
		}
		r, err := kmsg.NewPtrListGroupsRequest().RequestWith(ctx, br)
		if err != nil {
			return resp
		}
		resp = r
	}
	return resp
}

func (c *cli) groupsDelete(ctx context.Context, group string) error {
	var resp *kmsg.DeleteGroupsResponse
	err := c.byCoordinator(ctx, []string{group}, func(br *kgo.Broker, groups []string) ([]string, error) {
		req := kmsg.NewPtrDeleteGroupsRequest()
		req.Groups = groups
		r, err := req.RequestWith(ctx, br)
		if err != nil {
			return nil, err
		}
		if len(r.Groups) == 1 && retriable(r.Groups[0].ErrorCode) {
			return groups, nil
		}
		resp = r
		return nil, nil
	})
	if err != nil {
		return err
	}
	if len(resp.Groups) != 1 {
		return fmt.Errorf("delete %s: %d groups in the answer", group, len(resp.Groups))
	}
	if resp.Groups[0].ErrorCode == kerr.GroupIDNotFound.Code {
		return fmt.Errorf("group %s %w", group, errNoGroup)
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

type topicInfo struct {
	Name       string `json:"topic"`
	Partitions int    `json:"partitions"`
	ID         string `json:"id"`
}

func (c *cli) topicsList(ctx context.Context) error {
	if _, err := c.reach(ctx); err != nil { // names the brokers that do not answer
		return err
	}
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
		return codeMsgErr("create "+name, rt.ErrorCode, rt.ErrorMessage)
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

// topicsAlter grows a topic to partitions (CreatePartitions), as
// kafka-topics.sh --alter --partitions does.
func (c *cli) topicsAlter(ctx context.Context, name string, partitions int32) error {
	req := kmsg.NewPtrCreatePartitionsRequest()
	req.TimeoutMillis = int32(c.timeout.Milliseconds())
	t := kmsg.NewCreatePartitionsRequestTopic()
	t.Topic, t.Count = name, partitions
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("alter %s: %d topics in the answer", name, len(resp.Topics))
	}
	rt := resp.Topics[0]
	if rt.ErrorCode != 0 {
		return codeMsgErr("alter "+name, rt.ErrorCode, rt.ErrorMessage)
	}
	info := map[string]any{"topic": name, "partitions": partitions}
	return c.print(info, func(w *tabwriter.Writer) {
		fmt.Fprintf(w, "altered topic %s to %d partitions\n", name, partitions)
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
