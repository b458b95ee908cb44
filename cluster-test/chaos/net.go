// Package chaos is the fault layer, the nemeses, the workload recorder and
// the checkers of cohort's chaos suite. It runs real cohortd processes
// (cluster-test's Cluster) on 127.0.0.1 and routes every Raft link between
// them through an in-process TCP proxy per directed link, so that a link
// can be cut one way or both ways, or slowed.
//
// Why proxies and not network namespaces with tc/nft: namespaces need root
// (CAP_NET_ADMIN) and leave interfaces and rules behind when a run dies,
// while the suite has to run unprivileged in the normal test run on a shared
// machine; a proxy needs nothing but a port, disappears with the process,
// and knows which node sent each byte. Each node dials each peer at its own
// proxy (cohortd --raft-peer-addrs, hashicorp/raft's ServerAddressProvider),
// so the proxy for A->B carries exactly the connections A opens to B: A's
// requests and B's answers. Cutting "A to B" stops the bytes from A to B on
// both A's connections to B and B's connections to A, as a dropped-packet
// firewall rule would. A cut stalls the stream instead of discarding bytes
// (a TCP stream with holes would be corrupt, not partitioned): the sender's
// buffers fill and its RPCs time out, and after the heal the late bytes are
// delivered, as TCP retransmission does after a real partition heals.
//
// The native API between nodes carries only JoinRequest (a restarted or
// re-added node asking to be a voter); it is not proxied. Kafka clients
// and the member-library members (over the native API) reach every node
// directly: an isolated leader stays reachable by clients, which is the case
// that matters for fencing.
//
// The workload: emulated members (eager and static, cluster-test's Member
// over the Kafka protocol, every request recorded), franz-go consumers
// (cooperative-sticky) and two groups of cohort's own member library over
// the native API (one dynamic with its default balancers, cooperative-sticky
// first; one static with the eager range balancer), the last ones
// recorded through their assigned / revoked / lost callbacks and their
// commits.
package chaos

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
)

// Dir is the direction of traffic from one node to another.
type Dir struct{ From, To string }

func (d Dir) String() string { return d.From + "->" + d.To }

// Net is the set of proxies between a fixed set of node ids and the state
// of every directed link.
type Net struct {
	mu      sync.Mutex
	ids     []string
	target  func(id string) string // current Raft address of a node
	proxies map[Dir]*proxy
	cut     map[Dir]bool
	delay   map[Dir]time.Duration
	changed chan struct{} // closed and replaced on every change
	closed  chan struct{}
}

// NewNet starts one listener on 127.0.0.1 per ordered pair of ids. target
// returns a node's current Raft address ("" while it has none); it is read
// on every new connection, so nodes may start after the proxies.
func NewNet(ids []string, target func(id string) string) (*Net, error) {
	n := &Net{ids: ids, target: target, proxies: map[Dir]*proxy{}, cut: map[Dir]bool{}, delay: map[Dir]time.Duration{},
		changed: make(chan struct{}), closed: make(chan struct{})}
	for _, a := range ids {
		for _, b := range ids {
			if a == b {
				continue
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				n.Close()
				return nil, err
			}
			p := &proxy{net: n, dir: Dir{a, b}, l: l, conns: map[net.Conn]bool{}}
			n.proxies[p.dir] = p
			go p.serve()
		}
	}
	return n, nil
}

