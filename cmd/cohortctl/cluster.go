package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/admin"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// The cluster commands speak cohort's native API (protoactor remote), not
// Kafka: each node serves the messages of proto/cohort/cluster/v1 at the
// actor named admin.ActorName.
//
//	cohortctl cluster [--remote host:port,...] [--listen host:port] status
//	cohortctl cluster add-voter NODE_ID RAFT_ADDR
//	cohortctl cluster remove-voter NODE_ID
//	cohortctl cluster transfer-leadership [--shard K] [NODE_ID]
//	cohortctl cluster balance
//
// --remote is the native API address of any node, or a list of them, as
// cohort-members takes it: the first that answers is asked
// ($COHORT_REMOTE_ADDR, else 127.0.0.1:8090). Only the leader changes the configuration: another node
// answers with the leader's address, and the command sends the request
// there. --listen is the command's own endpoint, which the nodes answer to.
const clusterCommands = "status | add-voter NODE_ID RAFT_ADDR | remove-voter NODE_ID | transfer-leadership [--shard K] [NODE_ID] | balance"

func (c *cli) cluster(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := cmp.Or(os.Getenv("COHORT_REMOTE_ADDR"), "127.0.0.1:8090")
	fs.StringVar(&addr, "remote", addr, "")
	listen := fs.String("listen", "127.0.0.1:0", "")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		return fmt.Errorf("%w: cluster [--remote host:port,...] [--listen host:port] %s", errUsage, clusterCommands)
	}
	addrs := strings.Split(addr, ",")
	rest := fs.Args()
	var req proto.Message
	switch {
	case rest[0] == "status" && len(rest) == 1:
		a, addr, err := c.adminListen(ctx, *listen, addrs)
		if err != nil {
			return err
		}
		return c.clusterStatus(ctx, a, addr)
	case rest[0] == "add-voter" && len(rest) == 3:
		req = &clusterpb.AddVoterRequest{NodeId: rest[1], RaftAddr: rest[2]}
	case rest[0] == "remove-voter" && len(rest) == 2:
		req = &clusterpb.RemoveVoterRequest{NodeId: rest[1]}
	case rest[0] == "transfer-leadership":
		// A shard's transfer goes to the shard's leader: a node that does
		// not lead the shard answers NOT_LEADER with its address.
		r, err := transferRequest(rest[1:])
		if err != nil {
			return err
		}
		req = r
	case rest[0] == "balance" && len(rest) == 1:
		a, addr, err := c.adminListen(ctx, *listen, addrs)
		if err != nil {
			return err
		}
		return c.balance(ctx, a, addr)
	default:
		return fmt.Errorf("%w: cluster %s", errUsage, clusterCommands)
	}
	a, addr, err := c.adminListen(ctx, *listen, addrs)
	if err != nil {
		return err
	}
	res, err := a.DoOnLeader(ctx, addr, req)
	if err != nil {
		return err
	}
	return c.print(res, func(w *tabwriter.Writer) { fmt.Fprintln(w, "ok") })
}

// adminListen finds the first of addrs whose node speaks what the TLS
// flags say (admin.Probe: a mismatch is refused at once, not after the
// timeout), naming on stderr each before it that did not answer, and
// starts the command's native API endpoint, over TLS when the flags say
// so. It returns the address it found.
func (c *cli) adminListen(ctx context.Context, listen string, addrs []string) (*admin.Client, string, error) {
	var probe *tls.Config
	if c.tls != nil && c.tls.enabled() && c.tls.files.Enabled() {
		cfg, err := tlsconfig.ClientConfig(c.tls.files)
		if err != nil {
			return nil, "", err
		}
		probe = cfg
	}
	addr := ""
	var errs []error
	for _, a := range addrs {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		err := admin.Probe(ctx, a, probe)
		if err == nil {
			addr = a
			break
		}
		errs = append(errs, err)
	}
	if addr == "" {
		if len(errs) == 0 {
			return nil, "", fmt.Errorf("%w: --remote names no address", errUsage)
		}
		return nil, "", errors.Join(errs...)
	}
	for _, err := range errs {
		c.warnf("%v: asking %s instead", err, addr)
	}
	var a *admin.Client
	var err error
	if c.tls == nil {
		a, err = admin.Listen(listen)
	} else {
		opts, oerr := c.tls.remote()
		if oerr != nil {
			return nil, "", oerr
		}
		a, err = admin.Listen(listen, opts...)
	}
	return a, addr, err
}

