package ops

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/actors"
	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/coordinator"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// observerSource shows the groups of an Observer, as the node does.
type observerSource struct{ obs *actors.Observer }

func (observerSource) Readiness() Readiness { return nil }
func (observerSource) ClusterStatus() *clusterpb.StatusResponse {
	return &clusterpb.StatusResponse{NodeId: "n1", State: "Leader"}
}
func (s observerSource) Groups() []actors.GroupView               { return s.obs.Groups() }
func (s observerSource) Group(id string) (actors.GroupView, bool) { return s.obs.Group(id) }

func call[T proto.Message](t *testing.T, svc *actors.Service, req proto.Message) T {
	t.Helper()
	res, err := svc.Call(context.Background(), req)
	if err != nil {
		t.Fatalf("%T: %v", req, err)
	}
	r, ok := res.(T)
	if !ok {
		t.Fatalf("%T: answer is %T", req, res)
	}
	return r
}

func consumerAssignment(topic string, partitions ...int32) []byte {
	a := assignor.Assignment{Topics: []assignor.TopicPartitions{{Topic: topic, Partitions: partitions}}}
	return a.AppendTo(nil)
}

// The group page lists a group's members with their assignments, which the
// Observer no longer keeps: it asks the group for them.
func TestGroupPageListsMembersFromTheGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg := coordinator.DefaultConfig()
		cfg.InitialRebalanceDelay = 100 * time.Millisecond
		obs := actors.NewObserver(nil)
		system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
		svc, err := actors.Start(system, actors.Options{Config: cfg, Store: raftfsm.NewMemoryStore(), Logger: quiet, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			svc.Stop()
			system.Shutdown()
		})

		// Two consumers join (v5: the first join hands out the id) and sync.
		joins := make([]*pb.JoinGroupResponse, 2)
		var wg sync.WaitGroup
		for i := range joins {
			wg.Go(func() {
				req := &pb.JoinGroupRequest{GroupId: "billing", ClientId: fmt.Sprintf("billing-%c", 'a'+i), ApiVersion: 5,
					SessionTimeoutMs: 10_000, RebalanceTimeoutMs: 30_000, ProtocolType: "consumer",
					Protocols: []*pb.Protocol{{Name: "range", Metadata: []byte{0, 0, 0, 0, 0, 0}}}}
				req.MemberId = call[*pb.JoinGroupResponse](t, svc, req).MemberId
				joins[i] = call[*pb.JoinGroupResponse](t, svc, req)
			})
		}
		wg.Wait()
		assignments := map[string][]byte{
			joins[0].MemberId: consumerAssignment("orders", 1, 0),
			joins[1].MemberId: consumerAssignment("orders", 3, 2),
		}
		for i, j := range joins {
			if j.ErrorCode != coordinator.ErrNone {
				t.Fatalf("join %d: %v", i, j)
			}
			wg.Go(func() {
				req := &pb.SyncGroupRequest{GroupId: "billing", GenerationId: j.GenerationId, MemberId: j.MemberId}
				if j.MemberId == j.Leader {
					for m, a := range assignments {
						req.Assignments = append(req.Assignments, &pb.SyncGroupAssignment{MemberId: m, Assignment: a})
					}
				}
				if r := call[*pb.SyncGroupResponse](t, svc, req); r.ErrorCode != coordinator.ErrNone {
					t.Errorf("sync %d: %v", i, r)
				}
			})
		}
		wg.Wait()

		p := &pages{src: observerSource{obs}}
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/groups/billing", nil)
		r.SetPathValue("id", "billing")
		p.group(w, r)
		page := w.Body.String()
		if w.Code != http.StatusOK {
			t.Fatalf("group page: %d\n%s", w.Code, page)
		}
		_, members, _ := strings.Cut(page, `<table id="members">`)
		members, _, _ = strings.Cut(members, "</table>")
		rows := strings.Split(strings.TrimSpace(members), "\n")[1:] // after the header
		if len(rows) != 2 {
			t.Fatalf("%d member rows, want 2:\n%s", len(rows), members)
		}
		// Sorted by member id, each with its client and its assignment.
		type member struct{ id, client, assignment string }
		want := []member{{joins[0].MemberId, "billing-a", "orders: 0,1"}, {joins[1].MemberId, "billing-b", "orders: 2,3"}}
		slices.SortFunc(want, func(x, y member) int { return strings.Compare(x.id, y.id) })
		for k, m := range want {
			for _, s := range []string{"<code>" + m.id + "</code>", "<td>" + m.client + "</td>", "<td>" + m.assignment + "</td>"} {
				if !strings.Contains(rows[k], s) {
					t.Fatalf("member row %d lacks %q: %s", k, s, rows[k])
				}
			}
		}

		// The overview counts the members without describing them.
		w = httptest.NewRecorder()
		p.overview(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if !strings.Contains(w.Body.String(), `<td>1</td><td>2</td>`) {
			t.Fatalf("overview lacks generation 1 with 2 members:\n%s", w.Body.String())
		}
	})
}
