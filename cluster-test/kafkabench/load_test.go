package kafkabench

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// pconn is a pipelined Kafka connection: any number of goroutines may call
// do; answers are matched to requests in order.
type pconn struct {
	nc      net.Conn
	wmu     sync.Mutex
	corr    int32
	buf     []byte
	fm      *kmsg.RequestFormatter
	waiters chan *waiter
	dead    chan struct{}
	err     error
}

type waiter struct {
	req  kmsg.Request
	resp kmsg.Response
	err  error
	done chan struct{}
}

func dialP(addr string) (*pconn, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &pconn{nc: nc, fm: kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench")), waiters: make(chan *waiter, 1024), dead: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

func (c *pconn) readLoop() {
	br := bufio.NewReaderSize(c.nc, 64<<10)
	var size [4]byte
	for w := range c.waiters {
		var err error
		if _, err = io.ReadFull(br, size[:]); err == nil {
			frame := make([]byte, binary.BigEndian.Uint32(size[:]))
			if _, err = io.ReadFull(br, frame); err == nil {
				body := frame[4:]
				resp := w.req.ResponseKind()
				resp.SetVersion(w.req.GetVersion())
				// ApiVersions answers with a header without tags at every version.
				if resp.IsFlexible() && w.req.Key() != kmsg.ApiVersions.Int16() && len(body) > 0 {
					body = body[1:]
				}
				err = resp.ReadFrom(body)
				w.resp = resp
			}
		}
		w.err = err
		close(w.done)
		if err != nil {
			c.err = err
			close(c.dead)
			for w := range c.waiters {
				w.err = err
				close(w.done)
			}
			return
		}
	}
}

func (c *pconn) do(req kmsg.Request) (kmsg.Response, error) {
	w := &waiter{req: req, done: make(chan struct{})}
	c.wmu.Lock()
	select {
	case <-c.dead:
		c.wmu.Unlock()
		return nil, c.err
	default:
	}
	c.corr++
	c.buf = c.fm.AppendRequest(c.buf[:0], req, c.corr)
	c.waiters <- w
	_, err := c.nc.Write(c.buf)
	c.wmu.Unlock()
	if err != nil {
		return nil, err
	}
	<-w.done
	return w.resp, w.err
}

func (c *pconn) close() {
	c.nc.Close()
	c.wmu.Lock()
	close(c.waiters)
	c.wmu.Unlock()
}

type member struct {
	group, id string
	gen       int32
	partition int32
	// synced is when the member's SyncGroup of its final generation was
	// answered.
	synced time.Time
}

// formRequests counts the requests joinGroup sends, so that a formation
// benchmark can show how many each group took on each server.
var formRequests struct{ joins, syncs, heartbeats atomic.Int64 }

// joinPoll is how long a synced member waits between heartbeats while it
// waits for the rest of its group to sync in the same generation.
const joinPoll = 10 * time.Millisecond

// joinGroup brings len(conns) members into group through conns (one per
// member, so a parked JoinGroup never blocks another member). Each member
// behaves like a client: join, sync (the leader assigns one partition per
// member), then heartbeat until all are stable in one generation, re-joining
// when told to.
func joinGroup(conns []*pconn, group string) ([]member, error) {
	var (
		mu     sync.Mutex
		synced = make([]int32, len(conns))
		out    = make([]member, len(conns))
		errs   = make([]error, len(conns))
		done   atomic.Bool
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(2 * time.Minute)
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := ""
			for !done.Load() {
				if time.Now().After(deadline) {
					errs[i] = fmt.Errorf("group %s member %d: not stable in time", group, i)
					return
				}
				j := kmsg.NewPtrJoinGroupRequest()
				j.SetVersion(3)
				j.Group, j.MemberID, j.ProtocolType = group, id, "consumer"
				j.SessionTimeoutMillis, j.RebalanceTimeoutMillis = int32(benchSession.Milliseconds()), 60000
				meta := kmsg.NewConsumerMemberMetadata()
				meta.Topics = []string{benchTopic}
				p := kmsg.NewJoinGroupRequestProtocol()
				p.Name, p.Metadata = "range", meta.AppendTo(nil)
				j.Protocols = append(j.Protocols, p)
				formRequests.joins.Add(1)
				r, err := c.do(j)
				if err != nil {
					errs[i] = err
					return
				}
				jr := r.(*kmsg.JoinGroupResponse)
				if jr.ErrorCode != 0 {
					if jr.ErrorCode == 25 { // UNKNOWN_MEMBER_ID
						id = ""
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				id = jr.MemberID
				s := kmsg.NewPtrSyncGroupRequest()
				s.SetVersion(3)
				s.Group, s.Generation, s.MemberID = group, jr.Generation, id
				if jr.LeaderID == id {
					for k, m := range jr.Members {
						a := kmsg.NewConsumerMemberAssignment()
						at := kmsg.NewConsumerMemberAssignmentTopic()
						at.Topic, at.Partitions = benchTopic, []int32{int32(k % benchMembers)}
						a.Topics = append(a.Topics, at)
						ga := kmsg.NewSyncGroupRequestGroupAssignment()
						ga.MemberID, ga.MemberAssignment = m.MemberID, a.AppendTo(nil)
						s.GroupAssignment = append(s.GroupAssignment, ga)
					}
				}
				formRequests.syncs.Add(1)
				r, err = c.do(s)
				if err != nil {
					errs[i] = err
					return
				}
				sr := r.(*kmsg.SyncGroupResponse)
				if sr.ErrorCode != 0 {
					continue
				}
				var a kmsg.ConsumerMemberAssignment
				if err := a.ReadFrom(sr.MemberAssignment); err != nil || len(a.Topics) != 1 || len(a.Topics[0].Partitions) != 1 {
					continue
				}
				mu.Lock()
				synced[i] = jr.Generation
				out[i] = member{group: group, id: id, gen: jr.Generation, partition: a.Topics[0].Partitions[0], synced: time.Now()}
				mu.Unlock()
				for !done.Load() {
					h := kmsg.NewPtrHeartbeatRequest()
					h.SetVersion(3)
					h.Group, h.Generation, h.MemberID = group, jr.Generation, id
					formRequests.heartbeats.Add(1)
					r, err := c.do(h)
					if err != nil {
						errs[i] = err
						return
					}
					if r.(*kmsg.HeartbeatResponse).ErrorCode != 0 {
						break
					}
					mu.Lock()
					all := true
					for _, g := range synced {
						all = all && g == jr.Generation
					}
					mu.Unlock()
					if all {
						done.Store(true)
						return
					}
					time.Sleep(joinPoll)
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, m := range out {
		if m.gen != out[0].gen {
			return nil, fmt.Errorf("group %s: members at generations %d and %d", group, out[0].gen, m.gen)
		}
	}
	return out, nil
}

func joinAll(b *testing.B, addr string) []member {
	b.Helper()
	groups := benchCount("COHORT_BENCH_GROUPS", 10000, 20)
	start := time.Now()
	all, _ := formGroups(b, addr, "bench", groups, benchMembers, setupParallel)
	b.Logf("joined %d members in %d groups in %v", len(all), groups, time.Since(start).Round(time.Millisecond))
	return all
}

// formGroups forms groups groups of members members each, parallel groups
// at a time (each worker has a connection per member and forms one group
// after another), and returns every member, groups in order, and when the
// first JoinGroup was sent (the connections are dialed before).
func formGroups(b *testing.B, addr, prefix string, groups, members, parallel int) ([]member, time.Time) {
	b.Helper()
	jobs := make(chan int)
	results := make([][]member, groups)
	var firstErr atomic.Value
	var wg sync.WaitGroup
	parallel = min(parallel, groups)
	workers := make([][]*pconn, parallel)
	for w := range workers {
		conns := make([]*pconn, members)
		for i := range conns {
			c, err := dialP(addr)
			if err != nil {
				b.Fatal(err)
			}
			conns[i] = c
		}
		workers[w] = conns
	}
	for _, conns := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				for _, c := range conns {
					c.close()
				}
			}()
			for g := range jobs {
				ms, err := joinGroup(conns, fmt.Sprintf("%s-%05d", prefix, g))
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				results[g] = ms
			}
		}()
	}
	start := time.Now()
	for g := range groups {
		jobs <- g
	}
	close(jobs)
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	var all []member
	for _, ms := range results {
		all = append(all, ms...)
	}
	return all, start
}

func createBenchTopic(b *testing.B, addr string) { createTopic(b, addr, benchTopic, benchMembers) }

// load sends b.N requests built by mk for members round-robin, closed loop,
// and reports throughput and the server's CPU and system calls per request.
// Each connection keeps benchDepth requests in flight: its writer sends, in
// one write, a new request for every answer its reader has taken since the
// last write, as a pipelining client with a fixed window does. Both servers
// get exactly the same load.
func load(b *testing.B, s *benchServer, phase string, ms []member, mk func(m member) kmsg.Request, ok func(kmsg.Response) bool) {
	loadConns(b, s, phase, benchConns, ms, mk, ok)
}

// loadConns is load over nconns connections (benchDepth requests in flight
// on each); it also reports the answers' latency (p50, p99).
func loadConns(b *testing.B, s *benchServer, phase string, nconns int, ms []member, mk func(m member) kmsg.Request, ok func(kmsg.Response) bool) {
	conns := make([]net.Conn, nconns)
	for i := range conns {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = c
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	defer s.profile(phase)()
	var next, bad atomic.Int64
	var firstBad atomic.Value
	take := func() (kmsg.Request, bool) {
		n := next.Add(1) - 1
		if n >= int64(b.N) {
			return nil, false
		}
		return mk(ms[int(n)%len(ms)]), true
	}
	b.ResetTimer()
	a0, e0 := s.allocs(), s.ask("raftindex", "RAFTINDEX")
	ab0, gc0 := s.allocBytes(), s.gcs()
	r0, w0 := s.syscalls()
	cpu0, t0, m0 := s.cpu(), time.Now(), readMachineTimes()
	errs := make([]error, len(conns))
	lats := make([][]time.Duration, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = window(c, benchDepth, take, func(r kmsg.Response, lat time.Duration) {
				if !ok(r) {
					if bad.Add(1) == 1 {
						firstBad.Store(r)
					}
				}
				lats[i] = append(lats[i], lat)
			})
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(t0), s.cpu()-cpu0
	r1, w1 := s.syscalls()
	a1, e1 := s.allocs(), s.ask("raftindex", "RAFTINDEX")
	ab1, gc1 := s.allocBytes(), s.gcs()
	b.StopTimer()
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	if bad.Load() > 0 {
		b.Fatalf("%d of %d answers carried an error, the first: %+v", bad.Load(), b.N, firstBad.Load())
	}
	reportMachine(b, m0)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server-cpu-µs/req")
	b.ReportMetric(float64(a1-a0)/float64(b.N), "server-allocs/req")
	b.ReportMetric(float64(ab1-ab0)/float64(b.N), "server-alloc-B/req")
	b.ReportMetric(float64(gc1-gc0)*10000/float64(b.N), "server-gcs/10k-req")
	b.ReportMetric(float64(r1-r0)/float64(b.N), "server-reads/req")
	b.ReportMetric(float64(w1-w0)/float64(b.N), "server-writes/req")
	if e1 > e0 {
		// Raft entries the leader wrote: requests per entry is how well
		// the store batches.
		b.ReportMetric(float64(b.N)/float64(e1-e0), "req/raft-entry")
	}
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	}
}

// window runs a closed loop of requests from take over nc with depth in
// flight, handing every decoded answer to check, until take has no more and
// every request sent was answered.
func window(nc net.Conn, depth int, take func() (kmsg.Request, bool), check func(kmsg.Response, time.Duration)) error {
	type sentReq struct {
		req kmsg.Request
		at  time.Time
	}
	credits := make(chan struct{}, depth)
	sent := make(chan sentReq, depth)
	for range depth {
		credits <- struct{}{}
	}
	readErr := make(chan error, 1)
	go func() {
		br := bufio.NewReaderSize(nc, 64<<10)
		var frame []byte
		for sr := range sent {
			req := sr.req
			var size [4]byte
			if _, err := io.ReadFull(br, size[:]); err != nil {
				readErr <- err
				return
			}
			n := int(binary.BigEndian.Uint32(size[:]))
			if cap(frame) < n {
				frame = make([]byte, n)
			}
			frame = frame[:n]
			if _, err := io.ReadFull(br, frame); err != nil || n < 4 {
				readErr <- fmt.Errorf("short answer: %v", err)
				return
			}
			body := frame[4:]
			resp := req.ResponseKind()
			resp.SetVersion(req.GetVersion())
			if resp.IsFlexible() && len(body) > 0 {
				body = body[1:]
			}
			if err := resp.ReadFrom(body); err != nil {
				readErr <- err
				return
			}
			check(resp, time.Since(sr.at))
			credits <- struct{}{}
		}
		readErr <- nil
	}()
	fm := kmsg.NewRequestFormatter(kmsg.FormatterClientID("bench"))
	var buf []byte
	var corr int32
	var pending []kmsg.Request
	err := func() error {
		defer close(sent)
		for more := true; more; {
			select {
			case <-credits:
			case err := <-readErr:
				return fmt.Errorf("reader stopped: %v", err)
			}
			buf = buf[:0]
			for {
				req, ok := take()
				if !ok {
					more = false
					break
				}
				corr++
				// AppendRequest writes the frame length at the start of
				// the slice it is given, so give it the free tail only.
				buf = append(buf, fm.AppendRequest(buf[len(buf):], req, corr)...)
				pending = append(pending, req)
				if len(credits) == 0 { // this loop is the only taker
					break
				}
				<-credits
			}
			if len(buf) > 0 {
				at := time.Now()
				for _, req := range pending {
					sent <- sentReq{req, at}
				}
				pending = pending[:0]
				if _, err := nc.Write(buf); err != nil {
					return err
				}
			}
		}
		return nil
	}()
	if err != nil {
		nc.Close()
		<-readErr
		return err
	}
	return <-readErr
}

func heartbeat(m member) kmsg.Request {
	h := kmsg.NewPtrHeartbeatRequest()
	h.SetVersion(4)
	h.Group, h.Generation, h.MemberID = m.group, m.gen, m.id
	return h
}

func heartbeatOK(r kmsg.Response) bool { return r.(*kmsg.HeartbeatResponse).ErrorCode == 0 }

var commitSeq atomic.Int64

func offsetCommit(m member) kmsg.Request {
	c := kmsg.NewPtrOffsetCommitRequest()
	c.SetVersion(8)
	c.Group, c.Generation, c.MemberID = m.group, m.gen, m.id
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = benchTopic
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset = m.partition, commitSeq.Add(1)
	t.Partitions = append(t.Partitions, p)
	c.Topics = append(c.Topics, t)
	return c
}

// benchRuns counts BenchmarkGroups runs, to alternate the server order.
var benchRuns int

func offsetCommitOK(r kmsg.Response) bool {
	for _, t := range r.(*kmsg.OffsetCommitResponse).Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode != 0 {
				return false
			}
		}
	}
	return true
}
