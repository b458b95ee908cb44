package interop

import (
	"context"
	"github.com/cohort-coord/cohort/internal/testlog"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKcatQuickstart is the README's Kafka client step (docs/kafka-clients.md): a coordinator started
// with its defaults, then `kcat -G group topic` for a topic nobody created.
// The consumer must be assigned the topic's partition (librdkafka never asks
// Metadata to create a topic it subscribes to; cohort creates it anyway by
// default), and leave the group cleanly when stopped.
func TestKcatQuickstart(t *testing.T) {
	ensureCommand(t, "kcat", "kcat")
	s := startCohort(t)
	cl := adminClient(t, s.addr)
	const group, topic = "quickstart", "quicktopic"

	var out testlog.Buffer
	kc := exec.Command("kcat", "-b", s.addr, "-G", group, topic)
	kc.Stdout, kc.Stderr = &out, &out
	if err := kc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- kc.Wait() }()
	t.Cleanup(func() {
		kc.Process.Kill()
		<-exited
	})

	deadline := time.Now().Add(30 * time.Second)
	var d described
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var err error
		d, err = describe(ctx, cl, group, topic)
		cancel()
		if err == nil && d.state == "Stable" && len(d.members) == 1 && strings.Contains(out.String(), "assigned: "+topic+" [0]") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kcat not assigned %s [0]: state %+v, err %v\nkcat output:\n%s", topic, d, err, out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for id, ps := range d.members {
		if !slices.Equal(ps, []int32{0}) {
			t.Fatalf("member %s owns %v of %s, want [0]", id, ps, topic)
		}
	}

	// Ctrl-C: kcat revokes its partition and leaves the group.
	kc.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
		exited <- nil // for the cleanup
	case <-time.After(20 * time.Second):
		t.Fatalf("kcat did not stop on SIGINT\n%s", out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if d, err := describe(ctx, cl, group, topic); err != nil || d.state != "Empty" || len(d.members) != 0 {
		t.Fatalf("after kcat left: %+v, %v\nkcat output:\n%s", d, err, out.String())
	}
}
