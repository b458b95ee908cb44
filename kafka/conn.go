package kafka

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/internal/disconnect"
	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/security"
)

// errNone is the code of success; every other code is a kerr error.
const errNone int16 = 0

// errBadInput marks input that closes the connection.
var errBadInput = errors.New("bad input")

// conn is one client connection. A reader goroutine decodes frames; a writer
// goroutine writes the answers in request order. At most maxInFlight requests
// are in progress or waiting to be written.
//
// The requests that wait on a Raft write or a rebalance (OffsetCommit,
// JoinGroup, SyncGroup) need no goroutine: the reader prepares each and sends
// it to the groups (Groups.Send), whose answer marks it done; the writer
// builds the Kafka answer in its turn, or answers by itself at the call's
// bound. Nothing waits per request, so a thousand commits in flight are a
// thousand small records, not a thousand parked goroutines. The other
// requests are handed to worker goroutines, so later requests are processed
// while earlier ones wait.
//
// The answers wait in fifo, in request order. The writer sleeps until the
// first of them is complete: whatever completes it (the reader queueing a
// known answer, a worker, the groups' Answer, the deadline's timer) wakes
// the writer through wake. A request sent to the groups wakes it once, when
// its answer comes, not also when it is queued; one timer per connection,
// kept armed no later than the first waiting request's deadline, stands for
// every deadline.
//
// Heartbeats, which the coordinator answers without waiting, are answered on
// the reader goroutine. When no earlier answer is still queued, the reader
// writes the answer into the output buffer itself, and flushes that buffer
// before it waits for more input: a batch of pipelined heartbeats costs one
// read and one write, with no hand-off between goroutines.
type conn struct {
	l      *Listener
	nc     net.Conn
	ctx    context.Context
	cancel context.CancelFunc
	host   string         // Kafka's client host format: "/127.0.0.1"
	jobs   chan *pending  // to idle workers
	wg     sync.WaitGroup // workers
	room   chan struct{}  // a token per request in flight (maxInFlight)
	wake   chan struct{}  // the writer's wake-up: room for one token

	wmu     sync.Mutex    // guards out, fifo, head, werr, expiry and armed
	out     *bufio.Writer // answers, in request order
	fifo    []*pending    // fifo[head:] wait to be written, in request order
	head    int
	werr    bool        // a write failed: the connection is closing
	expiry  *time.Timer // wakes the writer at the first waiting deadline
	armed   bool        // expiry is set to fire at armedAt
	armedAt time.Time
	fired   atomic.Bool // expiry fired since the writer last looked

	// Reader-owned scratch for heartbeats answered inline: the decoded
	// request, the request context, the native request and the answer are
	// reused, and the client, member and instance id strings are kept while
	// they stay the same.
	hb        kmsg.HeartbeatRequest
	inline    request
	clientID  string
	tags      tagReader
	hbStrings heartbeatStrings
	hbNative  *grouppb.HeartbeatRequest // nil after a call that did not return
	hbAnswer  kmsg.HeartbeatResponse

	commits commitStrings // the strings of the reader's last decoded commit
	stamp   stampReader   // the reader's source, with metrics on
	shard   uint32        // the connection's copy of the latency histograms
	// inlineAnswers are the inline answers whose metrics wait for the
	// reader's flush (noteInline).
	inlineAnswers []inlineAnswer

	// tls is the connection's TLS state once its handshake completed; nil
	// on a plaintext listener.
	tls *tls.ConnectionState

	// rebalanceHint is the last JoinGroup rebalance timeout seen on this
	// connection; it bounds how long a SyncGroup may wait.
	rebalanceHint atomic.Int32

	// principal is who the connection acts as (auth.go); set by the reader
	// before it dispatches any request that reads it.
	principal security.Principal
	// sasl is the SASL session of a SASL listener's connection, nil
	// otherwise; saslRaw: a v0 handshake chose raw SASL tokens.
	sasl    *security.Session
	saslRaw bool
	// saslMech is the mechanism the client's handshake asked for.
	saslMech string
}

func (l *Listener) newConn(parent context.Context, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(parent)
	host := nc.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	c := &conn{
		l:      l,
		nc:     nc,
		ctx:    ctx,
		cancel: cancel,
		host:   "/" + host,
		jobs:   make(chan *pending),
		room:   make(chan struct{}, maxInFlight),
		wake:   make(chan struct{}, 1),
		out:    bufio.NewWriterSize(nc, connBufferSize),
		shard:  l.connSeq.Add(1),
	}
	c.initAuth()
	return c
}

func (c *conn) close() {
	c.cancel()
	c.nc.Close()
}

