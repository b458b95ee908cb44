package membership

import (
	"time"

	"github.com/cohort-coord/cohort/assignor"
)

// Group protocols a member can speak (Kafka's group.protocol).
const (
	// ClassicProtocol: JoinGroup/SyncGroup/Heartbeat, client-side
	// assignment (Machine).
	ClassicProtocol = "classic"
	// ConsumerProtocol: ConsumerGroupHeartbeat (KIP-848), server-side
	// assignment (Consumer).
	ConsumerProtocol = "consumer"
)

// StateMachine is what a member's owner drives: Machine (the classic
// protocol) and Consumer (the consumer protocol, KIP-848) implement it, so
// that one shell runs either.
type StateMachine interface {
	Start(now time.Time, fx *Effects)
	OnResponse(now time.Time, id uint64, res any, err error, fx *Effects)
	OnTimer(now time.Time, kind TimerKind, fx *Effects)
	OnCallbackDone(now time.Time, token uint64, fx *Effects)
	Commit(now time.Time, token uint64, offsets map[string]map[int32]int64, fx *Effects) error
	Mark(topic string, partition int32, offset int64)
	EnforceRebalance(now time.Time, reason string, fx *Effects) error
	Close(now time.Time, fx *Effects)

	Phase() Phase
	MemberID() string
	// Generation is the classic generation or the consumer member epoch
	// (-1 when the member is in none).
	Generation() int32
	// Protocol is the assignor the group selected ("" under the consumer
	// protocol, whose coordinator does not tell its members).
	Protocol() string
	// GroupProtocol is ClassicProtocol or ConsumerProtocol: the one the
	// member speaks now (a Consumer that fell back speaks classic).
	GroupProtocol() string
	Owned() []assignor.TopicPartitions
	Err() error
}

var (
	_ StateMachine = (*Machine)(nil)
	_ StateMachine = (*Consumer)(nil)
)

// GroupProtocol returns ClassicProtocol.
func (m *Machine) GroupProtocol() string { return ClassicProtocol }
