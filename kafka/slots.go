package kafka

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitSlot is every block an OffsetCommit sent without a worker needs
// from its decode to its answer: the decoded request, the answer's slot and,
// for the usual commit of one partition, the native request and the Kafka
// answer. The writer returns it to its listener's pool once the answer is
// written, unless the call's bound passed first: a late answer may still come to an
// expired slot, never to a returned one, as the groups answer each request
// once (the coordinator's harness fails a machine that answers twice).
type commitSlot struct {
	p     pending
	kreq  kmsg.OffsetCommitRequest
	parts commitParts
	one   commitOne
}

// takeCommitSlot returns a slot whose request is ready to decode into.
func (l *Listener) takeCommitSlot() *commitSlot {
	s, _ := l.commitSlots.Get().(*commitSlot)
	if s == nil {
		s = new(commitSlot)
	}
	s.kreq = kmsg.OffsetCommitRequest{} // Default sets only some fields
	s.kreq.Default()
	return s
}

// waitSlot is the pooled answer slot of a JoinGroup or SyncGroup sent
// without a worker. Like a commitSlot, the writer returns it once its answer
// is written, never after its bound passed.
type waitSlot struct {
	p pending
}

func (l *Listener) takeWaitSlot() *waitSlot {
	s, _ := l.waitSlots.Get().(*waitSlot)
	if s == nil {
		s = new(waitSlot)
	}
	return s
}

// release returns p's slot to l, when it has one that no answer can still
// reach.
func (l *Listener) release(p *pending) {
	if p.state.Load() == asyncExpired {
		return
	}
	if s := p.slot; s != nil {
		s.p = pending{}
		l.commitSlots.Put(s)
	} else if w := p.wait; w != nil {
		w.p = pending{}
		l.waitSlots.Put(w)
	}
}
