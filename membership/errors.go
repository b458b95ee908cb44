package membership

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

var (
	// ErrRebalanceInProgress: a join or sync is in flight (commits are
	// refused rather than sent with a stale generation), or a rebalance is
	// already pending (EnforceRebalance); retry once it completes.
	ErrRebalanceInProgress = errors.New("member: rebalance in progress")
	// ErrCoordinatorNotAvailable: the coordinator is unknown or did not
	// answer; the member is finding it again.
	ErrCoordinatorNotAvailable = errors.New("member: coordinator not available")
	// ErrIllegalState: the member does not use a group subscription any
	// more (it was closed or stopped).
	ErrIllegalState = errors.New("member: not in a group (closed or stopped)")
	// ErrFenced: another instance with the same group.instance.id joined;
	// this one reported its partitions lost and stopped.
	ErrFenced = errors.New("member: fenced by another instance with the same instance id")
	// ErrCommitFailed: the generation the commit was made in is gone; the
	// partitions were reported lost.
	ErrCommitFailed = errors.New("member: commit failed: the generation is gone")
	// ErrUnsupported: the group protocol the member speaks has no such
	// operation (EnforceRebalance under the consumer protocol).
	ErrUnsupported = errors.New("member: not supported by the group protocol")
	// ErrConfig: the configuration is invalid.
	ErrConfig = errors.New("member: invalid configuration")
)

// CodeError is a Kafka error code the member cannot recover from or passes
// on to a caller. It unwraps to franz-go's kerr error for the code.
type CodeError struct {
	Op      string // "join", "sync", "heartbeat", "commit"
	Code    int16
	Message string // the coordinator's error message, when it gave one
}

func (e *CodeError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("member: %s: %v: %s", e.Op, kerr.ErrorForCode(e.Code), e.Message)
	}
	return fmt.Sprintf("member: %s: %v", e.Op, kerr.ErrorForCode(e.Code))
}

func (e *CodeError) Unwrap() error { return kerr.ErrorForCode(e.Code) }
