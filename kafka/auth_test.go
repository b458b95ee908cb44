package kafka

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"github.com/cohort-coord/cohort/internal/testlog"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	xscram "github.com/xdg-go/scram"
	"google.golang.org/protobuf/proto"

	"github.com/cohort-coord/cohort/catalog"
	grouppb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
	securitypb "github.com/cohort-coord/cohort/proto/cohort/security/v1"
	"github.com/cohort-coord/cohort/security"
)

// storeAdmin applies security changes straight to a store (a node applies
// them through Raft).
type storeAdmin struct{ s *security.Store }

func (a storeAdmin) ChangeScram(_ context.Context, c *securitypb.ScramChange) error {
	return a.s.ApplyScram(proto.Clone(c).(*securitypb.ScramChange))
}

func (a storeAdmin) ChangeACL(_ context.Context, c *securitypb.AclChange) error {
	return a.s.ApplyACL(proto.Clone(c).(*securitypb.AclChange))
}

const (
	adminUser, adminPass = "admin", "admin-secret-pw"
	aliceUser, alicePass = "alice", "alice-secret-pw"
)

func addUser(t testing.TB, s *security.Store, user, pass string) {
	t.Helper()
	for _, m := range []securitypb.ScramMechanism{securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_256, securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512} {
		c, err := security.NewCredential(user, m, pass, security.MinIterations)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.ApplyScram(&securitypb.ScramChange{Upserts: []*securitypb.ScramCredential{c}}); err != nil {
			t.Fatal(err)
		}
	}
}

// secureServer starts a SASL listener, with the authorizer when authz is
// set (superuser admin), and a user alice.
func secureServer(t testing.TB, authz bool, log *slog.Logger) (*testServer, *security.Store) {
	t.Helper()
	return secureServerWith(t, authz, log, nil)
}

