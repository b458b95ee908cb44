package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Routing. kgo sends a request that any broker may answer (FindCoordinator,
// and so every group request) to a broker it picks, reachable or not, and
// ListGroups to every broker it knows, failing the command when one does
// not answer. kafka-consumer-groups.sh instead asks the brokers that answer
// and names those that do not. So the group commands first learn the
// brokers (a Metadata request, which kgo retries over the seeds), ask each
// for its API versions, and then send only to those that answered: any
// broker's requests to the first of them, each group's requests to its
// coordinator. Each broker that did not answer is named once on stderr.

// probeTimeout bounds how long a broker may take to answer the first
// request of a command before it counts as unreachable.
const probeTimeout = 3 * time.Second

// brokerSet is the cluster's brokers as this command reaches them.
type brokerSet struct {
	live []int32 // answered, in node id order
	down int     // did not answer
}

// reach learns the brokers once per command.
func (c *cli) reach(ctx context.Context) (*brokerSet, error) {
	c.reachOnce.Do(func() { c.brokers, c.reachErr = c.probeBrokers(ctx) })
	return c.brokers, c.reachErr
}

func (c *cli) probeBrokers(ctx context.Context) (*brokerSet, error) {
	md := kmsg.NewPtrMetadataRequest()
	md.Topics = []kmsg.MetadataRequestTopic{} // no topics: brokers only
	resp, err := md.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, err
	}
	type result struct {
		id   int32
		addr string
		err  error
	}
	results := make([]result, len(resp.Brokers))
	listed := map[string]bool{}
	var wg sync.WaitGroup
	for i, b := range resp.Brokers {
		results[i] = result{id: b.NodeID, addr: net.JoinHostPort(b.Host, fmt.Sprint(b.Port))}
		listed[results[i].addr] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			_, results[i].err = c.cl.Broker(int(b.NodeID)).Request(pctx, kmsg.NewPtrApiVersionsRequest())
		}()
	}
	// A cluster leaves a node it cannot reach out of its Metadata answers
	// (as Kafka leaves out a fenced broker): a seed that is not listed is
	// asked too, so that a stopped node the operator named is named back.
	var unlisted []string
	var seedErrs []error
	var seedMu sync.Mutex
	seeds := c.cl.SeedBrokers() // in the order of c.seeds
	for i, addr := range c.seeds {
		if listed[addr] || i >= len(seeds) {
			continue
		}
		sb := seeds[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			if _, err := sb.Request(pctx, kmsg.NewPtrApiVersionsRequest()); err != nil {
				seedMu.Lock()
				unlisted = append(unlisted, addr)
				seedErrs = append(seedErrs, err)
				seedMu.Unlock()
			}
		}()
	}
	wg.Wait()
	set := &brokerSet{}
	var errs []error
	for _, r := range results {
		if r.err == nil {
			set.live = append(set.live, r.id)
			continue
		}
		set.down++
		errs = append(errs, fmt.Errorf("broker %d (%s): %w", r.id, r.addr, r.err))
		c.warnf("broker %d at %s did not answer (%v): showing what the other brokers answer", r.id, r.addr, r.err)
	}
	for i, addr := range unlisted {
		c.warnf("bootstrap server %s did not answer (%v) and the cluster does not list it: showing what the listed brokers answer", addr, seedErrs[i])
	}
	if len(set.live) == 0 {
		return nil, fmt.Errorf("no broker answered: %w", errors.Join(errs...))
	}
	slices.Sort(set.live)
	return set, nil
}

// warnf names on stderr what the command could not reach; the command
// goes on without it.
func (c *cli) warnf(format string, args ...any) {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	fmt.Fprintf(c.errOut, "cohortctl: warning: "+format+"\n", args...)
}

// anyBroker returns a broker that answered.
func (c *cli) anyBroker(ctx context.Context) (*kgo.Broker, error) {
	set, err := c.reach(ctx)
	if err != nil {
		return nil, err
	}
	return c.cl.Broker(int(set.live[0])), nil
}