// PeerAddrs returns the --raft-peer-addrs value for node id: every peer at
// the proxy of the link from id to it.
func (n *Net) PeerAddrs(id string) string {
	var parts []string
	for d, p := range n.proxies {
		if d.From == id {
			parts = append(parts, d.To+"="+p.l.Addr().String())
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// IDs returns the node ids the net connects.
func (n *Net) IDs() []string { return append([]string(nil), n.ids...) }

func (n *Net) notifyLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// Cut stops the traffic from one node to another (one way).
func (n *Net) Cut(from, to string) {
	n.mu.Lock()
	n.cut[Dir{from, to}] = true
	n.notifyLocked()
	n.mu.Unlock()
}

// Partition cuts every link between nodes of different sides, both ways.
// Nodes named in no side keep all their links.
func (n *Net) Partition(sides ...[]string) {
	side := map[string]int{}
	for i, s := range sides {
		for _, id := range s {
			side[id] = i + 1
		}
	}
	n.mu.Lock()
	for d := range n.proxies {
		if a, b := side[d.From], side[d.To]; a != 0 && b != 0 && a != b {
			n.cut[d] = true
		}
	}
	n.notifyLocked()
	n.mu.Unlock()
}

// Slow delays the traffic from one node to another by d (0 removes it).
func (n *Net) Slow(from, to string, d time.Duration) {
	n.mu.Lock()
	if d <= 0 {
		delete(n.delay, Dir{from, to})
	} else {
		n.delay[Dir{from, to}] = d
	}
	n.notifyLocked()
	n.mu.Unlock()
}

// Heal restores every link to full speed.
func (n *Net) Heal() {
	n.mu.Lock()
	n.cut, n.delay = map[Dir]bool{}, map[Dir]time.Duration{}
	n.notifyLocked()
	n.mu.Unlock()
}

// Faulty returns the links that are cut or slowed now, for logs.
func (n *Net) Faulty() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for d := range n.cut {
		out = append(out, "cut "+d.String())
	}
	for d, v := range n.delay {
		out = append(out, fmt.Sprintf("slow %s %v", d, v))
	}
	sort.Strings(out)
	return out
}

// state returns whether d is cut, its delay, and a channel closed on the
// next change.
func (n *Net) state(d Dir) (bool, time.Duration, <-chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cut[d], n.delay[d], n.changed
}

// Close stops every proxy and closes their connections.
func (n *Net) Close() {
	n.mu.Lock()
	select {
	case <-n.closed:
		n.mu.Unlock()
		return
	default:
	}
	close(n.closed)
	n.mu.Unlock()
	for _, p := range n.proxies {
		p.close()
	}
}

// proxy forwards the connections one node opens to another.
type proxy struct {
	net *Net
	dir Dir
	l   net.Listener

	mu    sync.Mutex
	conns map[net.Conn]bool
}

func (p *proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.l.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

func (p *proxy) handle(down net.Conn) {
	addr := p.net.target(p.dir.To)
	if addr == "" {
		down.Close()
		return
	}
	up, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		down.Close()
		return
	}
	p.track(down, true)
	p.track(up, true)
	done := make(chan struct{}, 2)
	go func() { p.net.pump(down, up, p.dir); done <- struct{}{} }()
	go func() { p.net.pump(up, down, Dir{p.dir.To, p.dir.From}); done <- struct{}{} }()
	<-done
	down.Close()
	up.Close()
	<-done
	p.track(down, false)
	p.track(up, false)
}

type chunk struct {
	b  []byte
	at time.Time
}

// pump copies src to dst for traffic in direction d: while d is cut the
// bytes wait (and, once the queue is full, src is no longer read), and each
// chunk is written no earlier than its arrival plus d's delay.
func (n *Net) pump(src, dst net.Conn, d Dir) {
	q := make(chan chunk, 64)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 32<<10)
			k, err := src.Read(b)
			if k > 0 {
				q <- chunk{b[:k], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		dst.Close()
		for range q { // let the reader finish once src is closed
		}
	}()
	for c := range q {
		for {
			cut, delay, changed := n.state(d)
			if !cut {
				if wait := time.Until(c.at.Add(delay)); wait > 0 {
					select {
					case <-time.After(wait):
					case <-changed:
						continue
					case <-n.closed:
						return
					}
				}
				break
			}
			select {
			case <-changed:
			case <-n.closed:
				return
			}
		}
		if _, err := dst.Write(c.b); err != nil {
			src.Close()
			return
		}
	}
}
