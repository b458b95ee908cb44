package kafka

import (
	"net"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

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