// brokerResponse is one broker's answer.
type brokerResponse struct {
	id   int32
	resp kmsg.Response
}

// eachBroker sends what build makes to every broker that answered, and
// returns the answers of those that answer it; a broker that fails it is
// named on stderr. It fails only when no broker answers.
func (c *cli) eachBroker(ctx context.Context, build func() kmsg.Request) ([]brokerResponse, error) {
	set, err := c.reach(ctx)
	if err != nil {
		return nil, err
	}
	resps := make([]kmsg.Response, len(set.live))
	errs := make([]error, len(set.live))
	var wg sync.WaitGroup
	for i, id := range set.live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resps[i], errs[i] = c.cl.Broker(int(id)).Request(ctx, build())
		}()
	}
	wg.Wait()
	var out []brokerResponse
	for i, r := range resps {
		if errs[i] != nil {
			c.warnf("broker %d: %v", set.live[i], errs[i])
			continue
		}
		out = append(out, brokerResponse{set.live[i], r})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no broker answered: %w", errors.Join(errs...))
	}
	return out, nil
}

// coordinator is a group's coordinator as FindCoordinator answers it.
type coordinator struct {
	id   int32
	host string
	port int32
	code int16
}

// findCoordinators asks a broker that answered for each group's
// coordinator (one FindCoordinator with every key; one per group from a
// broker older than FindCoordinator v4).
func (c *cli) findCoordinators(ctx context.Context, groups []string) (map[string]coordinator, error) {
	br, err := c.anyBroker(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]coordinator{}
	ask := func(keys []string) (bool, error) {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey, req.CoordinatorKeys = keys[0], keys
		resp, err := req.RequestWith(ctx, br)
		if err != nil {
			return false, err
		}
		if len(resp.Coordinators) == 0 { // v3 and older: the first key only
			out[keys[0]] = coordinator{resp.NodeID, resp.Host, resp.Port, resp.ErrorCode}
			return false, nil
		}
		for _, co := range resp.Coordinators {
			out[co.Key] = coordinator{co.NodeID, co.Host, co.Port, co.ErrorCode}
		}
		return true, nil
	}
	batched, err := ask(groups)
	if err != nil {
		return nil, err
	}
	if !batched {
		for _, g := range groups[1:] {
			if _, err := ask([]string{g}); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// retriable reports whether a group's answer says to ask again, maybe
// elsewhere: its coordinator moved, is loading or is not elected yet.
func retriable(code int16) bool {
	switch code {
	case kerr.NotCoordinator.Code, kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorLoadInProgress.Code:
		return true
	}
	return false
}

// byCoordinator calls send with each coordinator's broker and its groups,
// and again, after a pause, for the groups send returns (their coordinator
// moved or is loading) or whose coordinator did not answer, until none is
// left or ctx ends.
func (c *cli) byCoordinator(ctx context.Context, groups []string, send func(br *kgo.Broker, groups []string) (retry []string, err error)) error {
	pending := slices.Clone(groups)
	for {
		coords, err := c.findCoordinators(ctx, pending)
		if err != nil {
			return err
		}
		var retry []string
		byID := map[int32][]string{}
		var lastErr error
		for _, g := range pending {
			co, ok := coords[g]
			switch {
			case !ok || retriable(co.code):
				retry = append(retry, g)
			case co.code != 0:
				return codeErr("find the coordinator of "+g, co.code)
			default:
				byID[co.id] = append(byID[co.id], g)
			}
		}
		for _, id := range slices.Sorted(maps.Keys(byID)) {
			again, err := send(c.cl.Broker(int(id)), byID[id])
			if err != nil {
				var ke *kerr.Error
				if errors.As(err, &ke) || ctx.Err() != nil {
					return err
				}
				// The coordinator did not answer (it stopped a moment
				// ago): its groups move to another node.
				lastErr = fmt.Errorf("coordinator %d: %w", id, err)
				again = byID[id]
			}
			retry = append(retry, again...)
		}
		if len(retry) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return lastErr
			}
			return fmt.Errorf("groups %v: no coordinator answered: %w", retry, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
		pending = retry
	}
}
