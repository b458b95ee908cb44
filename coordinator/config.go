package coordinator

import (
	"errors"
	"fmt"
	"time"
)

// Config holds the group settings, named after Kafka's broker configs.
type Config struct {
	MinSessionTimeout     time.Duration // group.min.session.timeout.ms
	MaxSessionTimeout     time.Duration // group.max.session.timeout.ms
	InitialRebalanceDelay time.Duration // group.initial.rebalance.delay.ms
	MaxSize               int           // group.max.size; 0 means unlimited
	NewMemberJoinTimeout  time.Duration // classic new-member join timeout
	OffsetsRetention      time.Duration // offsets.retention.minutes
	// OffsetsRetentionCheckInterval is offsets.retention.check.interval.ms.
	OffsetsRetentionCheckInterval time.Duration
	OffsetMetadataMaxBytes        int // offset.metadata.max.bytes
	// MaxRecordBytes bounds one group-metadata record (Kafka: message.max.bytes).
	MaxRecordBytes int
	// DisableTakeoverWindow restores Kafka's rules for members that rejoin
	// right after a coordinator takes their group over (takeover.go).
	DisableTakeoverWindow bool
	// Partitions returns a topic's partition count now (false: no such
	// topic); the takeover window uses it to see that a generation's
	// assignments still cover every partition. Nil skips that check.
	Partitions func(topic string) (int32, bool)
	// OwnershipGuard: SyncGroup answers of "consumer" groups never give a
	// member a partition another member still owns (see the package doc).
	// DefaultConfig turns it on; a zero Config has it off.
	OwnershipGuard bool
	// MixedAssignors admits into a "consumer" group whose members list only
	// built-in assignors a member whose list shares nothing with the group;
	// while no assignor is common to all, the coordinator assigns the group
	// itself (see the package doc). Off by default.
	MixedAssignors bool
	// SessionCheckInterval is how often a group looks for members it has not
	// heard from for a while (a sixth of their session timeout, 5 s at
	// least) and, when that set changed, writes it with their session ends
	// (MemberSessions), so that a coordinator taking the group over does not
	// restart their sessions (liveness.go). 0 turns the checks off: a
	// takeover gives every member a full session, as Kafka does.
	SessionCheckInterval time.Duration
	// TakeoverSessionFloor is the least time a coordinator that takes a
	// group over gives a member to reach it (at most the member's session
	// timeout), whatever the replicated state says of the member's session.
	TakeoverSessionFloor time.Duration
}

// DefaultConfig returns Kafka's defaults.
func DefaultConfig() Config {
	return Config{
		MinSessionTimeout:             6 * time.Second,
		MaxSessionTimeout:             30 * time.Minute,
		InitialRebalanceDelay:         3 * time.Second,
		MaxSize:                       0,
		NewMemberJoinTimeout:          5 * time.Minute,
		OffsetsRetention:              7 * 24 * time.Hour,
		OffsetsRetentionCheckInterval: 10 * time.Minute,
		OffsetMetadataMaxBytes:        4096,
		MaxRecordBytes:                1048588,
		OwnershipGuard:                true,
		SessionCheckInterval:          time.Second,
		TakeoverSessionFloor:          6 * time.Second,
	}
}

// Validate reports every invalid setting.
func (c Config) Validate() error {
	var errs []error
	if c.MinSessionTimeout <= 0 {
		errs = append(errs, fmt.Errorf("group min session timeout must be positive, got %v", c.MinSessionTimeout))
	}
	if c.MaxSessionTimeout < c.MinSessionTimeout {
		errs = append(errs, fmt.Errorf("group max session timeout %v is below the min session timeout %v", c.MaxSessionTimeout, c.MinSessionTimeout))
	}
	if c.MaxSessionTimeout > time.Duration(1<<31-1)*time.Millisecond {
		errs = append(errs, fmt.Errorf("group max session timeout %v does not fit in int32 milliseconds", c.MaxSessionTimeout))
	}
	if c.InitialRebalanceDelay < 0 {
		errs = append(errs, fmt.Errorf("group initial rebalance delay must not be negative, got %v", c.InitialRebalanceDelay))
	}
	if c.MaxSize < 0 {
		errs = append(errs, fmt.Errorf("group max size must be 0 (unlimited) or positive, got %d", c.MaxSize))
	}
	if c.NewMemberJoinTimeout <= 0 {
		errs = append(errs, fmt.Errorf("group new member join timeout must be positive, got %v", c.NewMemberJoinTimeout))
	}
	if c.OffsetsRetention <= 0 {
		errs = append(errs, fmt.Errorf("offsets retention must be positive, got %v", c.OffsetsRetention))
	}
	if c.OffsetsRetentionCheckInterval <= 0 {
		errs = append(errs, fmt.Errorf("offsets retention check interval must be positive, got %v", c.OffsetsRetentionCheckInterval))
	}
	if c.OffsetMetadataMaxBytes < 0 {
		errs = append(errs, fmt.Errorf("offset metadata max bytes must not be negative, got %d", c.OffsetMetadataMaxBytes))
	}
	if c.SessionCheckInterval < 0 {
		errs = append(errs, fmt.Errorf("session check interval must not be negative, got %v", c.SessionCheckInterval))
	}
	if c.TakeoverSessionFloor < 0 {
		errs = append(errs, fmt.Errorf("takeover session floor must not be negative, got %v", c.TakeoverSessionFloor))
	}
	if c.MaxRecordBytes <= 0 {
		errs = append(errs, fmt.Errorf("max record bytes must be positive, got %d", c.MaxRecordBytes))
	}
	return errors.Join(errs...)
}

func (c *Config) maxSize() int {
	if c.MaxSize <= 0 {
		return int(^uint(0) >> 1)
	}
	return c.MaxSize
}
