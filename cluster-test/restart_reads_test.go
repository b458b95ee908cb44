package clustertest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRestartedNodeReads restarts nodes whose logs miss what the cluster
// acknowledged while they were down, and reads Metadata, FindCoordinator
// and OffsetFetch from them in a tight loop from the moment their Kafka
// port opens: no answer may show a known topic missing or with fewer
// partitions, or an offset older than one already acknowledged. Retriable
// errors (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ...) are allowed; a
// wrong answer is not.
func TestRestartedNodeReads(t *testing.T) {
	skipShort(t)
	c := StartCluster(t, 3)
	conns := NewConns("restart-reads")
	t.Cleanup(conns.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const group, parts = "restart-reads", 12
	coord := &Coordinator{Conns: conns, Seeds: c.KafkaAddrs, Group: group}
	r := &restartReads{t: t, c: c, conns: conns, coord: coord, group: group, parts: parts, topics: map[string]bool{}, acked: map[string]map[int32]int64{}}
	r.ack(ctx, "reads-0", 100)

	for round := 1; round <= 3; round++ {
		leader := c.WaitLeader(20 * time.Second)
		f := (leader.Index + round) % len(c.Nodes)
		if f == leader.Index {
			f = (f + 1) % len(c.Nodes)
		}
		c.Kill(f)
		// While it is down the cluster acknowledges a new topic and newer
		// offsets for the old ones.
		r.ack(ctx, fmt.Sprintf("reads-%d", round), int64(100*round))
		for topic := range r.topics {
			r.commit(ctx, topic, int64(1000*round))
		}
		n := r.poll([]*Node{c.Node(f)}, func() { c.Restart(f) })
		t.Logf("round %d: %s restarted; %d reads answered", round, c.Node(f).ID, n)
	}

	// The whole cluster crashes; every node is polled, so the next leader,
	// which must answer OffsetFetch with what was acknowledged, is too.
	for i := range c.Nodes {
		c.Kill(i)
	}
	n := r.poll(c.Nodes, func() {
		for i := range c.Nodes {
			c.Restart(i)
		}
	})
	t.Logf("whole cluster restarted; its nodes answered %d reads", n)
	if r.offsetReads == 0 {
		t.Error("no OffsetFetch answered with offsets: the check of offsets never ran")
	}
}

type restartReads struct {
	t      *testing.T
	c      *Cluster
	conns  *Conns
	coord  *Coordinator
	group  string
	parts  int32
	topics map[string]bool
	acked  map[string]map[int32]int64

	mu          sync.Mutex
	offsetReads int
}

// ack creates topic and commits base+p for every partition, waiting until
// both are acknowledged.
func (r *restartReads) ack(ctx context.Context, topic string, base int64) {
	r.t.Helper()
	if err := CreateTopic(ctx, r.coord, topic, r.parts); err != nil {
		r.t.Fatal(err)
	}
	r.topics[topic] = true
	r.commit(ctx, topic, base)
}

func (r *restartReads) commit(ctx context.Context, topic string, base int64) {
	r.t.Helper()
	offsets := map[int32]int64{}
	for p := range r.parts {
		offsets[p] = base + int64(p)
	}
	for {
		addr, err := r.coord.Addr(ctx)
		if err == nil {
			var code int16
			code, err = CommitStandalone(ctx, r.conns, addr, r.group, topic, offsets)
			if err == nil && code == errNone {
				r.acked[topic] = offsets
				return
			}
			if err == nil {
				err = fmt.Errorf("error code %d", code)
			}
			r.coord.Forget()
		}
		if ctx.Err() != nil {
			r.t.Fatalf("commit %s: %v", topic, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// poll reads from each of nodes in a tight loop while start runs and for
// two seconds after the cluster converged, and fails the test on a wrong
// answer. It returns how many reads were answered.
func (r *restartReads) poll(nodes []*Node, start func()) int {
	r.t.Helper()
	known := slices.Sorted(maps.Keys(r.topics))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := 0
	var bad []string
	for _, n := range nodes {
		addr, id := n.KafkaAddr, n.ID
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ok, problems := r.readOnce(addr, known)
				mu.Lock()
				if ok {
					answered++
				}
				for _, p := range problems {
					bad = append(bad, id+": "+p)
				}
				mu.Unlock()
				if !ok {
					time.Sleep(2 * time.Millisecond)
				}
			}
		}()
	}
	start()
	r.c.WaitConverged(30 * time.Second)
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		r.t.Fatalf("%d wrong reads after the restart, first: %v", len(bad), bad[:min(5, len(bad))])
	}
	if answered == 0 {
		r.t.Fatal("no read answered")
	}
	return answered
}

// checkBrokers reports a Metadata answer that does not list every node of
// the cluster as a broker: clients drop their connections to brokers a
// Metadata answer leaves out (kafkajs ends the socket of a request in
// flight).
func (r *restartReads) checkBrokers(m *kmsg.MetadataResponse) []string {
	var got []string
	for _, b := range m.Brokers {
		got = append(got, net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port))))
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(r.c.KafkaAddrs()))
	if !slices.Equal(got, want) {
		return []string{fmt.Sprintf("metadata: brokers %v, the cluster is %v", got, want)}
	}
	return nil
}

