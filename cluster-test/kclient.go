package clustertest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// errNone is the code of success; every other code is a kerr error.
const errNone int16 = 0

// coordinatorMoved reports whether code tells a client to find the
// coordinator again.
func coordinatorMoved(code int16) bool {
	return code == kerr.CoordinatorLoadInProgress.Code || code == kerr.CoordinatorNotAvailable.Code || code == kerr.NotCoordinator.Code
}

// Conns holds one franz-go client per broker address and sends requests
// straight to that broker, with the version pinned to what Kafka 2.8 speaks
// (single-group OffsetFetch and FindCoordinator, MEMBER_ID_REQUIRED joins).
type Conns struct {
	id string
	mu sync.Mutex
	m  map[string]*kgo.Client
}

// NewConns returns an empty pool whose clients identify as clientID.
func NewConns(clientID string) *Conns {
	return &Conns{id: clientID, m: map[string]*kgo.Client{}}
}

// Request sends req to the broker at addr. A transport error closes that
// broker's client so the next request dials again.
func (p *Conns) Request(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error) {
	cl, err := p.client(addr)
	if err != nil {
		return nil, err
	}
	res, err := cl.SeedBrokers()[0].Request(ctx, req)
	if err != nil {
		p.Drop(addr)
	}
	return res, err
}

func (p *Conns) client(addr string) (*kgo.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cl, ok := p.m[addr]; ok {
		return cl, nil
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addr),
		kgo.ClientID(p.id),
		kgo.MaxVersions(kversion.V2_8_0()),
		kgo.DialTimeout(2*time.Second),
		kgo.RequestRetries(0),
	)
	if err != nil {
		return nil, err
	}
	p.m[addr] = cl
	return cl, nil
}

// Drop closes the client of addr.
func (p *Conns) Drop(addr string) {
	p.mu.Lock()
	cl := p.m[addr]
	delete(p.m, addr)
	p.mu.Unlock()
	if cl != nil {
		go cl.Close()
	}
}

// Close closes every client.
func (p *Conns) Close() {
	p.mu.Lock()
	m := p.m
	p.m = map[string]*kgo.Client{}
	p.mu.Unlock()
	for _, cl := range m {
		cl.Close()
	}
}

// ErrNoCoordinator is returned when no seed answers FindCoordinator.
var ErrNoCoordinator = errors.New("no coordinator found")

// Coordinator finds and remembers the coordinator of one group, asking the
// seeds in turn like a Kafka client does.
type Coordinator struct {
	Conns *Conns
	Seeds func() []string
	Group string

	mu   sync.Mutex
	addr string
	next int
}

// Addr returns the remembered coordinator, finding one when there is none.
func (c *Coordinator) Addr(ctx context.Context) (string, error) {
	c.mu.Lock()
	addr := c.addr
	c.mu.Unlock()
	if addr != "" {
		return addr, nil
	}
	return c.Find(ctx)
}

// Forget drops the remembered coordinator (after NOT_COORDINATOR or a
// connection error).
func (c *Coordinator) Forget() {
	c.mu.Lock()
	c.addr = ""
	c.mu.Unlock()
}

// Find asks each seed once for the group's coordinator.
func (c *Coordinator) Find(ctx context.Context) (string, error) {
	seeds := c.Seeds()
	var errs []error
	for range seeds {
		c.mu.Lock()
		seed := seeds[c.next%len(seeds)]
		c.next++
		c.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = c.Group
		res, err := c.Conns.Request(rctx, seed, req)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", seed, err))
			continue
		}
		r := res.(*kmsg.FindCoordinatorResponse)
		if r.ErrorCode != errNone {
			errs = append(errs, fmt.Errorf("%s: error code %d", seed, r.ErrorCode))
			continue
		}
		addr := net.JoinHostPort(r.Host, strconv.Itoa(int(r.Port)))
		c.mu.Lock()
		c.addr = addr
		c.mu.Unlock()
		return addr, nil
	}
	return "", fmt.Errorf("%w for %q: %w", ErrNoCoordinator, c.Group, errors.Join(errs...))
}

// Do sends req to the group's coordinator and returns the answer and the
// address it came from. A transport error forgets the coordinator.
func (c *Coordinator) Do(ctx context.Context, req kmsg.Request) (kmsg.Response, string, error) {
	addr, err := c.Addr(ctx)
	if err != nil {
		return nil, "", err
	}
	res, err := c.Conns.Request(ctx, addr, req)
	if err != nil {
		c.Forget()
		return nil, addr, err
	}
	return res, addr, nil
}