// secureServerWith is secureServer with its metrics registered with reg
// (nil: none).
func secureServerWith(t testing.TB, authz bool, log *slog.Logger, reg prometheus.Registerer) (*testServer, *security.Store) {
	t.Helper()
	store := security.NewStore()
	addUser(t, store, adminUser, adminPass)
	addUser(t, store, aliceUser, alicePass)
	sec := &Security{SASL: true, Store: store, Admin: storeAdmin{store}}
	if authz {
		sec.Authorizer = security.NewAuthorizer(store, []security.Principal{security.User(adminUser)})
	}
	if log == nil {
		return startServer(t, nil, func(c *Config) { c.Security, c.Metrics = sec, reg }), store
	}
	// A server logging to log, set before it serves.
	cfg := DefaultConfig()
	cfg.Addr, cfg.NodeID, cfg.Security, cfg.Metrics = "127.0.0.1:0", 1, sec, reg
	topics := catalog.New()
	if err := topics.Apply(catalog.CreateTopic{Name: "t", ID: catalog.NewTopicID(), Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	fg := &fakeGroups{}
	l, err := New(cfg, fg, topics, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &testServer{l: l, groups: fg, topics: topics, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- l.Serve(ctx) }()
	t.Cleanup(s.stop)
	return s, store
}

func saslClient(t testing.TB, addr string, m sasl.Mechanism) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(m), kgo.RetryTimeout(2*time.Second), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func scram512(user, pass string) sasl.Mechanism {
	return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism()
}

func TestSASLMechanismsWithKgo(t *testing.T) {
	s, _ := secureServer(t, false, nil)
	addr := s.l.Addr().String()
	for name, m := range map[string]sasl.Mechanism{
		"SCRAM-SHA-512": scram512(aliceUser, alicePass),
		"SCRAM-SHA-256": scram.Auth{User: aliceUser, Pass: alicePass}.AsSha256Mechanism(),
		"PLAIN":         plain.Auth{User: aliceUser, Pass: alicePass}.AsMechanism(),
	} {
		cl := saslClient(t, addr, m)
		resp, err := kmsg.NewPtrListGroupsRequest().RequestWith(context.Background(), cl)
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("%s: list groups: %v %+v", name, err, resp)
		}
	}
	for name, m := range map[string]sasl.Mechanism{
		"SCRAM-SHA-512": scram512(aliceUser, "wrong"),
		"PLAIN":         plain.Auth{User: aliceUser, Pass: "wrong"}.AsMechanism(),
		"unknown user":  scram512("mallory", alicePass),
	} {
		cl := saslClient(t, addr, m)
		_, err := kmsg.NewPtrListGroupsRequest().RequestWith(context.Background(), cl)
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("%s: want SASL_AUTHENTICATION_FAILED, got %v", name, err)
		}
	}
	if got := s.l.Stats().AuthFailures; got != 3 {
		t.Fatalf("auth failures %d, want 3", got)
	}
}

func handshake(t *testing.T, c *rawClient, v int16, mech string) {
	t.Helper()
	r := c.do(&kmsg.SASLHandshakeRequest{Version: v, Mechanism: mech}).(*kmsg.SASLHandshakeResponse)
	if r.ErrorCode != 0 {
		t.Fatalf("handshake: %d", r.ErrorCode)
	}
}

func plainToken(user, pass string) []byte { return []byte("\x00" + user + "\x00" + pass) }

func TestWrongPasswordServesNothingMore(t *testing.T) {
	s, _ := secureServer(t, false, nil)
	c := dial(t, s.l.Addr())
	handshake(t, c, 1, security.MechanismPlain)
	r := c.do(&kmsg.SASLAuthenticateRequest{Version: 1, SASLAuthBytes: plainToken(aliceUser, "nope")}).(*kmsg.SASLAuthenticateResponse)
	if r.ErrorCode != kerr.SaslAuthenticationFailed.Code || r.ErrorMessage == nil {
		t.Fatalf("want SASL_AUTHENTICATION_FAILED with a message, got %+v", r)
	}
	c.send(&kmsg.ApiVersionsRequest{Version: 0})
	c.expectClosed()
}

func TestRequestBeforeAuthenticationCloses(t *testing.T) {
	s, _ := secureServer(t, false, nil)
	for _, req := range []kmsg.Request{
		&kmsg.MetadataRequest{Version: 1},
		&kmsg.JoinGroupRequest{Version: 5, Group: "g", ProtocolType: "consumer"},
		&kmsg.SASLAuthenticateRequest{Version: 1, SASLAuthBytes: plainToken(aliceUser, alicePass)}, // no handshake yet
	} {
		c := dial(t, s.l.Addr())
		// ApiVersions is answered before authentication.
		if av := c.do(&kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse); av.ErrorCode != 0 {
			t.Fatalf("api versions: %d", av.ErrorCode)
		}
		c.send(req)
		if _, ok := req.(*kmsg.SASLAuthenticateRequest); ok {
			// Answered ILLEGAL_SASL_STATE, then closed.
			resp, err := c.recv(req, c.corr)
			if err != nil || resp.(*kmsg.SASLAuthenticateResponse).ErrorCode != kerr.IllegalSaslState.Code {
				t.Fatalf("authenticate before handshake: %v %+v", err, resp)
			}
		}
		c.expectClosed()
	}
	// A handshake for a mechanism that is not enabled: the answer lists
	// the enabled ones, then the connection closes.
	c := dial(t, s.l.Addr())
	r := c.do(&kmsg.SASLHandshakeRequest{Version: 1, Mechanism: "GSSAPI"}).(*kmsg.SASLHandshakeResponse)
	if r.ErrorCode != kerr.UnsupportedSaslMechanism.Code || len(r.SupportedMechanisms) != 3 {
		t.Fatalf("handshake GSSAPI: %+v", r)
	}
	c.expectClosed()
}

// rawToken writes one size-prefixed SASL token and reads the answer token.
func rawToken(t *testing.T, c *rawClient, tok []byte) ([]byte, error) {
	t.Helper()
	b := binary.BigEndian.AppendUint32(nil, uint32(len(tok)))
	if _, err := c.nc.Write(append(b, tok...)); err != nil {
		t.Fatal(err)
	}
	c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	return readFrame(c.br)
}

func TestHandshakeV0RawTokens(t *testing.T) {
	s, _ := secureServer(t, false, nil)
	// PLAIN: the answer to the token is an empty frame (kafka-python waits for it).
	c := dial(t, s.l.Addr())
	handshake(t, c, 0, security.MechanismPlain)
	got, err := rawToken(t, c, plainToken(aliceUser, alicePass))
	if err != nil || len(got) != 0 {
		t.Fatalf("plain token answer %q %v", got, err)
	}
	if r := c.do(&kmsg.ListGroupsRequest{Version: 1}).(*kmsg.ListGroupsResponse); r.ErrorCode != 0 {
		t.Fatalf("list groups after v0 PLAIN: %d", r.ErrorCode)
	}
	// SCRAM: two round trips of raw tokens.
	c = dial(t, s.l.Addr())
	handshake(t, c, 0, security.MechanismScramSHA256)
	cl, _ := xscram.SHA256.NewClient(aliceUser, alicePass, "")
	conv := cl.NewConversation()
	first, _ := conv.Step("")
	s1, err := rawToken(t, c, []byte(first))
	if err != nil {
		t.Fatal(err)
	}
	final, err := conv.Step(string(s1))
	if err != nil {
		t.Fatal(err)
	}
	s2, err := rawToken(t, c, []byte(final))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conv.Step(string(s2)); err != nil || !conv.Valid() {
		t.Fatalf("server final %q: %v", s2, err)
	}
	if r := c.do(&kmsg.ListGroupsRequest{Version: 1}).(*kmsg.ListGroupsResponse); r.ErrorCode != 0 {
		t.Fatalf("list groups after v0 SCRAM: %d", r.ErrorCode)
	}
	// A wrong password in raw mode: the connection closes without an answer.
	c = dial(t, s.l.Addr())
	handshake(t, c, 0, security.MechanismPlain)
	if got, err := rawToken(t, c, plainToken(aliceUser, "nope")); err == nil {
		t.Fatalf("answer %q to a wrong password", got)
	}
}

// authedRaw is a raw client authenticated with PLAIN.
func authedRaw(t *testing.T, s *testServer, user, pass string) *rawClient {
	t.Helper()
	c := dial(t, s.l.Addr())
	handshake(t, c, 1, security.MechanismPlain)
	r := c.do(&kmsg.SASLAuthenticateRequest{Version: 2, SASLAuthBytes: plainToken(user, pass)}).(*kmsg.SASLAuthenticateResponse)
	if r.ErrorCode != 0 {
		t.Fatalf("authenticate %s: %+v", user, r)
	}
	return c
}

func TestAuthenticatedConnectionRefusesASecondHandshake(t *testing.T) {
	s, _ := secureServer(t, false, nil)
	c := dial(t, s.l.Addr())
	handshake(t, c, 1, security.MechanismPlain)
	r := c.do(&kmsg.SASLAuthenticateRequest{Version: 2, SASLAuthBytes: plainToken(aliceUser, alicePass)}).(*kmsg.SASLAuthenticateResponse)
	if r.ErrorCode != 0 {
		t.Fatalf("authenticate: %+v", r)
	}
	if r := c.do(&kmsg.SASLHandshakeRequest{Version: 1, Mechanism: "PLAIN"}).(*kmsg.SASLHandshakeResponse); r.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("second handshake: %d", r.ErrorCode)
	}
	if r := c.do(&kmsg.ListGroupsRequest{Version: 1}).(*kmsg.ListGroupsResponse); r.ErrorCode != 0 {
		t.Fatalf("list groups: %d", r.ErrorCode)
	}
}