// readOnce sends one Metadata for the known topics, one for all topics, a
// FindCoordinator and an OffsetFetch; ok is false when the node did not
// answer (its port is not open yet).
func (r *restartReads) readOnce(addr string, known []string) (ok bool, problems []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	named := kmsg.NewPtrMetadataRequest()
	for _, t := range known {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		named.Topics = append(named.Topics, rt)
	}
	res, err := r.conns.Request(ctx, addr, named)
	if err != nil {
		return false, nil
	}
	problems = append(problems, r.checkBrokers(res.(*kmsg.MetadataResponse))...)
	seen := map[string]bool{}
	for _, mt := range res.(*kmsg.MetadataResponse).Topics {
		name := ""
		if mt.Topic != nil {
			name = *mt.Topic
		}
		seen[name] = true
		if mt.ErrorCode != errNone || int32(len(mt.Partitions)) != r.parts {
			problems = append(problems, fmt.Sprintf("metadata: topic %s error %d with %d partitions", name, mt.ErrorCode, len(mt.Partitions)))
		}
	}
	for _, t := range known {
		if !seen[t] {
			problems = append(problems, "metadata: topic "+t+" missing")
		}
	}
	all := kmsg.NewPtrMetadataRequest()
	if res, err := r.conns.Request(ctx, addr, all); err == nil {
		problems = append(problems, r.checkBrokers(res.(*kmsg.MetadataResponse))...)
		listed := map[string]int{}
		for _, mt := range res.(*kmsg.MetadataResponse).Topics {
			if mt.Topic != nil && mt.ErrorCode == errNone {
				listed[*mt.Topic] = len(mt.Partitions)
			}
		}
		for _, t := range known {
			if n, ok := listed[t]; !ok || int32(n) != r.parts {
				problems = append(problems, fmt.Sprintf("metadata (all topics): topic %s listed with %d partitions (present %v)", t, n, ok))
			}
		}
	}
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = r.group
	if res, err := r.conns.Request(ctx, addr, fc); err == nil {
		f := res.(*kmsg.FindCoordinatorResponse)
		switch f.ErrorCode {
		case errNone:
			got := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port)))
			if !slices.Contains(r.c.KafkaAddrs(), got) {
				problems = append(problems, "find coordinator: "+got+" is no node of the cluster")
			}
		case kerr.CoordinatorNotAvailable.Code, kerr.CoordinatorLoadInProgress.Code:
		default:
			problems = append(problems, fmt.Sprintf("find coordinator: error %d", f.ErrorCode))
		}
	}
	for _, t := range known {
		of := kmsg.NewPtrOffsetFetchRequest()
		of.Group = r.group
		ot := kmsg.NewOffsetFetchRequestTopic()
		ot.Topic = t
		for p := range r.parts {
			ot.Partitions = append(ot.Partitions, p)
		}
		of.Topics = []kmsg.OffsetFetchRequestTopic{ot}
		res, err := r.conns.Request(ctx, addr, of)
		if err != nil {
			break
		}
		o := res.(*kmsg.OffsetFetchResponse)
		if coordinatorMoved(o.ErrorCode) {
			break
		}
		if o.ErrorCode != errNone {
			problems = append(problems, fmt.Sprintf("offset fetch: error %d", o.ErrorCode))
			break
		}
		r.mu.Lock()
		r.offsetReads++
		r.mu.Unlock()
		for _, rt := range o.Topics {
			for _, rp := range rt.Partitions {
				if coordinatorMoved(rp.ErrorCode) {
					continue
				}
				if want := r.acked[t][rp.Partition]; rp.ErrorCode != errNone || rp.Offset < want {
					problems = append(problems, fmt.Sprintf("offset fetch: %s/%d at %d (error %d), %d was acknowledged", t, rp.Partition, rp.Offset, rp.ErrorCode, want))
				}
			}
		}
	}
	return true, problems
}
