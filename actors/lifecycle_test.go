package actors

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/internal/testlog"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// startLogged starts a service with an Observer (which gives rebalances
// their cause) whose log goes to logs at INFO.
func startLogged(t *testing.T, logs *testlog.Buffer) *Service {
	t.Helper()
	system := actor.NewActorSystem(quietLogs())
	svc, err := Start(system, Options{Config: testConfig(), Store: raftfsm.NewMemoryStore(), Observer: NewObserver(nil),
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		svc.Stop()
		system.Shutdown()
	})
	return svc
}

// lifecycleLines returns the lifecycle lines of logs with their group,
// reason, member, generation and members attributes, in order.
func lifecycleLines(logs string) []string {
	msg := regexp.MustCompile(`msg="([^"]+)"`)
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		m := msg.FindStringSubmatch(l)
		if m == nil || !(strings.Contains(m[1], "group") || strings.Contains(m[1], "expiry")) {
			continue
		}
		line := m[1]
		for _, k := range []string{"group", "reason", "generation", "members"} {
			if v := regexp.MustCompile(` ` + k + `=(\S+)`).FindStringSubmatch(l); v != nil {
				line += " " + k + "=" + v[1]
			}
		}
		out = append(out, line)
	}
	return out
}

// A group's life at INFO: the rebalance and its reason, the generation it
// formed, a member's session expiry, the group left empty, its deletion.
func TestLifecycleLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs testlog.Buffer
		svc := startLogged(t, &logs)
		ids, gen := formGroup(t, svc, "g", 2)
		live := ids[0]
		for range 4 { // the other member's 10 s session runs out
			time.Sleep(3 * time.Second)
			ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: live})
		}
		if l := ask[*pb.LeaveGroupResponse](t, svc, &pb.LeaveGroupRequest{GroupId: "g", Members: []*pb.MemberIdentity{{MemberId: live}}}); l.ErrorCode != coordinator.ErrNone {
			t.Fatalf("leave: %v", l)
		}
		if d := ask[*pb.DeleteGroupResponse](t, svc, &pb.DeleteGroupRequest{GroupId: "g"}); d.ErrorCode != coordinator.ErrNone {
			t.Fatalf("delete: %v", d)
		}
		synctest.Wait()
		want := []string{
			"preparing to rebalance group group=g reason=join generation=0 members=1",
			"stabilized group group=g generation=1 members=2",
			"member removed on session expiry group=g generation=1 members=1",
			"preparing to rebalance group group=g reason=expiry generation=1 members=1",
			"group is empty group=g generation=2 members=0",
			"group deleted group=g",
		}
		got := lifecycleLines(logs.String())
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("lifecycle lines:\n%s\nwant:\n%s\nlog:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), logs.String())
		}
	})
}

// Many groups forming at once log at most the limiter's burst, and a line
// after a pause says how many were suppressed.
func TestLifecycleRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs testlog.Buffer
		svc := startLogged(t, &logs)
		const groups = lifecycleBurst // two lines each: twice the burst
		var wg sync.WaitGroup
		for i := range groups {
			wg.Go(func() { formGroup(t, svc, fmt.Sprintf("g%d", i), 1) })
		}
		wg.Wait()
		synctest.Wait()
		n := len(lifecycleLines(logs.String()))
		if n >= 2*groups || n < lifecycleBurst {
			t.Fatalf("%d lifecycle lines for %d groups formed, want at least the burst %d and fewer than all %d", n, groups, lifecycleBurst, 2*groups)
		}
		time.Sleep(time.Minute)
		formGroup(t, svc, "late", 1)
		synctest.Wait()
		if !regexp.MustCompile(`msg="preparing to rebalance group" group=late .* suppressed=\d+`).MatchString(logs.String()) {
			t.Fatalf("no suppressed count after the pause:\n%s", logs.String()[max(0, len(logs.String())-2000):])
		}
	})
}

// A member that does not rejoin before the rebalance timeout is removed,
// and the line says how many were.
func TestLifecycleRebalanceTimeoutLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs testlog.Buffer
		svc := startLogged(t, &logs)
		ids, gen := formGroup(t, svc, "g", 2)
		req := joinReq("g", "c0", ids[0])
		req.Protocols[0].Metadata = []byte{0, 0, 0, 0, 0, 1}
		done := make(chan *pb.JoinGroupResponse)
		go func() { done <- ask[*pb.JoinGroupResponse](t, svc, req) }()
		for r := (*pb.JoinGroupResponse)(nil); r == nil; {
			select {
			case r = <-done:
			case <-time.After(5 * time.Second): // ids[1] heartbeats but never rejoins
				ask[*pb.HeartbeatResponse](t, svc, &pb.HeartbeatRequest{GroupId: "g", GenerationId: gen, MemberId: ids[1]})
			}
		}
		synctest.Wait()
		out := logs.String()
		for _, want := range []string{
			`msg="preparing to rebalance group" group=g generation=1 members=2 reason=metadata`,
			`msg="members removed: not rejoined before the rebalance timeout" group=g generation=2 members=1 removed=1`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %s:\n%s", want, out)
			}
		}
	})
}
