package clustertest

import (
	"context"
	"sync"
	"time"

	"github.com/cohort-coord/cohort/admin"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

var (
	adminOnce sync.Once
	shared    *admin.Client
	sharedErr error
)

// SharedAdmin returns the process-wide cluster administration client,
// listening on a free 127.0.0.1 port. One process runs at most one
// protoactor remote (it sets gRPC's global logger when it starts), so all
// callers share it.
func SharedAdmin() (*admin.Client, error) {
	adminOnce.Do(func() { shared, sharedErr = admin.Listen("127.0.0.1:0") })
	return shared, sharedErr
}

// status asks one node for its view of the cluster within timeout.
func status(a *admin.Client, remoteAddr string, timeout time.Duration) (*clusterpb.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return a.Status(ctx, remoteAddr)
}
