package kafka

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// The protocols a JoinGroup hands the coordinator, which keeps them as long
// as the member lives, share nothing with the request body they were
// decoded from, keep their order, names and metadata (nil stays nil), and
// the usual one or two cost two allocations.
func TestJoinProtocolsOwnTheirMetadata(t *testing.T) {
	for n := range 4 {
		body := bytes.Repeat([]byte{7}, 64)
		var ps []kmsg.JoinGroupRequestProtocol
		for i := range n {
			p := kmsg.NewJoinGroupRequestProtocol()
			p.Name = string(rune('a' + i))
			if i != 1 {
				p.Metadata = body[i*16 : i*16+8+i]
			}
			ps = append(ps, p)
		}
		got := joinProtocols(ps)
		if len(got) != n {
			t.Fatalf("%d protocols became %d", n, len(got))
		}
		want := make([][]byte, n)
		for i, p := range ps {
			want[i] = bytes.Clone(p.Metadata)
		}
		clear(body)
		for i, p := range got {
			if p.GetName() != ps[i].Name || !bytes.Equal(p.GetMetadata(), want[i]) || (p.GetMetadata() == nil) != (ps[i].Metadata == nil) {
				t.Fatalf("protocol %d of %d: got %q %v, want %q %v", i, n, p.GetName(), p.GetMetadata(), ps[i].Name, want[i])
			}
		}
		if n > 1 {
			// Appending to one protocol's metadata cannot reach the next.
			_ = append(got[0].GetMetadata(), 1, 2, 3)
			if !bytes.Equal(got[2%n].GetMetadata(), want[2%n]) {
				t.Fatalf("%d protocols: metadata overlap", n)
			}
		}
		if n == 1 || n == 2 {
			if a := testing.AllocsPerRun(100, func() { joinProtocols(ps) }); a != 2 {
				t.Fatalf("%d protocols: %v allocations, want 2", n, a)
			}
		}
	}
}
