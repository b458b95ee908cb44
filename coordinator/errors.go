package coordinator

import "errors"

// Kafka error codes used by the group coordinator: the one table of codes
// the core speaks (it imports no wire package); errors_test.go checks each
// against franz-go's kerr, which the listener and clients use.
const (
	ErrNone                      int32 = 0
	ErrUnknownServerError        int32 = -1
	ErrUnknownTopicOrPartition   int32 = 3
	ErrRequestTimedOut           int32 = 7
	ErrOffsetMetadataTooLarge    int32 = 12
	ErrNetworkException          int32 = 13
	ErrCoordinatorLoadInProgress int32 = 14
	ErrCoordinatorNotAvailable   int32 = 15
	ErrNotCoordinator            int32 = 16
	ErrIllegalGeneration         int32 = 22
	ErrInconsistentGroupProto    int32 = 23
	ErrInvalidGroupID            int32 = 24
	ErrUnknownMemberID           int32 = 25
	ErrInvalidSessionTimeout     int32 = 26
	ErrRebalanceInProgress       int32 = 27
	ErrInvalidCommitOffsetSize   int32 = 28
	ErrUnsupportedVersion        int32 = 35
	ErrNonEmptyGroup             int32 = 68
	ErrGroupIDNotFound           int32 = 69
	ErrMemberIDRequired          int32 = 79
	ErrGroupMaxSizeReached       int32 = 81
	ErrFencedInstanceID          int32 = 82
	ErrGroupSubscribedToTopic    int32 = 86
	ErrUnstableOffsetCommit      int32 = 88
)

// Store failures, reported back through Group.OnPersisted. Stores wrap them
// with %w; the machine maps them to Kafka codes with errors.Is.
var (
	// ErrStoreTimeout: the write did not complete in time (its outcome is unknown).
	ErrStoreTimeout = errors.New("store: write timed out")
	// ErrStoreNotLeader: this node may no longer write (leadership lost).
	ErrStoreNotLeader = errors.New("store: not the leader")
	// ErrStoreUnavailable: the store cannot take writes right now.
	ErrStoreUnavailable = errors.New("store: unavailable")
	// ErrRecordTooLarge: the record exceeds the configured maximum size.
	ErrRecordTooLarge = errors.New("store: record too large")
	// ErrRecordInvalid: the record cannot be stored as it is (a string that
	// is not valid UTF-8).
	ErrRecordInvalid = errors.New("store: record cannot be encoded")
	// ErrStoreFenced: the write's fence did not match the stored group.
	ErrStoreFenced = errors.New("store: write fenced by a newer group state")
)

// groupWriteError maps a failed group-metadata write to the code Kafka's
// coordinator answers with (storeGroup: REQUEST_TIMED_OUT becomes
// REBALANCE_IN_PROGRESS, MESSAGE_TOO_LARGE becomes UNKNOWN_SERVER_ERROR).
func groupWriteError(err error) int32 {
	switch {
	case err == nil:
		return ErrNone
	case errors.Is(err, ErrStoreTimeout):
		return ErrRebalanceInProgress
	case errors.Is(err, ErrStoreNotLeader):
		return ErrNotCoordinator
	case errors.Is(err, ErrStoreUnavailable):
		return ErrCoordinatorNotAvailable
	case errors.Is(err, ErrRecordTooLarge):
		return ErrUnknownServerError
	default:
		return ErrUnknownServerError
	}
}

// offsetWriteError maps a failed offset write (maybeConvertOffsetCommitError).
func offsetWriteError(err error) int32 {
	switch {
	case err == nil:
		return ErrNone
	case errors.Is(err, ErrStoreTimeout):
		return ErrRequestTimedOut
	case errors.Is(err, ErrStoreNotLeader):
		return ErrNotCoordinator
	case errors.Is(err, ErrStoreUnavailable):
		return ErrCoordinatorNotAvailable
	case errors.Is(err, ErrRecordTooLarge), errors.Is(err, ErrRecordInvalid):
		return ErrInvalidCommitOffsetSize
	case errors.Is(err, ErrStoreFenced):
		return ErrIllegalGeneration
	default:
		return ErrUnknownServerError
	}
}
