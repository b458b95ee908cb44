package catalog

import (
	"context"
	"errors"
	"fmt"
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
