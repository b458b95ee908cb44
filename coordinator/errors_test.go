package coordinator

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// Every code of the table is Kafka's code of that name.
func TestErrorCodesAreKafkas(t *testing.T) {
	for code, want := range map[int32]*kerr.Error{
		ErrUnknownServerError:        kerr.UnknownServerError,
		ErrUnknownTopicOrPartition:   kerr.UnknownTopicOrPartition,
		ErrRequestTimedOut:           kerr.RequestTimedOut,
		ErrOffsetMetadataTooLarge:    kerr.OffsetMetadataTooLarge,
		ErrNetworkException:          kerr.NetworkException,
		ErrCoordinatorLoadInProgress: kerr.CoordinatorLoadInProgress,
		ErrCoordinatorNotAvailable:   kerr.CoordinatorNotAvailable,
		ErrNotCoordinator:            kerr.NotCoordinator,
		ErrIllegalGeneration:         kerr.IllegalGeneration,
		ErrInconsistentGroupProto:    kerr.InconsistentGroupProtocol,
		ErrInvalidGroupID:            kerr.InvalidGroupID,
		ErrUnknownMemberID:           kerr.UnknownMemberID,
		ErrInvalidSessionTimeout:     kerr.InvalidSessionTimeout,
		ErrRebalanceInProgress:       kerr.RebalanceInProgress,
		ErrInvalidCommitOffsetSize:   kerr.InvalidCommitOffsetSize,
		ErrUnsupportedVersion:        kerr.UnsupportedVersion,
		ErrNonEmptyGroup:             kerr.NonEmptyGroup,
		ErrGroupIDNotFound:           kerr.GroupIDNotFound,
		ErrMemberIDRequired:          kerr.MemberIDRequired,
		ErrGroupMaxSizeReached:       kerr.GroupMaxSizeReached,
		ErrFencedInstanceID:          kerr.FencedInstanceID,
		ErrGroupSubscribedToTopic:    kerr.GroupSubscribedToTopic,
		ErrUnstableOffsetCommit:      kerr.UnstableOffsetCommit,
	} {
		if int32(want.Code) != code {
			t.Errorf("%s is %d in kerr, %d here", want.Message, want.Code, code)
		}
	}
}
