package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestApply(t *testing.T) {
	c := New()
	id := NewTopicID()
	steps := []struct {
		cmd  Command
		want error
	}{
		{CreateTopic{Name: "a", ID: id, Partitions: 3}, nil},
		{CreateTopic{Name: "a", ID: id, Partitions: 3}, ErrTopicExists},
		{CreateTopic{Name: "b", Partitions: 0}, ErrInvalidPartitions},
		{CreateTopic{Name: "b", Partitions: MaxPartitions + 1}, ErrInvalidPartitions},
		{CreateTopic{Name: "bad name", Partitions: 1}, ErrInvalidTopic},
		{CreateTopic{Name: "..", Partitions: 1}, ErrInvalidTopic},
		{CreateTopic{Name: "b.c_d-9", Partitions: 1}, nil},
		{DeleteTopic{Name: "zz"}, ErrUnknownTopic},
		{DeleteTopic{Name: "b.c_d-9"}, nil},
	}
	for i, s := range steps {
		if err := c.Apply(s.cmd); !errors.Is(err, s.want) || (s.want == nil && err != nil) {
			t.Fatalf("step %d %+v: got %v, want %v", i, s.cmd, err, s.want)
		}
	}
	got, ok := c.Get("a")
	if !ok || got.Partitions != 3 || got.ID != id {
		t.Fatalf("Get(a) = %+v, %v", got, ok)
	}
	if byID, ok := c.GetByID(id); !ok || byID.Name != "a" {
		t.Fatalf("GetByID = %+v, %v", byID, ok)
	}
	if !c.HasPartition("a", 2) || c.HasPartition("a", 3) || c.HasPartition("a", -1) || c.HasPartition("x", 0) {
		t.Fatal("HasPartition wrong")
	}
	if l := c.List(); len(l) != 1 || l[0].Name != "a" {
		t.Fatalf("List = %+v", l)
	}
}

func TestSnapshotRestoreAndProposer(t *testing.T) {
	c := New()
	for _, n := range []string{"c", "a", "b"} {
		if err := c.Propose(context.Background(), CreateTopic{Name: n, ID: NewTopicID(), Partitions: 2}); err != nil {
			t.Fatal(err)
		}
	}
	snap := c.Snapshot()
	if len(snap) != 3 || snap[0].Name != "a" || snap[2].Name != "c" {
		t.Fatalf("snapshot not sorted: %+v", snap)
	}
	d := New()
	var proposed []Command
	d.SetProposer(func(_ context.Context, cmd Command) error { proposed = append(proposed, cmd); return d.Apply(cmd) })
	d.Restore(snap)
	if err := d.Propose(context.Background(), DeleteTopic{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	if len(proposed) != 1 || len(d.List()) != 2 || len(c.List()) != 3 {
		t.Fatalf("proposed=%v d=%v c=%v", proposed, d.List(), c.List())
	}
}

func TestConcurrent(t *testing.T) {
	c := New()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				name := fmt.Sprintf("t%d-%d", i, j)
				_ = c.Apply(CreateTopic{Name: name, ID: NewTopicID(), Partitions: 1})
				c.Get(name)
				c.List()
			}
		}()
	}
	wg.Wait()
	if n := len(c.List()); n != 400 {
		t.Fatalf("got %d topics", n)
	}
}

// GrowTopic raises a topic's partition count and keeps its id; every
// refusal leaves the catalog (and its version) as it was, and every change
// moves the version, which consumer groups watch to reassign.
func TestGrowTopic(t *testing.T) {
	c := New()
	id := NewTopicID()
	if err := c.Apply(CreateTopic{Name: "a", ID: id, Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	other := NewTopicID()
	for _, s := range []struct {
		cmd  GrowTopic
		want string
	}{
		{GrowTopic{Name: "a", Partitions: 3}, "Topic already has 3 partition(s)."},
		{GrowTopic{Name: "a", Partitions: 2}, "The topic a currently has 3 partition(s); 2 would not be an increase."},
		{GrowTopic{Name: "a", Partitions: 0}, "The topic a currently has 3 partition(s); 0 would not be an increase."},
		{GrowTopic{Name: "a", Partitions: MaxPartitions + 1}, "The topic a would have 65537 partitions; a topic has at most 65536."},
		{GrowTopic{Name: "nope", Partitions: 4}, ErrUnknownTopic.Error()},
		{GrowTopic{Name: "a", ID: other, Partitions: 4}, ErrUnknownTopic.Error()},
	} {
		before := c.Version()
		err := c.Apply(s.cmd)
		if err == nil || (s.want != ErrUnknownTopic.Error() && err.Error() != s.want) || !strings.Contains(err.Error(), s.want) {
			t.Fatalf("%+v: %v, want %q", s.cmd, err, s.want)
		}
		if s.want != ErrUnknownTopic.Error() && !errors.Is(err, ErrInvalidPartitions) {
			t.Fatalf("%+v: %v is not ErrInvalidPartitions", s.cmd, err)
		}
		if got, _ := c.Get("a"); got.Partitions != 3 || c.Version() != before {
			t.Fatalf("%+v refused but changed the catalog: %+v, version %d -> %d", s.cmd, got, before, c.Version())
		}
	}
	v0, parts := c.Partitions()
	if err := c.Apply(GrowTopic{Name: "a", ID: id, Partitions: 5}); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(GrowTopic{Name: "a", Partitions: MaxPartitions}); err != nil {
		t.Fatal(err)
	}
	v1, grown := c.Partitions()
	if v1 != v0+2 || parts["a"] != 3 || grown["a"] != MaxPartitions {
		t.Fatalf("versions %d -> %d, partitions %v -> %v", v0, v1, parts, grown)
	}
	got, _ := c.Get("a")
	if byID, ok := c.GetByID(id); got.ID != id || !ok || byID.Partitions != MaxPartitions || !c.HasPartition("a", MaxPartitions-1) {
		t.Fatalf("after growing: %+v, by id %+v %v", got, byID, ok)
	}
	d := New()
	d.Restore(c.Snapshot())
	if r, _ := d.Get("a"); r != got {
		t.Fatalf("restored %+v, want %+v", r, got)
	}
}
