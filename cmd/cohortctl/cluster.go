package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/protobuf/proto"

	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

// The cluster commands speak cohort's native API (protoactor remote), not
// Kafka: each node serves the messages of proto/cohort/cluster/v1 at the
// actor named "cluster".
//
//	cohortctl cluster [--remote host:port] [--listen host:port] status
//	cohortctl cluster add-voter NODE_ID RAFT_ADDR
//	cohortctl cluster remove-voter NODE_ID
//	cohortctl cluster transfer-leadership [NODE_ID]
//
// --remote is the native API address of any node ($COHORT_REMOTE_ADDR, else
// 127.0.0.1:8090). Only the leader changes the configuration: another node
// answers with the leader's address, and the command sends the request
// there. --listen is the command's own endpoint, which the nodes answer to.
const clusterCommands = "status | add-voter NODE_ID RAFT_ADDR | remove-voter NODE_ID | transfer-leadership [NODE_ID]"

const clusterActor = "cluster"

func (c *cli) cluster(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := cmp.Or(os.Getenv("COHORT_REMOTE_ADDR"), "127.0.0.1:8090")
	fs.StringVar(&addr, "remote", addr, "")
	listen := fs.String("listen", "127.0.0.1:0", "")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		return fmt.Errorf("%w: cluster [--remote host:port] [--listen host:port] %s", errUsage, clusterCommands)
	}
	rest := fs.Args()
	var req proto.Message
	switch {
	case rest[0] == "status" && len(rest) == 1:
		a, err := newAdminClient(*listen)
		if err != nil {
			return err
		}
		return c.clusterStatus(ctx, a, addr)
	case rest[0] == "add-voter" && len(rest) == 3:
		req = &clusterpb.AddVoterRequest{NodeId: rest[1], RaftAddr: rest[2]}
	case rest[0] == "remove-voter" && len(rest) == 2:
		req = &clusterpb.RemoveVoterRequest{NodeId: rest[1]}
	case rest[0] == "transfer-leadership" && len(rest) <= 2:
		r := &clusterpb.TransferLeadershipRequest{}
		if len(rest) == 2 {
			r.NodeId = rest[1]
		}
		req = r
	default:
		return fmt.Errorf("%w: cluster %s", errUsage, clusterCommands)
	}
	a, err := newAdminClient(*listen)
	if err != nil {
		return err
	}
	res, err := a.admin(ctx, addr, req)
	if err != nil {
		return err
	}
	return c.print(res, func(w *tabwriter.Writer) { fmt.Fprintln(w, "ok") })
}

type adminClient struct{ system *actor.ActorSystem }

// newAdminClient starts an actor system with protoactor remote on listen;
// nodes send their answers there.
func newAdminClient(listen string) (_ *adminClient, err error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("--listen %q: bad port", listen)
	}
	if port == 0 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("--listen %q: %w", listen, err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	quiet := slog.New(slog.DiscardHandler)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("native API endpoint on %s:%d: %v", host, port, p)
		}
	}()
	remote.NewRemote(system, remote.Configure(host, port)).Start()
	return &adminClient{system: system}, nil
}

func (a *adminClient) call(ctx context.Context, addr string, req proto.Message) (proto.Message, error) {
	timeout := 10 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	res, err := a.system.Root.RequestFuture(actor.NewPID(addr, clusterActor), req, timeout).Result()
	if err != nil {
		if errors.Is(err, actor.ErrTimeout) {
			return nil, fmt.Errorf("%s did not answer within %v", addr, timeout.Round(time.Millisecond))
		}
		if errors.Is(err, actor.ErrDeadLetter) {
			return nil, fmt.Errorf("%s: no cluster actor answers there (is it a cohortd native API address?)", addr)
		}
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	msg, ok := res.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%s: unexpected answer %T", addr, res)
	}
	return msg, nil
}

// admin sends an admin request. Only the leader serves them; any other node
// answers with an error and the leader's address (empty while there is
// none, as right after a leadership transfer), so the request follows the
// leader a few times before the error is final.
func (a *adminClient) admin(ctx context.Context, addr string, req proto.Message) (*clusterpb.AdminResponse, error) {
	for try := 1; ; try++ {
		res, err := a.call(ctx, addr, req)
		if err != nil {
			return nil, err
		}
		ar, ok := res.(*clusterpb.AdminResponse)
		if !ok {
			return nil, fmt.Errorf("%s: %T answered with %T", addr, req, res)
		}
		if ar.Error == "" {
			return ar, nil
		}
		if try == 10 || ar.LeaderRemoteAddr == addr {
			return ar, fmt.Errorf("%s: %s", addr, ar.Error)
		}
		if ar.LeaderRemoteAddr != "" {
			addr = ar.LeaderRemoteAddr
			continue
		}
		select {
		case <-ctx.Done():
			return ar, fmt.Errorf("%s: %s (no leader known)", addr, ar.Error)
		case <-time.After(300 * time.Millisecond):
		}
	}
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
	RaftAddr     string `json:"raft_addr"`
	RemoteAddr   string `json:"remote_addr"`
	KafkaAddr    string `json:"kafka_addr"`
	Error        string `json:"error,omitempty"`
}

// clusterStatus asks addr for the member list, then every member for its own
// status, so the table shows whether all nodes applied the same state.
func (c *cli) clusterStatus(ctx context.Context, a *adminClient, addr string) error {
	first, err := a.call(ctx, addr, &clusterpb.StatusRequest{})
	if err != nil {
		return err
	}
	st, ok := first.(*clusterpb.StatusResponse)
	if !ok {
		return fmt.Errorf("%s: status answered with %T", addr, first)
	}
	if st.Error != "" {
		return fmt.Errorf("%s: %s", addr, st.Error)
	}
	rows := make([]nodeStatus, len(st.Members))
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
				res, err := a.call(cctx, m.RemoteAddr, &clusterpb.StatusRequest{})
				cancel()
				if err != nil {
					r.State, r.Error = "unreachable", err.Error()
					return
				}
				if s, ok = res.(*clusterpb.StatusResponse); !ok {
					r.State, r.Error = "unknown", fmt.Sprintf("status answered with %T", res)
					return
				}
			}
			r.State, r.LeaderID, r.Term, r.Error = s.State, s.LeaderId, s.Term, s.Error
			r.AppliedIndex, r.CommitIndex, r.FSMHash = s.AppliedIndex, s.CommitIndex, s.FsmHash
		}()
	}
	wg.Wait()
	slices.SortFunc(rows, func(x, y nodeStatus) int { return cmp.Compare(x.NodeID, y.NodeID) })
	return c.print(rows, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "NODE\tSUFFRAGE\tSTATE\tLEADER\tTERM\tAPPLIED\tCOMMIT\tFSM HASH\tRAFT\tREMOTE\tKAFKA\tERROR")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.NodeID, r.Suffrage, r.State, dash(r.LeaderID),
				r.Term, r.AppliedIndex, r.CommitIndex, dash(r.FSMHash), dash(r.RaftAddr), dash(r.RemoteAddr), dash(r.KafkaAddr), dash(r.Error))
		}
	})
}
