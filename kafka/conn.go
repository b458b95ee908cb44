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
	"net"
	"reflect"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"

	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/security"
)

// errNone is the code of success; every other code is a kerr error.
const errNone int16 = 0

// errBadInput marks input that closes the connection.
var errBadInput = errors.New("bad input")

// conn is one client connection. A reader goroutine decodes frames and hands
// each request to a worker goroutine, so later requests are processed while
// earlier ones wait (a parked JoinGroup); a writer goroutine writes the
// answers in request order. At most maxInFlight requests are in progress or
// waiting to be written.
//
// With an AsyncGroups, the requests that wait on a Raft write or a
// rebalance (OffsetCommit, JoinGroup, SyncGroup) need no worker: the reader
// prepares each and sends it to the groups, whose answer marks it done; the
// writer builds the Kafka answer in its turn, or answers by itself at the
// call's bound. Nothing waits per request, so a thousand commits in flight
// are a thousand small records, not a thousand parked goroutines.
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
}

// pending is one request's slot in the answer order, and the work a worker
// does for it: fn(r, kreq), unless the answer was known when it was queued.
type pending struct {
	corr int32
	key  int16
	// state is asyncAnswered once the answer is complete (asyncExpired: an
	// asynchronous request's deadline passed first); whoever completes it
	// wakes the writer.
	state atomic.Int32
	resp  kmsg.Response // nil: no answer (Produce with acks=0)

	fn   handlerFunc
	r    request
	kreq kmsg.Request

	start time.Time // when queued; set only with metrics

	// An asynchronous request (sent to AsyncGroups, no worker): call
	// builds the answer from the native answer that Answer takes to the
	// native request, or from none once state says the deadline passed
	// first.
	call     asyncCall
	request  proto.Message
	deadline time.Time
	native   proto.Message

	// slot, when set, is the reused block p lives in (commitSlot): the
	// writer returns it once p's answer is written.
	slot *commitSlot
	// wait, when set, is the reused slot p lives in (waitSlot), returned
	// as a commit's slot is.
	wait *waitSlot

	last  bool   // the connection closes once this answer is written
	raw   bool   // a raw SASL token (after a v0 handshake), not a Kafka answer
	token []byte // the raw token
}

// asyncBound, when set (by tests), replaces every asynchronous request's
// bound.
var asyncBound time.Duration

// errNoAnswer is an asynchronous request's error at its deadline.
var errNoAnswer = errors.New("no answer from the groups by the call deadline")

// asyncCall builds an asynchronous request's Kafka answer from the native
// answer m to its native request n, or from the error when none came.
type asyncCall interface {
	answer(l *Listener, n, m proto.Message, err error) kmsg.Response
}

// A pending's states: waiting for its answer, being answered (Answer has
// won the race with the deadline and is storing the native answer),
// answered (complete), expired (its deadline passed first).
const (
	asyncWaiting int32 = iota
	asyncAnswering
	asyncAnswered
	asyncExpired
)

// Answer takes the native answer of an asynchronous request, unless its
// deadline passed first (coordinator.Answerer; it never blocks).
func (p *pending) Answer(m proto.Message) {
	if p.state.CompareAndSwap(asyncWaiting, asyncAnswering) {
		p.native = m
		c := p.r.c // p is the writer's, maybe reused, once answered
		p.state.Store(asyncAnswered)
		c.kick()
	}
}

// complete reports whether p's answer can be written.
func (p *pending) complete() bool {
	s := p.state.Load()
	return s == asyncAnswered || s == asyncExpired
}

type request struct {
	version  int16
	clientID string
	c        *conn
}

// inline reports whether r is its connection's inline request, answered on
// the reader goroutine: the reader's scratch messages are r's to use.
func (r *request) inline() bool { return r.c != nil && r == &r.c.inline }

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
			c.l.log.Warn("closing connection: TLS handshake failed", "remote", c.nc.RemoteAddr().String(), "err", err)
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

// inlineAnswer is an answer written on the reader whose metrics wait for
// the reader's flush (inlineAnswers).
type inlineAnswer struct {
	key, code int16
	start     time.Time
}

// maxInlineAnswers bounds how many inline answers wait for their metrics
// (256 bytes a connection that has answered inline).
const maxInlineAnswers = 8

