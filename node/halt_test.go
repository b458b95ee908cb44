package node

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	"github.com/cohort-coord/cohort/raftfsm"
)

// A committed entry this version cannot apply and may not skip stops the
// node: its Kafka listener closes and Raft shuts down.
func TestNodeStopsOnUnknownEntry(t *testing.T) {
	n := startNode(t, false)
	data, err := proto.Marshal(&raftpb.Envelope{Type: raftpb.CommandType(99), Version: raftfsm.CommandVersion})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.Raft().Propose(ctx, data); !errors.Is(err, raftfsm.ErrHalted) {
		t.Fatalf("proposing an entry this version cannot apply: %v, want %v", err, raftfsm.ErrHalted)
	}
	select {
	case <-n.stop:
	case <-time.After(10 * time.Second):
		t.Fatal("the node kept running after an entry it cannot apply")
	}
	if !errors.Is(n.Raft().FSM.HaltErr(), raftfsm.ErrHalted) {
		t.Fatalf("halt error %v", n.Raft().FSM.HaltErr())
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", n.KafkaAddr(), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the Kafka listener still accepts connections")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
