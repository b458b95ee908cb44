package member

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/cohort-coord/cohort/membership"
)

// Messages of the member actor.
type (
	response struct {
		id  uint64
		res any
		err error
	}
	timerFired struct {
		kind membership.TimerKind
		seq  uint64
	}
	callbackDone struct{ token uint64 }
	commitCmd    struct {
		offsets map[string]map[int32]int64
		done    func(error)
	}
	markCmd struct {
		topic     string
		partition int32
		offset    int64
	}
	enforceCmd struct{ reason string }
	cmdResult  struct{ err error }
	closeCmd   struct{}
	forceStop  struct{}
)

// timerSlot is one armed timer of a kind. Re-arming it for later (the
// session timer, on every answer) only moves deadline: the timer fires at
// fireAt and waits for the rest then.
type timerSlot struct {
	t        *time.Timer
	seq      uint64
	deadline time.Duration // since epoch (monotonic)
	fireAt   time.Duration
}

// epoch is the origin of timer deadlines: durations since it are 8 bytes
// and monotonic.
var epoch = time.Now()

func sinceEpoch() time.Duration { return time.Since(epoch) }

// memberActor shells one membership.Machine: it runs the machine's requests on
// the transport, its timers on the clock and its callbacks on a goroutine,
// one at a time, and feeds every outcome back as a message.
type memberActor struct {
	m    *Member
	mc   membership.StateMachine
	fx   membership.Effects
	tr   Transport
	self *actor.PID
	root *actor.RootContext
	log  *slog.Logger

	timers [membership.NumTimers]timerSlot
	seq    uint64

	queue   []membership.Callback
	running bool
	// cbCtx is given to callbacks; cancelled when the member stops.
	cbCtx    context.Context
	cbCancel context.CancelFunc

	commitWaiters map[uint64]func(error)
	nextToken     uint64

	stopped  bool
	stopErr  error
	finished bool
	lastGen  int32
	lastID   string
	lastPh   membership.Phase
	lastGP   string
}

// newStateMachine returns the protocol machine cfg selects.
func newStateMachine(c *config) membership.StateMachine {
	if c.protocol == membership.ConsumerProtocol {
		return membership.NewConsumer(c.m, newMemberID())
	}
	return membership.New(c.m)
}

// newMemberID returns a member id for the consumer protocol, which the
// client generates (ConsumerGroupHeartbeat v1): 16 random bytes in
// base64url, 22 characters, as the Java client makes them.
func newMemberID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func newMemberActor(m *Member, tr Transport) *memberActor {
	return &memberActor{
		m:       m,
		mc:      newStateMachine(m.cfg),
		tr:      tr,
		log:     m.cfg.log.With(slog.String("group", m.group)),
		lastGen: -1,
	}
}

func (a *memberActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.self, a.root = ctx.Self(), ctx.ActorSystem().Root
		a.mc.Start(time.Now(), &a.fx)
	case *response:
		if a.log.Enabled(context.Background(), slog.LevelDebug) {
			a.log.Debug("member answer", slog.String("member", a.mc.MemberID()), slog.String("phase", a.mc.Phase().String()),
				slog.String("answer", fmt.Sprintf("%T %v", msg.res, msg.res)), slog.Any("err", msg.err))
		}
		a.mc.OnResponse(time.Now(), msg.id, msg.res, msg.err, &a.fx)
	case *timerFired:
		slot := &a.timers[msg.kind]
		if slot.t == nil || slot.seq != msg.seq {
			return // re-armed or cancelled since
		}
		if now := sinceEpoch(); now < slot.deadline {
			a.arm(slot, msg.kind, slot.deadline-now, slot.deadline)
			return
		}
		slot.t = nil
		a.mc.OnTimer(time.Now(), msg.kind, &a.fx)
	case *callbackDone:
		a.running = false
		a.mc.OnCallbackDone(time.Now(), msg.token, &a.fx)
	case *commitCmd:
		a.onCommit(msg)
	case *markCmd:
		a.mc.Mark(msg.topic, msg.partition, msg.offset)
		return
	case *enforceCmd:
		err := a.mc.EnforceRebalance(time.Now(), msg.reason, &a.fx)
		ctx.Respond(&cmdResult{err: err})
	case *closeCmd:
		a.mc.Close(time.Now(), &a.fx)
	case *forceStop:
		if !a.stopped {
			a.stopped, a.stopErr = true, ErrCloseTimeout
		}
		a.queue = nil
		a.finish(ctx)
		return
	case *actor.Stopping:
		a.stopTimers()
		return
	default:
		return
	}
	a.execute(ctx)
}

func (a *memberActor) onCommit(msg *commitCmd) {
	if a.stopped {
		go msg.done(ErrIllegalState)
		return
	}
	a.nextToken++
	token := a.nextToken
	if a.commitWaiters == nil {
		a.commitWaiters = map[uint64]func(error){}
	}
	a.commitWaiters[token] = msg.done
	if err := a.mc.Commit(time.Now(), token, msg.offsets, &a.fx); err != nil {
		delete(a.commitWaiters, token)
		go msg.done(err)
	}
}