// noteInline keeps the metrics of an answer the reader wrote to the output
// buffer: they are recorded when the reader flushes before its next read,
// with one clock reading for all the answers that leave together (and the
// latency then ends when the answer is sent, not when it is buffered).
func (c *conn) noteInline(key int16, resp kmsg.Response, start time.Time) {
	if c.inlineAnswers == nil {
		c.inlineAnswers = make([]inlineAnswer, 0, maxInlineAnswers)
	}
	c.inlineAnswers = append(c.inlineAnswers, inlineAnswer{key, errorCodeOf(resp), start})
	if len(c.inlineAnswers) == maxInlineAnswers {
		c.recordInline()
	}
}

// recordInline records the metrics of the inline answers noted so far.
func (c *conn) recordInline() {
	if len(c.inlineAnswers) == 0 {
		return
	}
	now := time.Now()
	for _, a := range c.inlineAnswers {
		c.l.metrics.record(a.key, a.code, now.Sub(a.start), c.shard)
	}
	c.inlineAnswers = c.inlineAnswers[:0]
}

// readerFlush is the reader's flush before it may wait for more input.
func (c *conn) readerFlush() {
	c.flush()
	c.recordInline()
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

// readBody reads n bytes; big frames grow with the data that actually arrives
// rather than being allocated up front from a claimed size.
func readBody(r io.Reader, n int) ([]byte, error) {
	if n <= 1<<20 {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	var buf bytes.Buffer
	if _, err := io.CopyN(&buf, r, int64(n)); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf.Bytes(), nil
}

// header is the decoded request header.
type header struct {
	key, version int16
	corr         int32
	clientID     []byte // nil: null
}

// tagReader reads the tagged-field section of a flexible request header.
type tagReader struct {
	src []byte
	bad bool
}

func (r *tagReader) Ok() bool { return !r.bad }

func (r *tagReader) Uvarint() uint32 {
	v, n := binary.Uvarint(r.src)
	if n <= 0 || v > 1<<31 {
		r.bad = true
		r.src = nil
		return 0
	}
	r.src = r.src[n:]
	return uint32(v)
}

func (r *tagReader) Span(n int) []byte {
	if n < 0 || n > len(r.src) {
		r.bad = true
		r.src = nil
		return nil
	}
	s := r.src[:n]
	r.src = r.src[n:]
	return s
}

func parseHeader(b []byte) (header, []byte, error) {
	if len(b) < 10 {
		return header{}, nil, fmt.Errorf("%w: short request header", errBadInput)
	}
	h := header{
		key:     int16(binary.BigEndian.Uint16(b[0:])),
		version: int16(binary.BigEndian.Uint16(b[2:])),
		corr:    int32(binary.BigEndian.Uint32(b[4:])),
	}
	idLen := int16(binary.BigEndian.Uint16(b[8:]))
	b = b[10:]
	if idLen > 0 {
		if int(idLen) > len(b) {
			return header{}, nil, fmt.Errorf("%w: client id overflows the frame", errBadInput)
		}
		h.clientID = b[:idLen:idLen]
		b = b[idLen:]
	} else if idLen < -1 {
		return header{}, nil, fmt.Errorf("%w: client id length %d", errBadInput, idLen)
	}
	return h, b, nil
}

// dispatch decodes one request frame and answers it, inline or through a
// worker. A borrowed frame is only valid until dispatch returns: requests
// answered later decode from a copy, since decoded byte fields share the
// frame's memory (strings are copied).
func (c *conn) dispatch(frame []byte, borrowed bool) error {
	h, body, err := parseHeader(frame)
	if err != nil {
		return err
	}
	c.l.requests.Add(1)
	if h.key == kmsg.ApiVersions.Int16() { // ApiVersions: any version gets an answer, at the version it picks
		return c.enqueue(&pending{corr: h.corr, key: h.key, resp: c.l.apiVersions(h.version)})
	}
	if c.authenticating() {
		return c.saslRequest(h, body)
	}
	inline := h.key == kmsg.Heartbeat.Int16() && c.l.inlineHeartbeats
	var kreq kmsg.Request
	var slot *commitSlot
	switch {
	case inline:
		c.hb.Default()
		kreq = &c.hb
	case h.key == kmsg.OffsetCommit.Int16() && c.l.async != nil:
		slot = c.l.takeCommitSlot()
		kreq = &slot.kreq
	default:
		kreq = kmsg.RequestForKey(h.key)
	}
	if kreq == nil || h.version < 0 || h.version > kreq.MaxVersion() {
		// Neither the body nor the answer can be encoded: Kafka closes
		// such connections too.
		return fmt.Errorf("%w: api key %d version %d", errBadInput, h.key, h.version)
	}
	kreq.SetVersion(h.version)
	spec, ok := c.l.apis[h.key]
	if !ok || h.version < spec.min || h.version > spec.max {
		c.l.unsupported.Add(1)
		resp := kreq.ResponseKind()
		resp.SetVersion(h.version)
		setTopLevelError(resp, kerr.UnsupportedVersion.Code)
		return c.enqueue(&pending{corr: h.corr, key: h.key, resp: resp})
	}
	if kreq.IsFlexible() {
		c.tags = tagReader{src: body}
		kmsg.SkipTags(&c.tags)
		if c.tags.bad {
			return fmt.Errorf("%w: request header tags", errBadInput)
		}
		body = c.tags.src
	}
	// A well-formed inline heartbeat, and the usual commit, are decoded
	// without kmsg (same fields, fewer copies, and no copy of the frame).
	decoded := false
	switch {
	case inline:
		decoded = decodeHeartbeat(body, h.version, &c.hb, c.l.groupIDs, &c.hbStrings)
	case slot != nil:
		decoded = decodeCommit(body, h.version, &slot.kreq, &slot.parts, c.l.groupIDs, &c.commits)
	}
	if !decoded {
		if borrowed && !inline {
			body = bytes.Clone(body)
		}
		if err := kreq.ReadFrom(body); err != nil {
			return fmt.Errorf("%w: decode %s v%d: %v", errBadInput, kmsg.NameForKey(h.key), h.version, err)
		}
	}
	if inline {
		c.inline = request{version: h.version, clientID: c.clientIDString(h.clientID), c: c}
		return c.answerInline(h, spec.fn, &c.inline, kreq)
	}
	r := request{version: h.version, clientID: c.clientIDString(h.clientID), c: c}
	if c.l.async != nil && asyncKey(h.key) {
		return c.send(h, r, kreq, slot)
	}
	return c.enqueue(&pending{corr: h.corr, key: h.key, fn: spec.fn, kreq: kreq, r: r})
}

// answerInline runs fn, which must not wait and must not keep r or req, on
// the reader goroutine. Its answer goes straight to the output buffer unless
// earlier answers are still queued, in which case it queues behind them,
// already complete.
func (c *conn) answerInline(h header, fn handlerFunc, r *request, req kmsg.Request) (err error) {
	defer c.recoverHandler(h, &err)
	var start time.Time
	if c.l.metrics != nil {
		start = c.received()
	}
	resp := fn(c.ctx, r, req)
	resp.SetVersion(h.version)
	c.wmu.Lock()
	if c.head == len(c.fifo) { // no earlier answer waits
		ok := c.writeAnswer(h.corr, h.key, resp)
		c.wmu.Unlock()
		if c.l.metrics != nil {
			c.noteInline(h.key, resp, start)
		}
		if !ok {
			return net.ErrClosed
		}
		return nil
	}
	c.wmu.Unlock()
	if hr, ok := resp.(*kmsg.HeartbeatResponse); ok && hr == &c.hbAnswer {
		cp := *hr // the next inline heartbeat reuses c.hbAnswer
		resp = &cp
	}
	return c.enqueue(&pending{corr: h.corr, key: h.key, resp: resp})
}

// asyncKey reports whether requests of API key are sent to AsyncGroups
// from the reader: those that wait on a Raft write or a rebalance.
func asyncKey(key int16) bool {
	switch key {
	case kmsg.OffsetCommit.Int16(), kmsg.JoinGroup.Int16(), kmsg.SyncGroup.Int16():
		return true
	}
	return false
}

// send prepares a waiting call (an OffsetCommit, JoinGroup or SyncGroup) on
// the reader goroutine and sends it to the groups without waiting: the
// writer turns the answer into the Kafka answer when it comes, in its turn,
// or answers by itself at the call's bound. slot, for an OffsetCommit, holds
// kreq and is where the request's pending and messages are built.
func (c *conn) send(h header, r request, kreq kmsg.Request, slot *commitSlot) (err error) {
	defer c.recoverHandler(h, &err)
	var one *commitOne
	if slot != nil {
		one = &slot.one
	}
	n, timeout, a, resp := c.l.prepare(&r, kreq, one)
	var p *pending
	var wait *waitSlot
	if slot != nil {
		p = &slot.p
	} else {
		wait = c.l.takeWaitSlot()
		p = &wait.p
	}
	p.corr, p.key, p.slot, p.wait = h.corr, h.key, slot, wait
	if resp != nil {
		resp.SetVersion(h.version)
		p.resp = resp
		return c.enqueue(p)
	}
	if asyncBound > 0 {
		timeout = asyncBound
	}
	now := time.Now()
	if c.l.metrics != nil {
		p.start = c.received()
	}
	p.r, p.call, p.request, p.deadline = r, a, n, now.Add(timeout)
	if err := c.enqueue(p); err != nil {
		return err
	}
	c.l.async.Send(n, p)
	return nil
}

// commitSlot is every block an OffsetCommit sent without a worker needs
// from its decode to its answer: the decoded request, the answer's slot and,
// for the usual commit of one partition, the native request and the Kafka
// answer. The writer returns it to its listener's pool once the answer is
// written, unless the call's bound passed first: a late answer may still come to an
// expired slot, never to a returned one, as the groups answer each request
// once (the coordinator's harness fails a machine that answers twice).
type commitSlot struct {
	p     pending
	kreq  kmsg.OffsetCommitRequest
	parts commitParts
	one   commitOne
}

// takeCommitSlot returns a slot whose request is ready to decode into.
func (l *Listener) takeCommitSlot() *commitSlot {
	s, _ := l.commitSlots.Get().(*commitSlot)
	if s == nil {
		s = new(commitSlot)
	}
	s.kreq = kmsg.OffsetCommitRequest{} // Default sets only some fields
	s.kreq.Default()
	return s
}

// waitSlot is the pooled answer slot of a JoinGroup or SyncGroup sent
// without a worker. Like a commitSlot, the writer returns it once its answer
// is written, never after its bound passed.
type waitSlot struct {
	p pending
}

func (l *Listener) takeWaitSlot() *waitSlot {
	s, _ := l.waitSlots.Get().(*waitSlot)
	if s == nil {
		s = new(waitSlot)
	}
	return s
}

// release returns p's slot to l, when it has one that no answer can still
// reach.
func (l *Listener) release(p *pending) {
	if p.state.Load() == asyncExpired {
		return
	}
	if s := p.slot; s != nil {
		s.p = pending{}
		l.commitSlots.Put(s)
	} else if w := p.wait; w != nil {
		w.p = pending{}
		l.waitSlots.Put(w)
	}
}

// finish builds an asynchronous request's Kafka answer from its native one.
func (c *conn) finish(p *pending) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			c.handlerPanicked(header{key: p.key, version: p.r.version, corr: p.corr}, v)
			ok = false
		}
	}()
	var err error
	if p.state.Load() == asyncExpired {
		err = errNoAnswer
	}
	p.resp = p.call.answer(c.l, p.request, p.native, err)
	p.resp.SetVersion(p.r.version)
	return true
}

