package kafka

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kmsg"
)

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