// Retry sends the request built by mk to the coordinator until it answers
// with a code other than a coordinator error (code extracts it) or ctx ends.
func (c *Coordinator) Retry(ctx context.Context, mk func() kmsg.Request, code func(kmsg.Response) int16) (kmsg.Response, string, error) {
	for {
		res, addr, err := c.Do(ctx, mk())
		if err == nil && !coordinatorMoved(code(res)) {
			return res, addr, nil
		}
		if err == nil {
			c.Forget()
			err = fmt.Errorf("%s: error code %d", addr, code(res))
		}
		select {
		case <-ctx.Done():
			return nil, addr, fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// CreateTopic creates a topic, asking the group's coordinator (on cohort
// that is the raft leader) and then every seed until one accepts;
// TOPIC_ALREADY_EXISTS counts as success.
func CreateTopic(ctx context.Context, c *Coordinator, topic string, partitions int32) error {
	for {
		var targets []string
		if addr, err := c.Addr(ctx); err == nil {
			targets = append(targets, addr)
		}
		targets = append(targets, c.Seeds()...)
		var last error
		for _, addr := range targets {
			req := kmsg.NewPtrCreateTopicsRequest()
			t := kmsg.NewCreateTopicsRequestTopic()
			t.Topic, t.NumPartitions, t.ReplicationFactor = topic, partitions, 1
			req.Topics = append(req.Topics, t)
			req.TimeoutMillis = 10000
			rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			res, err := c.Conns.Request(rctx, addr, req)
			cancel()
			if err != nil {
				last = err
				continue
			}
			code := res.(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
			switch {
			case code == errNone || code == kerr.TopicAlreadyExists.Code:
				return nil
			case code == kerr.NotController.Code || code == kerr.RequestTimedOut.Code || coordinatorMoved(code):
				c.Forget()
				last = fmt.Errorf("%s: error code %d", addr, code)
			default:
				return fmt.Errorf("create topic %s at %s: error code %d", topic, addr, code)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create topic %s: %w (last: %w)", topic, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DescribeGroup asks the coordinator for the group's state.
func DescribeGroup(ctx context.Context, c *Coordinator) (*kmsg.DescribeGroupsResponseGroup, string, error) {
	res, addr, err := c.Retry(ctx, func() kmsg.Request {
		req := kmsg.NewPtrDescribeGroupsRequest()
		req.Groups = []string{c.Group}
		return req
	}, func(r kmsg.Response) int16 { return r.(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode })
	if err != nil {
		return nil, addr, err
	}
	g := res.(*kmsg.DescribeGroupsResponse).Groups[0]
	if g.ErrorCode != errNone {
		return nil, addr, fmt.Errorf("describe %s: error code %d", c.Group, g.ErrorCode)
	}
	return &g, addr, nil
}

// FetchOffsets asks the coordinator for the committed offsets of the given
// partitions of topic; -1 means none.
func FetchOffsets(ctx context.Context, c *Coordinator, topic string, partitions int32) (map[int32]int64, string, error) {
	res, addr, err := c.Retry(ctx, func() kmsg.Request {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = c.Group
		t := kmsg.NewOffsetFetchRequestTopic()
		t.Topic = topic
		for p := range partitions {
			t.Partitions = append(t.Partitions, p)
		}
		req.Topics = []kmsg.OffsetFetchRequestTopic{t}
		return req
	}, func(r kmsg.Response) int16 { return r.(*kmsg.OffsetFetchResponse).ErrorCode })
	if err != nil {
		return nil, addr, err
	}
	r := res.(*kmsg.OffsetFetchResponse)
	if r.ErrorCode != errNone {
		return nil, addr, fmt.Errorf("offset fetch %s: error code %d", c.Group, r.ErrorCode)
	}
	out := map[int32]int64{}
	for _, t := range r.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != errNone {
				return nil, addr, fmt.Errorf("offset fetch %s %s/%d: error code %d", c.Group, t.Topic, p.Partition, p.ErrorCode)
			}
			out[p.Partition] = p.Offset
		}
	}
	return out, addr, nil
}

// CommitStandalone commits offsets for a group without members (generation
// -1, as a client that assigns partitions itself does) at the node at addr.
// It returns the first non-zero partition error code.
func CommitStandalone(ctx context.Context, conns *Conns, addr, group, topic string, offsets map[int32]int64) (int16, error) {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = topic
	for p, o := range offsets {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = p, o
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = []kmsg.OffsetCommitRequestTopic{t}
	res, err := conns.Request(ctx, addr, req)
	if err != nil {
		return 0, err
	}
	for _, rt := range res.(*kmsg.OffsetCommitResponse).Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != errNone {
				return rp.ErrorCode, nil
			}
		}
	}
	return errNone, nil
}