// recoverHandler, deferred by code that runs a handler on the reader, turns
// the handler's panic into the reader's error: the connection closes.
func (c *conn) recoverHandler(h header, err *error) {
	if v := recover(); v != nil {
		c.handlerPanicked(h, v)
		*err = fmt.Errorf("request handler panicked")
	}
}

// flush writes out the output buffer; the reader calls it before it may
// wait for input, the writer before it waits for answers. It reports false
// once writing failed.
func (c *conn) flush() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr {
		return false
	}
	if err := c.out.Flush(); err != nil {
		c.failWrite()
		return false
	}
	return true
}

// writeAnswer encodes resp as the answer to request corr into the output
// buffer; c.wmu must be held. It reports false once writing failed.
func (c *conn) writeAnswer(corr int32, key int16, resp kmsg.Response) bool {
	if c.werr {
		return false
	}
	buf := c.out.AvailableBuffer()
	buf = append(buf, 0, 0, 0, 0)
	buf = binary.BigEndian.AppendUint32(buf, uint32(corr))
	if resp.IsFlexible() && key != kmsg.ApiVersions.Int16() { // ApiVersions answers always use header v0
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	if _, err := c.out.Write(buf); err != nil {
		c.failWrite()
		return false
	}
	return true
}

// writeToken writes a raw SASL token, size-prefixed; c.wmu must be held.
func (c *conn) writeToken(token []byte) bool {
	if c.werr {
		return false
	}
	buf := binary.BigEndian.AppendUint32(c.out.AvailableBuffer(), uint32(len(token)))
	if _, err := c.out.Write(append(buf, token...)); err != nil {
		c.failWrite()
		return false
	}
	return true
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

// enqueue reserves the next answer slot for p (blocking while maxInFlight
// requests are outstanding) and hands p's work to a worker goroutine; p
// without work (fn) or a call to wait for carries its answer already.
func (c *conn) enqueue(p *pending) error {
	work := p.fn != nil
	known := !work && p.call == nil
	if known {
		p.state.Store(asyncAnswered)
	}
	if c.l.metrics != nil && p.start.IsZero() {
		p.start = c.received()
	}
	select {
	case c.room <- struct{}{}:
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	c.wmu.Lock()
	c.fifo = append(c.fifo, p)
	first := len(c.fifo)-c.head == 1
	if p.call != nil {
		c.cover(p.deadline)
	}
	// Once queued, a complete p is the writer's: it may write it and
	// reuse its slot before this returns.
	c.wmu.Unlock()
	if first && known {
		c.kick()
	}
	if work {
		c.run(p)
	}
	return nil
}

// kick wakes the writer: an answer may be complete, or a deadline passed.
func (c *conn) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// cover makes the deadline timer fire no later than t, setting it only
// when it is not set or set later; c.wmu is held.
func (c *conn) cover(t time.Time) {
	if c.armed && !t.Before(c.armedAt) {
		return
	}
	if c.expiry == nil {
		c.expiry = time.AfterFunc(time.Until(t), func() {
			c.fired.Store(true)
			c.kick()
		})
	} else {
		c.expiry.Reset(time.Until(t))
	}
	c.armed, c.armedAt = true, t
}

// next returns the first queued answer once it can be written, or nil
// when the writer must wait for it. An asynchronous request whose deadline
// passed is given up here; before the writer sleeps on one still waiting,
// the timer is set no later than its deadline.
func (c *conn) next() *pending {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.head == len(c.fifo) {
		return nil
	}
	p := c.fifo[c.head]
	if p.complete() {
		return p
	}
	if p.call == nil {
		return nil // a worker's: its end wakes the writer
	}
	if c.fired.Swap(false) {
		c.armed = false
		if !time.Now().Before(p.deadline) && p.state.CompareAndSwap(asyncWaiting, asyncExpired) {
			return p
		}
		if p.complete() {
			return p
		}
	}
	c.cover(p.deadline)
	return nil // being answered, or waiting: Answer or the timer wakes the writer
}

// pop removes the first queued answer; c.wmu is held.
func (c *conn) pop() {
	c.fifo[c.head] = nil
	c.head++
	switch {
	case c.head == len(c.fifo):
		c.fifo, c.head = c.fifo[:0], 0
	case c.head >= 32 && c.head*2 >= len(c.fifo):
		// Never empty for long: move what is left to the front.
		n := copy(c.fifo, c.fifo[c.head:])
		clear(c.fifo[n:])
		c.fifo, c.head = c.fifo[:n], 0
	}
}

// work runs p's handler and completes p.
func (c *conn) work(p *pending) {
	defer func() {
		p.state.Store(asyncAnswered)
		c.kick()
	}()
	defer func() {
		if v := recover(); v != nil {
			p.resp = nil
			c.handlerPanicked(header{key: p.key, version: p.r.version, corr: p.corr}, v)
		}
	}()
	resp := p.fn(c.ctx, &p.r, p.kreq)
	if resp != nil {
		resp.SetVersion(p.r.version)
	}
	p.resp = resp
}

// run hands p to an idle worker of the connection, or starts one. Workers
// live as long as the connection, so their stacks are grown once rather than
// per request; there are never more than the requests in flight.
func (c *conn) run(p *pending) {
	select {
	case c.jobs <- p:
		return
	default:
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.work(p)
		for {
			select {
			case p := <-c.jobs:
				c.work(p)
			case <-c.ctx.Done():
				return
			}
		}
	}()
}

func (c *conn) writeLoop() {
	// Answers are buffered while more are ready, and flushed before waiting,
	// so pipelined answers share writes without delaying any of them.
	for {
		p := c.next()
		if p == nil {
			if !c.flush() {
				return
			}
			select {
			case <-c.wake:
			case <-c.ctx.Done():
				return
			}
			continue
		}
		if p.call != nil && !c.finish(p) {
			return
		}
		c.wmu.Lock()
		c.pop()
		var ok bool
		if p.raw {
			ok = c.writeToken(p.token)
		} else {
			ok = p.resp == nil || c.writeAnswer(p.corr, p.key, p.resp)
		}
		c.wmu.Unlock()
		<-c.room
		if !ok {
			return
		}
		if p.last {
			c.flush()
			return
		}
		if c.l.metrics != nil && p.resp != nil {
			c.l.metrics.observe(p.key, p.resp, p.start, c.shard)
		}
		c.l.release(p)
	}
}

// setTopLevelError sets a response's top-level ErrorCode field, if it has one.
func setTopLevelError(resp kmsg.Response, code int16) {
	v := reflect.ValueOf(resp)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return
	}
	if f := v.Elem().FieldByName("ErrorCode"); f.IsValid() && f.CanSet() && f.Kind() == reflect.Int16 {
		f.SetInt(int64(code))
	}
}
