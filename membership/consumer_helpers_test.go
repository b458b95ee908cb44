package membership

import (
	"testing"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// consumerTestConfig is testConfig for a consumer-protocol member asking
// for the uniform assignor.
func consumerTestConfig() Config {
	cfg := testConfig()
	cfg.ServerAssignor = "uniform"
	return cfg
}

// newConsumerDrv starts a Consumer with member id "m-1" under a driver.
func newConsumerDrv(t *testing.T, cfg Config) *drv {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d := &drv{t: t, sm: NewConsumer(cfg, "m-1"), now: t0, timers: map[TimerKind]time.Time{}}
	d.sm.Start(d.now, &d.fx)
	d.collect()
	return d
}

// cgOK is a successful heartbeat answer at epoch with a heartbeat interval
// of 2s; with assign set it carries the assignment tps.
func cgOK(epoch int32, assign bool, tps ...assignor.TopicPartitions) *pb.ConsumerGroupHeartbeatResponse {
	r := &pb.ConsumerGroupHeartbeatResponse{MemberId: "m-1", MemberEpoch: epoch, HeartbeatIntervalMs: 2000, HasAssignment: assign}
	for _, tp := range tps {
		r.Assignment = append(r.Assignment, &pb.TopicPartitions{Name: tp.Topic, Partitions: tp.Partitions})
	}
	return r
}

func cgErr(code int16) *pb.ConsumerGroupHeartbeatResponse {
	return &pb.ConsumerGroupHeartbeatResponse{ErrorCode: int32(code)}
}

// reported is what a heartbeat says the member owns: "-" for a keepalive
// (unchanged), "" for none.
func reported(req *pb.ConsumerGroupHeartbeatRequest) string {
	if !req.GetTopicsSet() {
		return "-"
	}
	var tps []assignor.TopicPartitions
	for _, tp := range req.GetTopics() {
		tps = append(tps, assignor.TopicPartitions{Topic: tp.GetName(), Partitions: tp.GetPartitions()})
	}
	return tpString(tps)
}

// beat takes the pending heartbeat, checks its epoch and what it reports,
// and answers it with res.
func (d *drv) beat(epoch int32, owned string, res any) *pb.ConsumerGroupHeartbeatRequest {
	d.t.Helper()
	id, req := take[*pb.ConsumerGroupHeartbeatRequest](d)
	if req.GetMemberEpoch() != epoch || reported(req) != owned {
		d.t.Fatalf("heartbeat at epoch %d reporting %q, want epoch %d reporting %q", req.GetMemberEpoch(), reported(req), epoch, owned)
	}
	d.respond(id, res, nil)
	return req
}

// joined brings a fresh consumer to epoch owning tps (acknowledged).
func (d *drv) joined(epoch int32, tps ...assignor.TopicPartitions) {
	d.t.Helper()
	d.found(true)
	d.beat(0, "", cgOK(epoch, true, tps...))
	want := tpString(tps)
	if want != "" {
		d.callback(Assigned, want)
		d.beat(epoch, want, cgOK(epoch, true, tps...)) // the acknowledgement, sent at once
	}
	d.noCallbacks()
	if d.sm.Phase() != Stable || d.sm.Generation() != epoch {
		d.t.Fatalf("phase %v epoch %d, want Stable at %d", d.sm.Phase(), d.sm.Generation(), epoch)
	}
}

// nextBeat moves to the next heartbeat (the interval: 2s) and checks no
// other request went out before it.
func (d *drv) nextBeat() {
	d.t.Helper()
	none[*pb.ConsumerGroupHeartbeatRequest](d)
	d.fire(TimerHeartbeat)
}
