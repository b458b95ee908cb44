package ops

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cohort-coord/cohort/actors"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

type fakeSource struct {
	ready  Readiness
	groups []actors.GroupView
}

func (f *fakeSource) Readiness() Readiness { return f.ready }
func (f *fakeSource) ClusterStatus() *clusterpb.StatusResponse {
	return &clusterpb.StatusResponse{NodeId: "n1", State: "Follower"}
}
func (f *fakeSource) Groups() []actors.GroupView { return f.groups }
func (f *fakeSource) Group(id string) (actors.GroupView, bool) {
	for _, g := range f.groups {
		if g.ID == id {
			return g, true
		}
	}
	return actors.GroupView{}, false
}

func get(t *testing.T, s *Server, path string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + s.Addr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	src := &fakeSource{ready: Readiness{{Name: "a", OK: true}, {Name: "b", Detail: "not yet"}}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "cohort_test_total", Help: "test"}))
	s, err := Start("127.0.0.1:0", reg, src, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if code, body := get(t, s, "/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	if code, body := get(t, s, "/readyz"); code != 503 || body != "ok a\nfail b: not yet\n" {
		t.Fatalf("readyz: %d %q", code, body)
	}
	src.ready[1].OK = true
	if code, body := get(t, s, "/readyz"); code != 200 || body != "ok a\nok b\n" {
		t.Fatalf("readyz when ready: %d %q", code, body)
	}
	if code, body := get(t, s, "/metrics"); code != 200 || !strings.Contains(body, "cohort_test_total 0") {
		t.Fatalf("metrics: %d %q", code, body)
	}
	if code, body := get(t, s, "/"); code != 200 || !strings.Contains(body, "No groups coordinated here (groups live on the leader, none known)") || !strings.Contains(body, `<meta http-equiv="refresh" content="5">`) {
		t.Fatalf("overview: %d %q", code, body)
	}
	if code, _ := get(t, s, "/groups/nope"); code != 404 {
		t.Fatalf("unknown group: %d", code)
	}
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	src.groups = []actors.GroupView{{ID: "a/b"}, {ID: "<g>", State: "Stable", Generation: 2, History: []actors.Rebalance{
		{Generation: 1, Cause: actors.CauseJoin, Started: t0, Completed: t0.Add(30 * time.Millisecond), Joined: []string{"m1", "m2"}},
		{Generation: 2, Cause: actors.CauseLeave, Started: t0.Add(time.Minute), Completed: t0.Add(time.Minute + 2*time.Second), Left: []string{"m2"},
			Moved: []actors.Move{{Topic: "t", Partition: 1, From: "m2", To: "m1"}}},
	}}}
	if code, body := get(t, s, "/groups/a/b"); code != 200 || !strings.Contains(body, "group a/b") || !strings.Contains(body, `http-equiv="refresh"`) {
		t.Fatalf("group with a slash: %d %q", code, body)
	}
	code, body := get(t, s, "/groups/%3Cg%3E")
	if code != 200 || strings.Count(body, `class="rebalance"`) != 2 || !strings.Contains(body, "t/1: m2 → m1") || !strings.Contains(body, "&lt;g&gt;") || strings.Contains(body, "<g>") {
		t.Fatalf("group page: %d\n%s", code, body)
	}
}
