package membership

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// drv drives one machine in virtual time and collects what it asks for.
type drv struct {
	t       *testing.T
	m       *Machine     // nil when sm is a Consumer
	sm      StateMachine // what the driver drives
	now     time.Time
	fx      Effects
	reqs    []Request
	cbs     []Callback
	timers  map[TimerKind]time.Time
	commits []CommitResult
	stopped bool
	err     error
}

func testConfig(balancers ...assignor.Balancer) Config {
	cfg := Config{
		Group:             "g",
		Topics:            []string{"t"},
		Balancers:         balancers,
		SessionTimeout:    10 * time.Second,
		RebalanceTimeout:  20 * time.Second,
		HeartbeatInterval: time.Second,
		RetryBackoff:      100 * time.Millisecond,
		MaxRetryBackoff:   time.Second,
		Partitions:        map[string]int32{"t": 4},
	}
	return cfg
}

func newDrv(t *testing.T, cfg Config) *drv {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := New(cfg)
	d := &drv{t: t, m: m, sm: m, now: t0, timers: map[TimerKind]time.Time{}}
	d.sm.Start(d.now, &d.fx)
	d.collect()
	return d
}

func (d *drv) collect() {
	d.reqs = append(d.reqs, d.fx.Requests...)
	d.cbs = append(d.cbs, d.fx.Callbacks...)
	d.commits = append(d.commits, d.fx.Commits...)
	for _, op := range d.fx.Timers {
		if op.Cancel {
			delete(d.timers, op.Kind)
		} else {
			d.timers[op.Kind] = d.now.Add(op.After)
		}
	}
	if d.fx.Stopped {
		d.stopped, d.err = true, d.fx.Err
	}
	d.fx.Reset()
}

// take removes and returns the first pending request of type T.
func take[T any](d *drv) (uint64, T) {
	d.t.Helper()
	for i, r := range d.reqs {
		if m, ok := r.Msg.(T); ok {
			d.reqs = slices.Delete(d.reqs, i, i+1)
			return r.ID, m
		}
	}
	var zero T
	d.t.Fatalf("no %T among requests %s (phase %v)", zero, d.describeReqs(), d.sm.Phase())
	return 0, zero
}

// none asserts that no request of type T is pending.
func none[T any](d *drv) {
	d.t.Helper()
	for _, r := range d.reqs {
		if _, ok := r.Msg.(T); ok {
			d.t.Fatalf("unexpected %T among requests %s (phase %v)", r.Msg, d.describeReqs(), d.sm.Phase())
		}
	}
}

func (d *drv) describeReqs() string {
	s := "["
	for _, r := range d.reqs {
		s += fmt.Sprintf(" %T", r.Msg)
	}
	return s + " ]"
}

func (d *drv) respond(id uint64, res any, err error) {
	d.sm.OnResponse(d.now, id, res, err, &d.fx)
	d.collect()
}

// advance moves virtual time forward by dt, firing due timers in order.
func (d *drv) advance(dt time.Duration) {
	end := d.now.Add(dt)
	for {
		var next TimerKind
		var at time.Time
		for k, t := range d.timers {
			if !t.After(end) && (next == 0 || t.Before(at)) {
				next, at = k, t
			}
		}
		if next == 0 {
			break
		}
		delete(d.timers, next)
		d.now = at
		d.sm.OnTimer(d.now, next, &d.fx)
		d.collect()
	}
	d.now = end
}

func (d *drv) fire(k TimerKind) {
	d.t.Helper()
	at, ok := d.timers[k]
	if !ok {
		d.t.Fatalf("timer %v not armed (armed: %v)", k, d.timers)
	}
	delete(d.timers, k)
	if at.After(d.now) {
		d.now = at
	}
	d.sm.OnTimer(d.now, k, &d.fx)
	d.collect()
}

// callback pops the next callback and checks its kind and partitions.
func (d *drv) callback(kind CallbackKind, want string) Callback {
	d.t.Helper()
	if len(d.cbs) == 0 {
		d.t.Fatalf("no callback; want %v %s", kind, want)
	}
	cb := d.cbs[0]
	d.cbs = d.cbs[1:]
	if cb.Kind != kind || tpString(cb.Partitions) != want {
		d.t.Fatalf("callback %v %s, want %v %s", cb.Kind, tpString(cb.Partitions), kind, want)
	}
	return cb
}