// serve runs the connection until the client goes away, bad input arrives or
// the listener stops. It returns after every goroutine of the connection ended.
func (c *conn) serve() {
	c.l.open.Add(1)
	defer c.l.open.Add(-1)
	if tc, ok := c.nc.(*tls.Conn); ok {
		if err := c.handshake(tc); err != nil {
			// Logged before it is counted: whoever sees the count (a test
			// waiting for it) finds the line written.
			level := slog.LevelWarn
			if disconnect.Is(err) { // a client (or a TCP health check) that left
				level = slog.LevelDebug
			}
			c.l.log.Log(context.Background(), level, "closing connection: TLS handshake failed", "remote", c.nc.RemoteAddr().String(), "err", err)
			c.l.bad.Add(1)
			c.close()
			return
		}
	}
	c.tlsPrincipal()
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	err := c.readLoop()
	if errors.Is(err, errCloseAfterAnswers) {
		c.drain(writerDone)
	}
	if errors.Is(err, errBadInput) || errors.Is(err, errBeforeAuth) {
		c.l.bad.Add(1)
		c.l.log.Warn("closing connection on bad input", "remote", c.nc.RemoteAddr().String(), "err", err)
	}
	c.close()
	c.wg.Wait()
	<-writerDone
	c.wmu.Lock()
	if c.expiry != nil {
		c.expiry.Stop()
	}
	c.wmu.Unlock()
}

// handshake completes the TLS handshake within TLSHandshakeTimeout (or
// until the listener stops) and keeps the connection's TLS state.
func (c *conn) handshake(tc *tls.Conn) error {
	ctx, cancel := context.WithTimeout(c.ctx, TLSHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return err
	}
	st := tc.ConnectionState()
	c.tls = &st
	return nil
}

func (c *conn) readLoop() error {
	var src io.Reader = c.nc
	if c.l.metrics != nil {
		c.stamp.r = c.nc
		src = &c.stamp
	}
	br := bufio.NewReaderSize(src, connBufferSize)
	defer c.recordInline()
	var size [4]byte
	for {
		if br.Buffered() < len(size) {
			c.readerFlush()
		}
		if _, err := io.ReadFull(br, size[:]); err != nil {
			return err
		}
		n := int32(binary.BigEndian.Uint32(size[:]))
		if (n < 8 && !c.saslRaw) || n < 0 || n > c.l.cfg.MaxRequestBytes {
			return fmt.Errorf("%w: frame size %d (max %d)", errBadInput, n, c.l.cfg.MaxRequestBytes)
		}
		if br.Buffered() < int(n) {
			c.readerFlush()
		}
		var err error
		if int(n) <= br.Size() {
			// The frame stays in the read buffer while dispatch runs.
			var frame []byte
			if frame, err = br.Peek(int(n)); err != nil {
				return err
			}
			err = c.dispatchFrame(frame, true)
			br.Discard(int(n))
		} else {
			var frame []byte
			if frame, err = readBody(br, int(n)); err != nil {
				return err
			}
			err = c.dispatchFrame(frame, false)
		}
		if err != nil {
			return err
		}
	}
}

// stampReader records when a read from the connection last returned data.
// A request's latency (metrics) starts there: one clock reading per read of
// the socket, which brings several pipelined requests, rather than one per
// request; a request behind others in the same read counts its wait.
type stampReader struct {
	r  io.Reader
	at time.Time
}

func (s *stampReader) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	if n > 0 {
		s.at = time.Now()
	}
	return n, err
}

// received is when the request being dispatched was read (metrics only).
func (c *conn) received() time.Time {
	if c.stamp.at.IsZero() {
		return time.Now() // dispatched without the read loop
	}
	return c.stamp.at
}

// clientIDString returns b as a string, reusing the last one when equal.
func (c *conn) clientIDString(b []byte) string { return reuse(&c.clientID, b) }

// recoverHandler, deferred by code that runs a handler on the reader, turns
// the handler's panic into the reader's error: the connection closes.
func (c *conn) recoverHandler(h header, err *error) {
	if v := recover(); v != nil {
		c.handlerPanicked(h, v)
		*err = fmt.Errorf("request handler panicked")
	}
}

// dispatchFrame serves one frame: a raw SASL token while a v0 handshake's
// exchange runs, a Kafka request otherwise.
func (c *conn) dispatchFrame(frame []byte, borrowed bool) error {
	if c.saslRaw {
		return c.saslToken(bytes.Clone(frame))
	}
	return c.dispatch(frame, borrowed)
}

// drain waits (boundedly) until the writer wrote the queued answers and
// stopped, so a refused client reads why before the connection closes.
func (c *conn) drain(writerDone <-chan struct{}) {
	select {
	case <-writerDone:
	case <-time.After(5 * time.Second):
	}
}

// failWrite marks the connection broken after a failed write; c.wmu is held.
func (c *conn) failWrite() {
	c.werr = true
	c.close()
}

// handlerPanicked logs and counts a handler panic and closes the connection.
func (c *conn) handlerPanicked(h header, v any) {
	if c.l.onPanic != nil {
		c.l.onPanic(v)
	}
	c.l.bad.Add(1)
	c.l.log.Error("request handler panicked; closing connection",
		"api", kmsg.NameForKey(h.key), "version", h.version, "panic", v, "stack", string(debug.Stack()))
	c.close()
}
