package raftmux

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cohort-coord/cohort/tlsconfig"
)

// DefaultHeaderTimeout bounds an incoming connection's TLS handshake and
// header together.
const DefaultHeaderTimeout = 10 * time.Second

// Sentinel errors.
var (
	ErrClosed       = errors.New("raftmux: closed")
	ErrShardInUse   = errors.New("raftmux: shard already registered")
	ErrUnknownShard = errors.New("raftmux: unknown shard")
)

// Config configures a Mux. The zero value is plain TCP.
type Config struct {
	// TLS, when set, wraps every connection, both ways, in TLS with client
	// certificates required (as raftfsm does for its single transport).
	TLS *tlsconfig.Source
	// ServerName returns the name a peer's certificate must carry when
	// dialing address (a node id, say). Nil, or "", means the host of
	// address.
	ServerName func(address raft.ServerAddress) string
	// HeaderTimeout bounds handshake and header of an incoming
	// connection; 0 means DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// Logger receives refused connections at debug level; nil means
	// slog.Default().
	Logger *slog.Logger
}

// Stats are a Mux's counters since it was made.
type Stats struct {
	Accepted       uint64 // connections handed to a shard
	RefusedTLS     uint64 // TLS handshake failed
	RefusedHeader  uint64 // header garbage, short, or of another version
	RefusedTimeout uint64 // handshake or header not done in HeaderTimeout
	RefusedShard   uint64 // header names a shard not registered (or closing)
	Dialed         uint64 // connections dialed by the shards' layers
	// Frames counts writes on dialed connections. NetworkTransport
	// flushes each RPC it sends in one write (its send buffer is 256 KiB),
	// so this is the count of Raft RPCs sent, heartbeats included, for
	// RPCs smaller than that buffer.
	Frames uint64
}

// Mux accepts the node's Raft connections and demultiplexes them by shard.
type Mux struct {
	ln      net.Listener
	cfg     Config
	server  *tls.Config
	log     *slog.Logger
	mu      sync.Mutex
	layers  map[uint16]*Layer
	closed  bool
	done    chan struct{}
	wg      sync.WaitGroup
	pending sync.Map // net.Conn -> struct{}: connections before hand-off

	accepted, dialed, frames                                atomic.Uint64
	refusedTLS, refusedHeader, refusedTimeout, refusedShard atomic.Uint64
}

// Listen opens the listener on bind (host:port of an address the peers can
// dial; a wildcard host is refused) and serves it.
func Listen(bind string, cfg Config) (*Mux, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if a := ln.Addr().(*net.TCPAddr); a.IP == nil || a.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raftmux: %s is not advertisable (bind a specific address)", bind)
	}
	return New(ln, cfg), nil
}

// New serves ln, which the Mux owns from now on.
func New(ln net.Listener, cfg Config) *Mux {
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &Mux{ln: ln, cfg: cfg, log: cfg.Logger, layers: map[uint16]*Layer{}, done: make(chan struct{})}
	if cfg.TLS != nil {
		m.server = cfg.TLS.Server(tlsconfig.ClientAuthRequire)
	}
	m.wg.Add(1)
	go m.serve()
	return m
}

// Addr is the listener's address, which every shard advertises.
func (m *Mux) Addr() net.Addr { return m.ln.Addr() }

// Stats returns the counters.
func (m *Mux) Stats() Stats {
	return Stats{
		Accepted:       m.accepted.Load(),
		RefusedTLS:     m.refusedTLS.Load(),
		RefusedHeader:  m.refusedHeader.Load(),
		RefusedTimeout: m.refusedTimeout.Load(),
		RefusedShard:   m.refusedShard.Load(),
		Dialed:         m.dialed.Load(),
		Frames:         m.frames.Load(),
	}
}

// Shard registers shard and returns its stream layer, for
// raft.NetworkTransportConfig.Stream. Closing the layer (the transport
// does on Close) unregisters it. The mux serves from the start, so
// register every shard before starting the first Raft instance: a peer
// that reaches a shard not registered yet is refused (RefusedShard) and
// its transport dials again.
func (m *Mux) Shard(shard uint16) (*Layer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, ok := m.layers[shard]; ok {
		return nil, fmt.Errorf("%w: %d", ErrShardInUse, shard)
	}
	l := &Layer{mux: m, shard: shard, conns: make(chan net.Conn), done: make(chan struct{})}
	m.layers[shard] = l
	return l, nil
}

// Close stops the listener, closes every layer and the connections not yet
// handed to a shard, and waits for the mux's goroutines. Connections
// already handed to a shard belong to its transport. Close the shards'
// transports first: a transport whose layer is closed under it retries
// Accept until it is closed itself.
func (m *Mux) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.done)
	layers := make([]*Layer, 0, len(m.layers))
	for _, l := range m.layers {
		layers = append(layers, l)
	}
	m.mu.Unlock()
	err := m.ln.Close()
	for _, l := range layers {
		l.Close()
	}
	m.pending.Range(func(k, _ any) bool {
		k.(net.Conn).Close()
		return true
	})
	m.wg.Wait()
	return err
}