func TestKadmManagesUsersAndACLs(t *testing.T) {
	s, store := secureServer(t, true, nil)
	ctx := context.Background()
	adm := kadm.NewClient(saslClient(t, s.l.Addr().String(), scram512(adminUser, adminPass)))

	// Users: create bob (kadm salts the password), describe, log in, delete.
	altered, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "bob", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "bob-pw"},
		{User: "bob", Mechanism: kadm.ScramSha256, Iterations: 8192, Password: "bob-pw"},
		{User: "carol", Mechanism: kadm.ScramSha256, Iterations: 100, Password: "x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := altered["bob"].Err; err != nil {
		t.Fatalf("bob: %v", err)
	}
	if err := altered["carol"].Err; !errors.Is(err, kerr.UnacceptableCredential) {
		t.Fatalf("carol with 100 iterations: %v", err)
	}
	described, err := adm.DescribeUserSCRAMs(ctx, "bob", "nobody")
	if err != nil {
		t.Fatal(err)
	}
	if b := described["bob"]; b.Err != nil || len(b.CredInfos) != 2 {
		t.Fatalf("bob: %+v", b)
	}
	if n := described["nobody"]; !errors.Is(n.Err, kerr.ResourceNotFound) {
		t.Fatalf("nobody: %+v", n)
	}
	c, ok := store.Credential("bob", securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512)
	if !ok || c.GetIterations() != 4096 || len(c.GetStoredKey()) != 64 {
		t.Fatalf("stored credential %+v", c)
	}
	bob := saslClient(t, s.l.Addr().String(), scram.Auth{User: "bob", Pass: "bob-pw"}.AsSha256Mechanism())
	if err := bob.Ping(ctx); err != nil {
		t.Fatalf("bob logs in: %v", err)
	}

	// ACLs: bob may read groups prefixed app- and topic t; deny wins on app-secret.
	b := kadm.NewACLs().Groups("app-").ResourcePatternType(kadm.ACLPatternPrefixed).Allow("User:bob").AllowHosts("*").Operations(kadm.OpRead)
	if res, err := adm.CreateACLs(ctx, b); err != nil || res[0].Err != nil {
		t.Fatalf("create: %v %+v", err, res)
	}
	b = kadm.NewACLs().Groups("app-secret").Deny("User:bob").DenyHosts("*").Operations(kadm.OpAll).ResourcePatternType(kadm.ACLPatternLiteral)
	if res, err := adm.CreateACLs(ctx, b); err != nil || res[0].Err != nil {
		t.Fatalf("create deny: %v %+v", err, res)
	}
	d := kadm.NewACLs().AnyResource().ResourcePatternType(kadm.ACLPatternAny).Operations(kadm.OpAny)
	d.Allow().AllowHosts().Deny().DenyHosts()
	descr, err := adm.DescribeACLs(ctx, d)
	if err != nil || len(descr) != 1 || descr[0].Err != nil || len(descr[0].Described) != 2 {
		t.Fatalf("describe: %v %+v", err, descr)
	}
	// A MATCH filter finds what applies to one group.
	m := kadm.NewACLs().Groups("app-secret").ResourcePatternType(kadm.ACLPatternMatch).Operations(kadm.OpAny)
	m.Allow().AllowHosts().Deny().DenyHosts()
	if descr, err := adm.DescribeACLs(ctx, m); err != nil || len(descr[0].Described) != 2 {
		t.Fatalf("describe match: %v %+v", err, descr)
	}

	// PLAIN checks the password against the credential kadm stored.
	bobRaw := authedRaw(t, s, "bob", "bob-pw")
	heartbeat := func(_ *kgo.Client, group string) int16 {
		return bobRaw.do(&kmsg.HeartbeatRequest{Version: 4, Group: group, MemberID: "m"}).(*kmsg.HeartbeatResponse).ErrorCode
	}
	if code := heartbeat(bob, "app-1"); code == groupDenied {
		t.Fatal("bob refused on app-1")
	}
	if code := heartbeat(bob, "app-secret"); code != groupDenied {
		t.Fatalf("bob on app-secret: %d", code)
	}
	if code := heartbeat(bob, "other"); code != groupDenied {
		t.Fatalf("bob on other: %d", code)
	}
	// bob is no superuser: the admin APIs refuse him.
	if res, err := kadm.NewClient(bob).DescribeACLs(ctx, d); err != nil || len(res) != 1 || !errors.Is(res[0].Err, kerr.ClusterAuthorizationFailed) {
		t.Fatalf("bob describes acls: %v %+v", err, res)
	}

	del := kadm.NewACLs().Groups("app-secret").ResourcePatternType(kadm.ACLPatternLiteral).Operations(kadm.OpAny)
	del.Allow().AllowHosts().Deny().DenyHosts()
	if res, err := adm.DeleteACLs(ctx, del); err != nil || len(res) != 1 || len(res[0].Deleted) != 1 {
		t.Fatalf("delete: %v %+v", err, res)
	}
	if code := heartbeat(bob, "app-secret"); code == groupDenied {
		t.Fatal("bob still refused after the deny was deleted")
	}
	if _, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "bob", Mechanism: kadm.ScramSha256}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.Credential("bob", securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_256); ok {
		t.Fatal("bob's SCRAM-SHA-256 credential survived its deletion")
	}
}

