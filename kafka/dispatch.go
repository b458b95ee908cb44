package kafka

import (
	"bytes"
	"fmt"
	"reflect"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type request struct {
	version  int16
	clientID string
	c        *conn
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
	inline := h.key == kmsg.Heartbeat.Int16()
	var kreq kmsg.Request
	var slot *commitSlot
	switch {
	case inline:
		c.hb.Default()
		kreq = &c.hb
	case h.key == kmsg.OffsetCommit.Int16():
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
	if sentKey(h.key) {
		return c.send(h, r, kreq, slot)
	}
	return c.enqueue(&pending{corr: h.corr, key: h.key, fn: spec.fn, kreq: kreq, r: r})
}

// sentKey reports whether requests of API key are sent to the groups
// (Groups.Send) from the reader: those that may wait on a Raft write or a
// rebalance.
func sentKey(key int16) bool {
	switch key {
	case kmsg.OffsetCommit.Int16(), kmsg.JoinGroup.Int16(), kmsg.SyncGroup.Int16(), kmsg.ConsumerGroupHeartbeat.Int16():
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
	c.l.groups.Send(n, p)
	return nil
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