type nodeStatus struct {
	NodeID       string `json:"node_id"`
	Suffrage     string `json:"suffrage"`
	State        string `json:"state"`
	LeaderID     string `json:"leader_id"`
	Term         uint64 `json:"term"`
	AppliedIndex uint64 `json:"applied_index"`
	CommitIndex  uint64 `json:"commit_index"`
	FSMHash      string `json:"fsm_hash"`
	LogFormat    uint32 `json:"log_format"`
	// AppliesLogFormat is the highest log format the node agrees to.
	AppliesLogFormat uint32   `json:"applies_log_format"`
	Ready            bool     `json:"ready"`
	NotReady         []string `json:"not_ready,omitempty"`
	RaftAddr         string   `json:"raft_addr"`
	RemoteAddr       string   `json:"remote_addr"`
	KafkaAddr        string   `json:"kafka_addr"`
	Error            string   `json:"error,omitempty"`
}

// clusterView is `cluster status --json`: the nodes, and the shards that
// hold the cluster's groups with each node's replica of them.
type clusterView struct {
	Nodes  []nodeStatus  `json:"nodes"`
	Shards []shardStatus `json:"shards"`
}

type shardStatus struct {
	ID       uint32         `json:"id"`
	Leader   string         `json:"leader"`
	Groups   uint32         `json:"groups"`
	Replicas []shardReplica `json:"replicas"`
}

type shardReplica struct {
	NodeID       string `json:"node_id"`
	State        string `json:"state"`
	AppliedIndex uint64 `json:"applied_index"`
	CommitIndex  uint64 `json:"commit_index"`
	Active       bool   `json:"active"`
}

// clusterStatus asks addr for the member list, then every member for its own
// status, so the table shows whether all nodes applied the same state, and
// who leads each shard.
func (c *cli) clusterStatus(ctx context.Context, a *admin.Client, addr string) error {
	st, err := a.Status(ctx, addr)
	if err != nil {
		return err
	}
	rows := make([]nodeStatus, len(st.Members))
	statuses := make([]*clusterpb.StatusResponse, len(st.Members))
	var wg sync.WaitGroup
	for i, m := range st.Members {
		rows[i] = nodeStatus{NodeID: m.NodeId, Suffrage: m.Suffrage, RaftAddr: m.RaftAddr, RemoteAddr: m.RemoteAddr, KafkaAddr: m.KafkaAddr}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &rows[i]
			s := st
			if m.NodeId != st.NodeId {
				if m.RemoteAddr == "" {
					r.State, r.Error = "unknown", "no native API address registered"
					return
				}
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				var err error
				s, err = a.Status(cctx, m.RemoteAddr)
				cancel()
				if s == nil {
					r.State, r.Error = "unreachable", err.Error()
					c.warnf("node %s at %s did not answer: %v", m.NodeId, m.RemoteAddr, err)
					return
				}
			}
			statuses[i] = s
			r.State, r.LeaderID, r.Term, r.Error = s.State, s.LeaderId, s.Term, s.Error
			r.AppliedIndex, r.CommitIndex, r.FSMHash = s.AppliedIndex, s.CommitIndex, s.FsmHash
			r.LogFormat, r.AppliesLogFormat = s.LogFormat, s.AppliesLogFormat
			r.Ready, r.NotReady = s.Ready, s.NotReady
		}()
	}
	wg.Wait()
	slices.SortFunc(rows, func(x, y nodeStatus) int { return cmp.Compare(x.NodeID, y.NodeID) })
	view := clusterView{Nodes: rows, Shards: shardsOf(statuses)}
	return c.print(view, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "NODE\tSUFFRAGE\tSTATE\tREADY\tLEADER\tTERM\tAPPLIED\tCOMMIT\tFSM HASH\tLOG FORMAT\tRAFT\tREMOTE\tKAFKA\tERROR")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.NodeID, r.Suffrage, r.State, readyCell(r), dash(r.LeaderID),
				r.Term, r.AppliedIndex, r.CommitIndex, dash(r.FSMHash), formatCell(r), dash(r.RaftAddr), dash(r.RemoteAddr), dash(r.KafkaAddr), dash(r.Error))
		}
		if len(view.Shards) < 2 {
			return
		}
		fmt.Fprintln(w)
		fmt.Fprintln(w, "SHARD\tLEADER\tGROUPS\tAPPLIED (per node)")
		for _, s := range view.Shards {
			var applied []string
			for _, r := range s.Replicas {
				applied = append(applied, fmt.Sprintf("%s=%d", r.NodeID, r.AppliedIndex))
			}
			fmt.Fprintf(w, "%d\t%s\t%d\t%s\n", s.ID, dash(s.Leader), s.Groups, strings.Join(applied, " "))
		}
	})
}

