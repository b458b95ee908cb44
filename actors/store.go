package actors

import pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"

// Store keeps the durable records of every group.
type Store interface {
	// Append writes recs, in order, for one group and then calls done exactly
	// once, from any goroutine, with nil or an error wrapping one of the
	// coordinator's store sentinel errors. A non-nil fence makes the write
	// conditional on the stored group (coordinator.ErrStoreFenced otherwise).
	// Appends of one group are applied in call order.
	Append(groupID string, recs []*pb.Record, fence *pb.WriteFence, done func(error))
	// Load returns a group's durable state. A nil record and no offsets mean
	// the store knows nothing of the group.
	Load(groupID string) (*pb.GroupRecord, []*pb.OffsetRecord, error)
	// Groups lists every group the store knows, sorted.
	Groups() ([]string, error)
	// ConsumerRecords returns a consumer group's records (KIP-848), in an
	// order coordinator.RestoreConsumerGroup rebuilds the group from; none
	// for a group that is not a consumer group.
	ConsumerRecords(groupID string) []*pb.Record
}

// SessionStore is a Store that also keeps each group's last MemberSessions
// record, which a takeover uses to carry its members' sessions over
// (coordinator.TakeoverSessions). A Store without it gives every member of a
// restored group a full session.
type SessionStore interface {
	// Sessions returns a group's last MemberSessions, nil when none.
	Sessions(groupID string) *pb.MemberSessions
}
