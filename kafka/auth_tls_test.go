package kafka

import (
	"context"
	"crypto/tls"
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/internal/testcerts"
	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// On an SSL listener the principal is User:<CN> of a verified client
// certificate (User:ANONYMOUS without one), and ACLs apply to it; on
// SASL_SSL the SASL user replaces it.
func TestACLsOnCertificateAndSASLPrincipals(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "cohort test CA")
	sf := ca.Issue(t, testcerts.Options{CommonName: "node1"}).Write(t, dir, "server", ca)
	src := sf.Load(t)
	carol := ca.Issue(t, testcerts.Options{CommonName: "carol"}).Write(t, dir, "carol", ca).Load(t)
	store := security.NewStore()
	addUser(t, store, aliceUser, alicePass)
	for _, p := range []string{"User:carol", "User:alice"} {
		a := security.ACL{ResourceType: kmsg.ACLResourceTypeGroup, ResourceName: p[5:] + "-g", PatternType: kmsg.ACLResourcePatternTypeLiteral,
			Principal: p, Host: "*", Operation: kmsg.ACLOperationRead, Permission: kmsg.ACLPermissionTypeAllow}
		if err := store.ApplyACL(&securitypb.AclChange{Creates: []*securitypb.AclBinding{a.Proto()}}); err != nil {
			t.Fatal(err)
		}
	}
	start := func(sasl bool) *Listener {
		cfg := DefaultConfig()
		cfg.Addr, cfg.NodeID = "127.0.0.1:0", 1
		cfg.TLS = src.Server(tlsconfig.ClientAuthRequest)
		cfg.Security = &Security{SASL: sasl, Store: store, Admin: storeAdmin{store}, Authorizer: security.NewAuthorizer(store, nil)}
		l, err := New(cfg, &fakeGroups{}, catalog.New(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- l.Serve(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return l
	}
	heartbeat := func(c *rawClient, group string) int16 {
		return c.do(&kmsg.HeartbeatRequest{Version: 3, Group: group, MemberID: "m", Generation: 1}).(*kmsg.HeartbeatResponse).ErrorCode
	}
	ssl := start(false)
	withCert := dialTLS(t, ssl.Addr(), carol.Client("localhost"))
	if code := heartbeat(withCert, "carol-g"); code == groupDenied {
		t.Fatal("User:carol (certificate) refused on her group")
	}
	if code := heartbeat(withCert, "alice-g"); code != groupDenied {
		t.Fatalf("User:carol on alice's group: %d", code)
	}
	anon := dialTLS(t, ssl.Addr(), &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
	if code := heartbeat(anon, "carol-g"); code != groupDenied {
		t.Fatalf("User:ANONYMOUS on carol's group: %d", code)
	}
	// SASL_SSL: carol's certificate, alice's SASL login: alice it is.
	saslSSL := start(true)
	c := dialTLS(t, saslSSL.Addr(), carol.Client("localhost"))
	handshake(t, c, 1, security.MechanismPlain)
	if r := c.do(&kmsg.SASLAuthenticateRequest{Version: 2, SASLAuthBytes: plainToken(aliceUser, alicePass)}).(*kmsg.SASLAuthenticateResponse); r.ErrorCode != 0 {
		t.Fatalf("authenticate: %+v", r)
	}
	if code := heartbeat(c, "alice-g"); code == groupDenied {
		t.Fatal("User:alice (SASL) refused on her group")
	}
	if code := heartbeat(c, "carol-g"); code != groupDenied {
		t.Fatalf("SASL user alice on carol's group: %d", code)
	}
}