// TestACLChecksPerAPI: a principal without ACLs is refused by every group
// API with Kafka's codes; one with READ on a group but not its topic
// commits nothing.
func TestACLChecksPerAPI(t *testing.T) {
	s, store := secureServer(t, true, nil)
	alice := authedRaw(t, s, aliceUser, alicePass)
	do := alice.do
	commit := func(group string) int16 {
		req := kmsg.NewPtrOffsetCommitRequest()
		req.Version, req.Group, req.Generation, req.MemberID = 8, group, 1, "m"
		tt := kmsg.NewOffsetCommitRequestTopic()
		tt.Topic = "t"
		p := kmsg.NewOffsetCommitRequestTopicPartition()
		p.Offset = 5
		tt.Partitions = append(tt.Partitions, p)
		req.Topics = append(req.Topics, tt)
		return do(req).(*kmsg.OffsetCommitResponse).Topics[0].Partitions[0].ErrorCode
	}
	checks := func() map[string]int16 {
		out := map[string]int16{}
		out["join"] = do(&kmsg.JoinGroupRequest{Version: 5, Group: "g", ProtocolType: "consumer", SessionTimeoutMillis: 6000, RebalanceTimeoutMillis: 6000}).(*kmsg.JoinGroupResponse).ErrorCode
		out["sync"] = do(&kmsg.SyncGroupRequest{Version: 3, Group: "g", MemberID: "m", Generation: 1}).(*kmsg.SyncGroupResponse).ErrorCode
		out["heartbeat"] = do(&kmsg.HeartbeatRequest{Version: 3, Group: "g", MemberID: "m", Generation: 1}).(*kmsg.HeartbeatResponse).ErrorCode
		out["leave"] = do(&kmsg.LeaveGroupRequest{Version: 1, Group: "g", MemberID: "m"}).(*kmsg.LeaveGroupResponse).ErrorCode
		out["commit"] = commit("g")
		out["fetch"] = do(&kmsg.OffsetFetchRequest{Version: 5, Group: "g"}).(*kmsg.OffsetFetchResponse).ErrorCode
		out["describe"] = do(&kmsg.DescribeGroupsRequest{Version: 5, Groups: []string{"g"}}).(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode
		out["delete"] = do(&kmsg.DeleteGroupsRequest{Version: 2, Groups: []string{"g"}}).(*kmsg.DeleteGroupsResponse).Groups[0].ErrorCode
		out["find"] = do(&kmsg.FindCoordinatorRequest{Version: 2, CoordinatorKey: "g"}).(*kmsg.FindCoordinatorResponse).ErrorCode
		ct := kmsg.NewCreateTopicsRequestTopic()
		ct.Topic, ct.NumPartitions, ct.ReplicationFactor = "new-topic", 1, 1
		out["create"] = do(&kmsg.CreateTopicsRequest{Version: 4, Topics: []kmsg.CreateTopicsRequestTopic{ct}}).(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode
		return out
	}
	g, tp := groupDenied, topicDenied
	want := map[string]int16{"join": g, "sync": g, "heartbeat": g, "leave": g, "commit": g, "fetch": g, "describe": g, "delete": g, "find": g, "create": tp}
	if got := checks(); !mapsEqual(got, want) {
		t.Fatalf("no ACLs:\n got %v\nwant %v", got, want)
	}
	allow := func(rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation) {
		a := security.ACL{ResourceType: rt, ResourceName: name, PatternType: kmsg.ACLResourcePatternTypeLiteral,
			Principal: "User:alice", Host: "*", Operation: op, Permission: kmsg.ACLPermissionTypeAllow}
		if err := store.ApplyACL(&securitypb.AclChange{Creates: []*securitypb.AclBinding{a.Proto()}}); err != nil {
			t.Fatal(err)
		}
	}
	// READ on the group (implies DESCRIBE): everything but deleting the
	// group; commits still need READ on the topic.
	allow(kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationRead)
	got := checks()
	for _, k := range []string{"join", "sync", "heartbeat", "leave", "fetch", "describe", "find"} {
		if got[k] == g {
			t.Errorf("%s refused with READ on the group", k)
		}
	}
	if got["commit"] != tp || got["delete"] != g || got["create"] != tp {
		t.Fatalf("READ on the group only: %v", got)
	}
	allow(kmsg.ACLResourceTypeTopic, "t", kmsg.ACLOperationRead)
	allow(kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationDelete)
	allow(kmsg.ACLResourceTypeCluster, security.ClusterName, kmsg.ACLOperationCreate)
	got = checks()
	for k, code := range got {
		if code == g || code == tp {
			t.Errorf("%s refused (%d) with every ACL", k, code)
		}
	}
	// ListGroups leaves out the groups alice may not describe.
	s.groups.mu.Lock()
	s.groups.fn = func(_ context.Context, req proto.Message) (proto.Message, error) {
		if _, ok := req.(*grouppb.ListGroupsRequest); ok {
			return &grouppb.ListGroupsResponse{Groups: []*grouppb.ListedGroup{{GroupId: "g"}, {GroupId: "h"}}}, nil
		}
		return emptyAnswer(req), nil
	}
	s.groups.mu.Unlock()
	lg := do(&kmsg.ListGroupsRequest{Version: 4}).(*kmsg.ListGroupsResponse)
	if len(lg.Groups) != 1 || lg.Groups[0].Group != "g" {
		t.Fatalf("list groups: %+v", lg.Groups)
	}
}

func mapsEqual(a, b map[string]int16) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestNoSecretInLogs runs successful and failed exchanges of every
// mechanism, and user management, with debug logging, and looks for every
// secret in the log: passwords, salted passwords, stored and server keys,
// the SCRAM proofs (raw, hex and base64).
func TestNoSecretInLogs(t *testing.T) {
	var buf testlog.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, store := secureServer(t, true, log)
	addr := s.l.Addr().String()
	ctx := context.Background()
	var secrets [][]byte
	secrets = append(secrets, []byte(adminPass), []byte(alicePass), []byte("bob-pw"), []byte("wrong-pw-1"))

	for _, m := range []sasl.Mechanism{
		scram512(aliceUser, alicePass), scram512(aliceUser, "wrong-pw-1"),
		scram.Auth{User: aliceUser, Pass: alicePass}.AsSha256Mechanism(),
		plain.Auth{User: aliceUser, Pass: alicePass}.AsMechanism(), plain.Auth{User: aliceUser, Pass: "wrong-pw-1"}.AsMechanism(),
	} {
		saslClient(t, addr, m).Ping(ctx)
	}
	// A raw SCRAM exchange whose proof we know, completed and refused.
	for _, pass := range []string{alicePass, "wrong-pw-1"} {
		c := dial(t, s.l.Addr())
		handshake(t, c, 1, security.MechanismScramSHA512)
		cl, _ := xscram.SHA512.NewClient(aliceUser, pass, "")
		conv := cl.NewConversation()
		first, _ := conv.Step("")
		r := c.do(&kmsg.SASLAuthenticateRequest{Version: 2, SASLAuthBytes: []byte(first)}).(*kmsg.SASLAuthenticateResponse)
		final, err := conv.Step(string(r.SASLAuthBytes))
		if err != nil {
			t.Fatal(err)
		}
		_, proof, _ := strings.Cut(final, ",p=")
		secrets = append(secrets, []byte(proof))
		if raw, err := base64.StdEncoding.DecodeString(proof); err == nil {
			secrets = append(secrets, raw)
		}
		c.do(&kmsg.SASLAuthenticateRequest{Version: 2, SASLAuthBytes: []byte(final)})
	}
	adm := kadm.NewClient(saslClient(t, addr, scram512(adminUser, adminPass)))
	salt := []byte("0123456789abcdef")
	salted, _ := security.SaltPassword(securitypb.ScramMechanism_SCRAM_MECHANISM_SHA_512, "bob-pw", salt, 4096)
	secrets = append(secrets, salted)
	if _, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{
		{User: "bob", Mechanism: kadm.ScramSha512, Iterations: 4096, Salt: salt, SaltedPassword: salted},
		{User: "bad", Mechanism: kadm.ScramSha512, Iterations: 1, Salt: salt, SaltedPassword: salted},
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range store.Credentials() {
		secrets = append(secrets, c.GetStoredKey(), c.GetServerKey())
	}
	out := buf.String()
	if !strings.Contains(out, "SASL authentication failed") || !strings.Contains(out, "user=alice") {
		t.Fatalf("the failures are not logged:\n%s", out)
	}
	for _, sec := range secrets {
		for _, form := range []string{string(sec), hex.EncodeToString(sec), base64.StdEncoding.EncodeToString(sec), base64.RawStdEncoding.EncodeToString(sec)} {
			if len(form) >= 6 && strings.Contains(out, form) {
				t.Fatalf("secret %q in the log:\n%s", form, out)
			}
		}
	}
}
