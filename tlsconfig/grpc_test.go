package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cohort-coord/cohort/internal/testcerts"
)

// TestGRPC: the native API's credentials over a real gRPC server on
// 127.0.0.1 (an IP address: no SNI, the name comes from the address).
func TestGRPC(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "ca")
	other := testcerts.NewCA(t, "other")
	srv := load(t, ca.Issue(t, testcerts.Options{CommonName: "node1"}).Write(t, dir, "node1", ca), nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(srv.GRPCServer()))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(ln)
	defer s.Stop()

	check := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.Dial(ln.Addr().String(), grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("status %v", r.Status)
		}
		return err
	}
	good := load(t, ca.Issue(t, testcerts.Options{CommonName: "admin"}).Write(t, dir, "admin", ca), nil)
	if err := check(good.GRPCClient()); err != nil {
		t.Fatalf("trusted client: %v", err)
	}
	f := other.Issue(t, testcerts.Options{CommonName: "mallory"}).Write(t, dir, "mallory", nil)
	f.CA = dir + "/ca.crt"
	if err := check(load(t, f, nil).GRPCClient()); err == nil {
		t.Fatal("client with an untrusted certificate served")
	}
	if err := check(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool()})); err == nil {
		t.Fatal("client without a certificate served")
	}
	// A client that trusts another CA refuses the server.
	g := ca.Issue(t, testcerts.Options{CommonName: "c"}).Write(t, dir, "c", nil)
	g.CA = dir + "/other-ca.crt"
	testcerts.WriteFile(t, g.CA, other.PEM)
	c := load(t, g, nil)
	if err := check(c.GRPCClient()); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("err %v, want unknown authority", err)
	}
	// ... until its CA file has the cluster CA: the same credentials follow.
	creds := c.GRPCClient()
	testcerts.WriteFile(t, g.CA, ca.PEM)
	if err := c.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := check(creds); err != nil {
		t.Fatalf("after the CA rotation: %v", err)
	}
}
