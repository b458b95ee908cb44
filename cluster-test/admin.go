package clustertest

import (
	"context"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/remote"

	"github.com/cohort-coord/cohort/admin"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

var (
	adminOnce sync.Once
	shared    *admin.Client
	sharedErr error
	adminOpts []remote.ConfigOption
)

// UseAdminRemote sets the protoactor remote options of the shared admin
// client (admin.RemoteTLS for clusters with TLS on the native API). It
// must be called before the first cluster starts: the client is made once
// per process, so a test binary runs either TLS or plaintext clusters.
func UseAdminRemote(opts ...remote.ConfigOption) { adminOpts = opts }

// SharedAdmin returns the process-wide cluster administration client,
// listening on a free 127.0.0.1 port. One process runs at most one
// protoactor remote (it sets gRPC's global logger when it starts), so all
// callers share it.
func SharedAdmin() (*admin.Client, error) {
	adminOnce.Do(func() { shared, sharedErr = admin.Listen("127.0.0.1:0", adminOpts...) })
	return shared, sharedErr
}

// status asks one node for its view of the cluster within timeout.
func status(a *admin.Client, remoteAddr string, timeout time.Duration) (*clusterpb.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return a.Status(ctx, remoteAddr)
}