// execute carries out the effects of the last machine call.
func (a *memberActor) execute(ctx actor.Context) {
	fx := &a.fx
	for _, r := range fx.Requests {
		id, self, root := r.ID, a.self, a.root
		a.tr.Send(r.Msg, func(res any, err error) { root.Send(self, &response{id: id, res: res, err: err}) })
	}
	for _, op := range fx.Timers {
		a.setTimer(op)
	}
	for _, c := range fx.Commits {
		if done, ok := a.commitWaiters[c.Token]; ok {
			delete(a.commitWaiters, c.Token)
			go done(c.Err)
		}
	}
	changed := len(fx.Callbacks) > 0
	a.queue = append(a.queue, fx.Callbacks...)
	if fx.Stopped && !a.stopped {
		a.stopped, a.stopErr = true, fx.Err
		if fx.Err != nil {
			a.log.Warn("member stopped", slog.String("member", a.mc.MemberID()), slog.Any("err", fx.Err))
		}
	}
	fx.Reset()
	if changed || a.mc.Generation() != a.lastGen || a.mc.MemberID() != a.lastID || a.mc.Phase() != a.lastPh || a.mc.GroupProtocol() != a.lastGP {
		a.lastGen, a.lastID, a.lastPh, a.lastGP = a.mc.Generation(), a.mc.MemberID(), a.mc.Phase(), a.mc.GroupProtocol()
		a.m.state.Store(&snapshot{
			memberID:      a.lastID,
			generation:    a.lastGen,
			protocol:      a.mc.Protocol(),
			groupProtocol: a.lastGP,
			phase:         a.lastPh,
			owned:         a.mc.Owned(),
		})
	}
	a.runNext()
	if a.stopped && !a.running && len(a.queue) == 0 {
		a.finish(ctx)
	}
}

// runNext starts the next queued callback unless one is running.
func (a *memberActor) runNext() {
	if a.running || len(a.queue) == 0 {
		return
	}
	cb := a.queue[0]
	a.queue[0] = membership.Callback{}
	a.queue = a.queue[1:]
	a.running = true
	if a.cbCtx == nil {
		a.cbCtx, a.cbCancel = context.WithCancel(context.Background())
	}
	self, root := a.self, a.root
	go func() {
		defer root.Send(self, &callbackDone{token: cb.Token})
		a.invoke(cb)
	}()
}

// invoke runs one callback; a panic in it is logged, not fatal.
func (a *memberActor) invoke(cb membership.Callback) {
	defer func() {
		if p := recover(); p != nil {
			a.log.Error("member callback panicked", slog.String("kind", cb.Kind.String()), slog.Any("panic", p))
		}
	}()
	c := a.m.cfg
	if c.notify != nil {
		msg := &PartitionsEvent{Member: a.m, Kind: cb.Kind, Partitions: cb.Partitions, Generation: cb.Generation}
		if err := a.root.RequestFuture(c.notify, msg, c.m.RebalanceTimeout).Wait(); err != nil {
			a.log.Warn("member notification not answered", slog.String("kind", cb.Kind.String()), slog.Any("err", err))
		}
	}
	if c.handler == nil {
		return
	}
	switch cb.Kind {
	case membership.Assigned:
		c.handler.Assigned(a.cbCtx, a.m, cb.Partitions)
	case membership.Revoked:
		c.handler.Revoked(a.cbCtx, a.m, cb.Partitions)
	case membership.Lost:
		c.handler.Lost(a.cbCtx, a.m, cb.Partitions)
	}
}

func (a *memberActor) setTimer(op membership.TimerOp) {
	slot := &a.timers[op.Kind]
	if op.Cancel {
		if slot.t != nil {
			slot.t.Stop()
			slot.t = nil
		}
		return
	}
	deadline := sinceEpoch() + op.After
	if slot.t != nil && deadline >= slot.fireAt {
		slot.deadline = deadline
		return
	}
	a.arm(slot, op.Kind, op.After, deadline)
}

// arm (re)starts slot's timer to fire after d, for deadline.
func (a *memberActor) arm(slot *timerSlot, kind membership.TimerKind, d, deadline time.Duration) {
	if slot.t != nil {
		slot.t.Stop()
	}
	a.seq++
	slot.seq, slot.deadline, slot.fireAt = a.seq, deadline, sinceEpoch()+d
	msg := &timerFired{kind: kind, seq: a.seq}
	self, root := a.self, a.root
	slot.t = time.AfterFunc(d, func() { root.Send(self, msg) })
}

func (a *memberActor) stopTimers() {
	for i := range a.timers {
		if a.timers[i].t != nil {
			a.timers[i].t.Stop()
			a.timers[i].t = nil
		}
	}
}

// finish ends the member once its last callback returned.
func (a *memberActor) finish(ctx actor.Context) {
	if a.finished {
		return
	}
	a.finished = true
	a.stopTimers()
	if a.cbCancel != nil {
		a.cbCancel()
	}
	a.tr.Close()
	for token, done := range a.commitWaiters {
		delete(a.commitWaiters, token)
		go done(ErrIllegalState)
	}
	a.m.err = a.stopErr
	close(a.m.done)
	ctx.Stop(a.self)
}

// String is for logs.
func (a *memberActor) String() string {
	return fmt.Sprintf("member %s/%s", a.m.group, a.mc.MemberID())
}