func (m *Mux) serve() {
	defer m.wg.Done()
	var backoff time.Duration
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (out of descriptors, say): back off as
			// net/http does rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			m.log.Warn("raftmux: accept", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
				continue
			case <-m.done:
				return
			}
		}
		backoff = 0
		m.pending.Store(c, struct{}{})
		select {
		case <-m.done: // Close may have swept pending before the Store
			m.pending.Delete(c)
			c.Close()
			return
		default:
		}
		m.wg.Add(1)
		go m.handle(c)
	}
}

// handle does the handshake and reads the header within HeaderTimeout,
// then hands the connection to its shard or closes it.
func (m *Mux) handle(raw net.Conn) {
	defer m.wg.Done()
	defer m.pending.Delete(raw)
	conn := raw
	deadline := time.Now().Add(m.cfg.HeaderTimeout)
	if err := raw.SetDeadline(deadline); err != nil {
		raw.Close()
		return
	}
	if m.server != nil {
		tc := tls.Server(raw, m.server)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			m.refuse(raw, timeoutOr(err, &m.refusedTLS, &m.refusedTimeout), "TLS handshake", err)
			return
		}
		conn = tc
	}
	var hdr [HeaderLen]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		m.refuse(raw, timeoutOr(err, &m.refusedHeader, &m.refusedTimeout), "header", err)
		return
	}
	shard, err := DecodeHeader(hdr[:])
	if err != nil {
		m.refuse(raw, &m.refusedHeader, "header", err)
		return
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		raw.Close()
		return
	}
	m.mu.Lock()
	l := m.layers[shard]
	m.mu.Unlock()
	if l == nil || !l.deliver(conn) {
		m.refuse(raw, &m.refusedShard, "shard", fmt.Errorf("%w: %d", ErrUnknownShard, shard))
		return
	}
	m.accepted.Add(1)
}

// timeoutOr picks the timeout counter for a deadline error.
func timeoutOr(err error, other, timeout *atomic.Uint64) *atomic.Uint64 {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return timeout
	}
	return other
}

func (m *Mux) refuse(c net.Conn, counter *atomic.Uint64, what string, err error) {
	counter.Add(1)
	c.Close()
	m.log.Debug("raftmux: refused a connection", "remote", c.RemoteAddr().String(), "at", what, "err", err)
}

// dial connects to the mux at address and writes the header for shard.
func (m *Mux) dial(shard uint16, address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	deadline := time.Now().Add(timeout)
	raw, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, err
	}
	conn := raw
	if err := raw.SetDeadline(deadline); err != nil {
		raw.Close()
		return nil, err
	}
	if m.cfg.TLS != nil {
		name := m.serverName(address)
		tc := tls.Client(raw, m.cfg.TLS.Client(name))
		if err := tc.Handshake(); err != nil {
			raw.Close()
			return nil, fmt.Errorf("raftmux: TLS to %s (as %s): %w", address, name, err)
		}
		conn = tc
	}
	if _, err := conn.Write(AppendHeader(nil, shard)); err != nil {
		raw.Close()
		return nil, fmt.Errorf("raftmux: header to %s: %w", address, err)
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		raw.Close()
		return nil, err
	}
	m.dialed.Add(1)
	return &countedConn{Conn: conn, frames: &m.frames}, nil
}

func (m *Mux) serverName(address raft.ServerAddress) string {
	if m.cfg.ServerName != nil {
		if n := m.cfg.ServerName(address); n != "" {
			return n
		}
	}
	host, _, err := net.SplitHostPort(string(address))
	if err != nil {
		return string(address)
	}
	return host
}

func (m *Mux) unregister(l *Layer) {
	m.mu.Lock()
	if m.layers[l.shard] == l {
		delete(m.layers, l.shard)
	}
	m.mu.Unlock()
}

// countedConn counts the writes of a dialed connection (Stats.Frames).
type countedConn struct {
	net.Conn
	frames *atomic.Uint64
}

func (c *countedConn) Write(p []byte) (int, error) {
	c.frames.Add(1)
	return c.Conn.Write(p)
}

// Layer is one shard's raft.StreamLayer on a Mux.
type Layer struct {
	mux   *Mux
	shard uint16
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

var _ raft.StreamLayer = (*Layer)(nil)

// Shard is the shard the layer carries.
func (l *Layer) Shard() uint16 { return l.shard }

// deliver hands c to Accept; false if the layer is closed first.
func (l *Layer) deliver(c net.Conn) bool {
	select {
	case <-l.done:
		return false
	default:
	}
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept returns the shard's next incoming connection, header consumed.
func (l *Layer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, fmt.Errorf("shard %d: %w", l.shard, ErrClosed)
	}
}

// Close unregisters the shard; its pending connections are refused.
func (l *Layer) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.mux.unregister(l)
	})
	return nil
}

// Addr is the mux's address.
func (l *Layer) Addr() net.Addr { return l.mux.Addr() }

// Dial connects to the shard on the peer at address.
func (l *Layer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return l.mux.dial(l.shard, address, timeout)
}