func (d *drv) noCallbacks() {
	d.t.Helper()
	if len(d.cbs) > 0 {
		d.t.Fatalf("unexpected callbacks %v", d.cbs)
	}
}

func (d *drv) done(cb Callback) {
	d.sm.OnCallbackDone(d.now, cb.Token, &d.fx)
	d.collect()
}

func tpString(tps []assignor.TopicPartitions) string {
	s := ""
	for _, tp := range tps {
		s += fmt.Sprintf("%s%v", tp.Topic, tp.Partitions)
	}
	return s
}

// found answers the pending FindCoordinator.
func (d *drv) found(exclusive bool) {
	d.t.Helper()
	id, _ := take[*FindCoordinator](d)
	d.respond(id, &CoordinatorFound{Exclusive: exclusive}, nil)
}

func joinOK(member string, gen int32, protocol, leader string, members ...*pb.JoinGroupMember) *pb.JoinGroupResponse {
	return &pb.JoinGroupResponse{MemberId: member, GenerationId: gen, ProtocolName: &protocol, Leader: leader, Members: members}
}

func assignmentOf(tps ...assignor.TopicPartitions) []byte {
	a := assignor.Assignment{Version: 3, Topics: tps}
	return a.AppendTo(nil)
}

func tp(topic string, ps ...int32) assignor.TopicPartitions {
	return assignor.TopicPartitions{Topic: topic, Partitions: ps}
}

// joinAs takes the pending JoinGroup and answers it as a follower.
func (d *drv) joinAs(member string, gen int32, protocol string) *pb.JoinGroupRequest {
	d.t.Helper()
	id, req := take[*pb.JoinGroupRequest](d)
	d.respond(id, joinOK(member, gen, protocol, "leader-x"), nil)
	return req
}

// syncWith takes the pending SyncGroup and answers it with assignment.
func (d *drv) syncWith(tps ...assignor.TopicPartitions) *pb.SyncGroupRequest {
	d.t.Helper()
	id, req := take[*pb.SyncGroupRequest](d)
	d.respond(id, &pb.SyncGroupResponse{Assignment: assignmentOf(tps...)}, nil)
	return req
}

// stable brings a fresh follower to generation gen owning tps.
func (d *drv) stable(exclusive bool, gen int32, protocol string, tps ...assignor.TopicPartitions) {
	d.t.Helper()
	d.found(exclusive)
	d.joinAs("m1", gen, protocol)
	d.syncWith(tps...)
	want := tpString(tps)
	d.callback(Assigned, want)
	if d.m.Phase() != Stable {
		d.t.Fatalf("phase %v, want Stable", d.m.Phase())
	}
}

func ownedOf(t *testing.T, req *pb.JoinGroupRequest, protocol string) string {
	t.Helper()
	for _, p := range req.GetProtocols() {
		if p.GetName() == protocol {
			s, err := assignor.DecodeSubscription(p.GetMetadata())
			if err != nil {
				t.Fatal(err)
			}
			return tpString(s.OwnedPartitions)
		}
	}
	t.Fatalf("no protocol %q in join", protocol)
	return ""
}

func wantErr(t *testing.T, got, want error) {
	t.Helper()
	if !errors.Is(got, want) {
		t.Fatalf("error %v, want %v", got, want)
	}
}

// idle advances virtual time by dt in steps, answering every heartbeat.
func (d *drv) idle(dt time.Duration) {
	end := d.now.Add(dt)
	for d.now.Before(end) {
		step := min(100*time.Millisecond, end.Sub(d.now))
		d.advance(step)
		for i := 0; i < len(d.reqs); {
			if _, ok := d.reqs[i].Msg.(*pb.HeartbeatRequest); ok {
				id := d.reqs[i].ID
				d.reqs = slices.Delete(d.reqs, i, i+1)
				d.respond(id, &pb.HeartbeatResponse{}, nil)
				continue
			}
			i++
		}
	}
}
