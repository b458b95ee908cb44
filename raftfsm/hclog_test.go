package raftfsm

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// raft logs its configuration with hclog.Fmt: the adapter renders it as
// hclog does, not as the slice of the format and its arguments.
func TestHclogFormatsValues(t *testing.T) {
	var buf bytes.Buffer
	h := newHclog(slog.New(slog.NewTextHandler(&buf, nil)), "raft")
	servers := []raft.Server{{Suffrage: raft.Voter, ID: "node1", Address: "127.0.0.1:7000"}}
	h.Info("initial configuration", "index", 1, "servers", hclog.Fmt("%+v", servers))
	h.With("port", hclog.Hex(255)).Info("quoted", "name", hclog.Quote("a b"))
	out := buf.String()
	for _, want := range []string{
		`servers="[{Suffrage:Voter ID:node1 Address:127.0.0.1:7000}]"`,
		`port=0xff`, `name="\"a b\""`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "%+v") {
		t.Errorf("an unformatted format in:\n%s", out)
	}
}