// shardsOf merges the nodes' views of the shards: the leader as the
// shard's leader sees itself (else as most nodes see it), its group count
// from the leader's replica, and every node's replica.
func shardsOf(statuses []*clusterpb.StatusResponse) []shardStatus {
	byID := map[uint32]*shardStatus{}
	votes := map[uint32]map[string]int{}
	for _, st := range statuses {
		if st == nil {
			continue
		}
		for _, sh := range st.GetShards() {
			s, ok := byID[sh.GetId()]
			if !ok {
				s = &shardStatus{ID: sh.GetId()}
				byID[sh.GetId()] = s
				votes[sh.GetId()] = map[string]int{}
			}
			s.Replicas = append(s.Replicas, shardReplica{NodeID: st.GetNodeId(), State: sh.GetState(), AppliedIndex: sh.GetAppliedIndex(), CommitIndex: sh.GetCommitIndex(), Active: sh.GetActive()})
			if sh.GetLeaderId() != "" {
				votes[sh.GetId()][sh.GetLeaderId()]++
			}
			if sh.GetState() == "Leader" {
				votes[sh.GetId()][st.GetNodeId()] += len(statuses)
				s.Groups = sh.GetGroups()
			}
		}
	}
	out := make([]shardStatus, 0, len(byID))
	for id, s := range byID {
		best := 0
		for node, v := range votes[id] {
			if v > best || (v == best && node < s.Leader) {
				s.Leader, best = node, v
			}
		}
		slices.SortFunc(s.Replicas, func(x, y shardReplica) int { return cmp.Compare(x.NodeID, y.NodeID) })
		out = append(out, *s)
	}
	slices.SortFunc(out, func(x, y shardStatus) int { return cmp.Compare(x.ID, y.ID) })
	return out
}

// transferRequest parses transfer-leadership's arguments: [--shard K]
// [NODE_ID].
func transferRequest(args []string) (*clusterpb.TransferLeadershipRequest, error) {
	fs := flag.NewFlagSet("transfer-leadership", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	shard := fs.Int("shard", -1, "")
	if err := fs.Parse(args); err != nil || fs.NArg() > 1 {
		return nil, fmt.Errorf("%w: cluster transfer-leadership [--shard K] [NODE_ID]", errUsage)
	}
	r := &clusterpb.TransferLeadershipRequest{NodeId: fs.Arg(0)}
	if *shard >= 0 {
		k := uint32(*shard)
		r.Shard = &k
	}
	return r, nil
}

// balance asks every node to spread shard leaders evenly now.
func (c *cli) balance(ctx context.Context, a *admin.Client, addr string) error {
	st, err := a.Status(ctx, addr)
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range st.GetMembers() {
		if m.GetRemoteAddr() == "" {
			continue
		}
		if _, err := a.Do(ctx, m.GetRemoteAddr(), &clusterpb.BalanceRequest{}); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.GetNodeId(), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.clusterStatus(ctx, a, addr)
}

// formatCell is the cluster's log format as the node applied it, and the
// highest the node agrees to when that is higher (the format rises once
// every voter agrees): "2", "1 (applies 2)"; "-" when unknown.
func formatCell(r nodeStatus) string {
	switch {
	case r.LogFormat == 0:
		return "-"
	case r.AppliesLogFormat > r.LogFormat:
		return fmt.Sprintf("%d (applies %d)", r.LogFormat, r.AppliesLogFormat)
	}
	return fmt.Sprint(r.LogFormat)
}

// readyCell is "yes", or "no (" and the conditions that fail ")".
func readyCell(r nodeStatus) string {
	switch {
	case r.Ready:
		return "yes"
	case len(r.NotReady) > 0:
		return "no (" + strings.Join(r.NotReady, "; ") + ")"
	case r.Error != "":
		return "-"
	}
	return "no"
}
