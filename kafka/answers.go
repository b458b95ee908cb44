package kafka

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
	"google.golang.org/protobuf/proto"
)

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

	// An asynchronous request (sent to the groups, no worker): call
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
