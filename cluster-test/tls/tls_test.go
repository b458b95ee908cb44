// Package tlscluster runs a cohortd cluster with TLS on every link. It is a
// test binary of its own: one process runs one protoactor remote, and the
// harness's administration client here speaks TLS.
package tlscluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/internal/testlog"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/admin"
	clustertest "github.com/cohort-coord/cohort/cluster-test"
	"github.com/cohort-coord/cohort/cluster-test/chaos"
	"github.com/cohort-coord/cohort/internal/testcerts"
	"github.com/cohort-coord/cohort/tlsconfig"
)

func TestMain(m *testing.M) {
	code := m.Run()
	clustertest.RemoveBinaries()
	if shared != nil {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

var (
	sharedOnce sync.Once
	shared     *pki
)

// sharedPKI is the process's CA, with the certificate of the harness's
// administration client installed (one per process, like that client).
func sharedPKI(t *testing.T) *pki {
	t.Helper()
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cohort-tls-test-")
		if err != nil {
			t.Fatal(err)
		}
		p := &pki{dir: dir, ca: testcerts.NewCA(t, "cohort test cluster CA")}
		testcerts.WriteFile(t, filepath.Join(p.dir, "ca.crt"), p.ca.PEM)
		clustertest.UseAdminRemote(admin.RemoteTLS(p.source(t, p.issue(t, p.ca, "admin")))...)
		shared = p
	})
	if shared == nil {
		t.Fatal("no shared CA")
	}
	return shared
}

// pki is a CA and the files of every certificate the test uses.
type pki struct {
	dir string
	ca  *testcerts.CA
}

func (p *pki) issue(t *testing.T, ca *testcerts.CA, name string, dns ...string) testcerts.Files {
	t.Helper()
	dns = append(dns, "localhost")
	f := ca.Issue(t, testcerts.Options{CommonName: name, DNSNames: dns, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}).Write(t, p.dir, name, nil)
	f.CA = filepath.Join(p.dir, "ca.crt")
	return f
}

func (p *pki) source(t *testing.T, f testcerts.Files) *tlsconfig.Source {
	t.Helper()
	return f.Load(t)
}

func tlsArgs(f testcerts.Files) []string {
	return []string{"--tls-cert-file", f.Cert, "--tls-key-file", f.Key, "--tls-ca-file", f.CA}
}

// TestTLSCluster forms a 3-node cluster with TLS on the Kafka listener
// (client certificates required), the native API and Raft; runs a
// franz-go consumer group with commits through it; checks cohortctl over
// TLS; refuses plaintext and certificate-less clients and a node with an
// untrusted certificate; and rotates a node's certificate without a
// restart.
func TestTLSCluster(t *testing.T) {
	p := sharedPKI(t)
	nodeFiles := map[string]testcerts.Files{}
	for _, id := range []string{"node1", "node2", "node3"} {
		nodeFiles[id] = p.issue(t, p.ca, id, id)
	}

	c := clustertest.StartCluster(t, 3, func(o *clustertest.Options) {
		o.Args = append(o.Args, "--tls-client-auth", "require", "--tls-reload-interval", "200ms")
		// Slower Raft timings than the harness's: on a loaded machine a
		// leader that misses its lease moves the coordinator mid-test.
		o.HeartbeatTimeout, o.ElectionTimeout, o.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		o.NodeArgs = func(id string) []string { return tlsArgs(nodeFiles[id]) }
	})
	c.WaitConverged(30 * time.Second)
	for i := range 3 {
		if log, _ := os.ReadFile(c.Node(i).LogPath); !strings.Contains(string(log), "msg=\"tls on\" kafka=true native=true raft=true kafka_client_auth=require") {
			t.Fatalf("%s did not log TLS on every link", c.Node(i).ID)
		}
	}

	alice := p.source(t, p.issue(t, p.ca, "alice"))
	seeds := c.KafkaAddrs()
	kopts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.DialTLSConfig(alice.Client(""))}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	adm, err := kgo.NewClient(kopts...)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	const topic, group = "tls-orders", "tls-billing"
	ct := kmsg.NewPtrCreateTopicsRequest()
	ctt := kmsg.NewCreateTopicsRequestTopic()
	ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = topic, 4, 1
	ct.Topics = append(ct.Topics, ctt)
	ctr, err := ct.RequestWith(ctx, adm)
	if err != nil || ctr.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic over TLS: %v %+v", err, ctr)
	}

	var owners sync.Map // client id -> []int32
	for _, id := range []string{"tls-a", "tls-b"} {
		cl, err := kgo.NewClient(append(slices.Clone(kopts), kgo.ClientID(id),
			kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.Balancers(kgo.RangeBalancer()),
			kgo.SessionTimeout(6*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
			kgo.DisableAutoCommit(), kgo.FetchMaxWait(200*time.Millisecond),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				owners.Store(id, slices.Sorted(slices.Values(m[topic])))
			}),
		)...)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for cl.Context().Err() == nil {
				pctx, pcancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
				cl.PollFetches(pctx)
				pcancel()
			}
		}()
		t.Cleanup(cl.Close)
		owners.Store(id+"/client", cl)
	}

	// The group settles with both members and all four partitions.
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, n, total := describe(ctx, adm, group)
		if st == "Stable" && n == 2 && total == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group never stable over TLS: state %q, %d members, %d partitions", st, n, total)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Each member commits its partitions at 100+partition through the
	// group (its generation and member id).
	want := map[int32]int64{}
	for _, id := range []string{"tls-a", "tls-b"} {
		v, _ := owners.Load(id + "/client")
		cl := v.(*kgo.Client)
		ov, ok := owners.Load(id)
		if !ok {
			t.Fatalf("%s was never assigned", id)
		}
		offs := map[int32]kgo.EpochOffset{}
		for _, part := range ov.([]int32) {
			offs[part] = kgo.EpochOffset{Epoch: -1, Offset: 100 + int64(part)}
			want[part] = 100 + int64(part)
		}
		var commitErr error
		cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{topic: offs}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
			if err == nil {
				for _, tp := range resp.Topics {
					for _, pp := range tp.Partitions {
						if pp.ErrorCode != 0 {
							commitErr = kerr.ErrorForCode(pp.ErrorCode)
						}
					}
				}
			}
		})
		if commitErr != nil {
			t.Fatalf("%s commit over TLS: %v", id, commitErr)
		}
	}
	if len(want) != 4 {
		t.Fatalf("assignments cover %d partitions, want 4", len(want))
	}
	if got := fetchOffsets(t, ctx, adm, group); !maps.Equal(got[topic], want) {
		t.Fatalf("committed offsets %v, want %v", got, want)
	}

	// cohortctl over TLS: the group over Kafka, the cluster over the
	// native API.
	ctl, err := clustertest.Binary("./cmd/cohortctl")
	if err != nil {
		t.Fatal(err)
	}
	cf := p.issue(t, p.ca, "operator")
	out := runCtl(t, ctl, append(append([]string{"--bootstrap", strings.Join(seeds, ","), "--json"}, tlsArgs(cf)...), "groups", "describe", group)...)
	var info []struct {
		State   string
		Members []json.RawMessage
	}
	if err := json.Unmarshal(out, &info); err != nil || len(info) != 1 || info[0].State != "Stable" || len(info[0].Members) != 2 {
		t.Fatalf("cohortctl groups describe over TLS: %s (%v)", out, err)
	}
	leader := c.WaitLeader(20 * time.Second)
	out = runCtl(t, ctl, append(append([]string{"--json"}, tlsArgs(cf)...), "cluster", "--remote", leader.RemoteAddr, "status")...)
	if !strings.Contains(string(out), `"node3"`) || !strings.Contains(string(out), `"Leader"`) {
		t.Fatalf("cohortctl cluster status over TLS: %s", out)
	}

	// Refused: a plaintext client, and a TLS client without a certificate.
	for name, opt := range map[string]kgo.Opt{
		"plaintext":      kgo.DialTimeout(3 * time.Second),
		"no certificate": kgo.DialTLSConfig(&tls.Config{RootCAs: p.ca.Pool(), MinVersion: tls.VersionTLS12}),
	} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds[0]), opt, kgo.RequestRetries(0), kgo.RetryTimeout(3*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = kmsg.NewPtrMetadataRequest().RequestWith(rctx, cl)
		rcancel()
		cl.Close()
		if err == nil {
			t.Fatalf("%s client was served", name)
		}
	}

	// A node whose certificate is not from the cluster CA cannot join.
	other := testcerts.NewCA(t, "rogue CA")
	rogue := p.issue(t, other, "node4", "node4")
	rogueLog := startRogue(t, c, rogue)
	deadline = time.Now().Add(45 * time.Second) // its first attempt gives up after 10 s
	for !strings.Contains(rogueLog(), "join attempt failed") {
		if time.Now().After(deadline) {
			t.Fatalf("the rogue node's log shows no refused join:\n%s", rogueLog())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, st := range c.WaitConverged(30 * time.Second) {
		if n := len(st.GetMembers()); n != 3 {
			t.Fatalf("%s knows %d members after the rogue's attempt: %v", st.GetNodeId(), n, st.GetMembers())
		}
	}

	// Rotation: node1's certificate is replaced on disk; new connections
	// get the new one without a restart, and the group keeps working.
	n1 := c.Node(0)
	if cn := serverCN(t, n1.KafkaAddr, alice); cn != "node1" {
		t.Fatalf("node1 presents %q", cn)
	}
	rotated := p.ca.Issue(t, testcerts.Options{CommonName: "node1-rotated", DNSNames: []string{"node1", "localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	testcerts.WriteFile(t, nodeFiles["node1"].Key, rotated.KeyPEM)
	testcerts.WriteFile(t, nodeFiles["node1"].Cert, rotated.CertPEM)
	deadline = time.Now().Add(20 * time.Second)
	for serverCN(t, n1.KafkaAddr, alice) != "node1-rotated" {
		if time.Now().After(deadline) {
			t.Fatal("node1 still presents its old certificate")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if log, _ := os.ReadFile(n1.LogPath); !strings.Contains(string(log), "certificate files reloaded") {
		t.Fatal("node1 did not log the reload")
	}
	if got := fetchOffsets(t, ctx, adm, group); !maps.Equal(got[topic], want) {
		t.Fatalf("after the rotation: committed offsets %v, want %v", got, want)
	}
	c.WaitConverged(30 * time.Second)
}

// describe returns a group's state, member count and assigned partitions.
func describe(ctx context.Context, cl *kgo.Client, group string) (state string, members, partitions int) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
		return "", 0, 0
	}
	g := resp.Groups[0]
	for _, m := range g.Members {
		var a kmsg.ConsumerMemberAssignment
		if a.ReadFrom(m.MemberAssignment) == nil {
			for _, tp := range a.Topics {
				partitions += len(tp.Partitions)
			}
		}
	}
	return g.State, len(g.Members), partitions
}

// fetchOffsets returns a group's committed offsets by topic and partition.
func fetchOffsets(t *testing.T, ctx context.Context, cl *kgo.Client, group string) map[string]map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("offset fetch: %v", err)
	}
	if resp.ErrorCode != 0 {
		t.Fatalf("offset fetch: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	out := map[string]map[int32]int64{}
	for _, tp := range resp.Topics {
		out[tp.Topic] = map[int32]int64{}
		for _, pp := range tp.Partitions {
			out[tp.Topic][pp.Partition] = pp.Offset
		}
	}
	return out
}

// serverCN is the common name of the certificate addr presents now.
func serverCN(t *testing.T, addr string, src *tlsconfig.Source) string {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, src.Client("localhost"))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// runCtl runs cohortctl until it succeeds (a leader change answers
// COORDINATOR_NOT_AVAILABLE for a moment), for up to 30 s.
func runCtl(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err == nil {
			return stdout.Bytes()
		}
		if time.Now().After(deadline) {
			t.Fatalf("cohortctl %v: %v\n%s", args, err, stderr.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// startRogue starts a cohortd that asks the cluster to add it, with files'
// certificate, and returns a function that reads its log.
func startRogue(t *testing.T, c *clustertest.Cluster, f testcerts.Files) func() string {
	t.Helper()
	bin, err := clustertest.Binary("./cmd/cohortd")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	leader := c.WaitLeader(20 * time.Second)
	var log testlog.Buffer
	cmd := exec.Command(bin, append([]string{"--node-id", "node4", "--data-dir", filepath.Join(dir, "data"),
		"--remote-addr", "127.0.0.1:0", "--kafka-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--http-addr", "",
		"--join", leader.RemoteAddr}, tlsArgs(f)...)...)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return log.String
}

// TestTLSClusterThroughProxies: every Raft link runs through the chaos
// suite's proxies (--raft-peer-addrs) with TLS on; the cluster forms, a
// partitioned leader is replaced, and after the heal every node converges:
// the nodes verify each other by node id, not by the proxy's address.
func TestTLSClusterThroughProxies(t *testing.T) {
	p := sharedPKI(t)
	ids := []string{"node1", "node2", "node3"}
	raftAddrs := map[string]string{}
	files := map[string]testcerts.Files{}
	for _, id := range ids {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		raftAddrs[id] = l.Addr().String()
		l.Close()
		files[id] = p.issue(t, p.ca, "proxied-"+id, id)
	}
	pn, err := chaos.NewNet(ids, func(id string) string { return raftAddrs[id] })
	if err != nil {
		t.Fatal(err)
	}
	defer pn.Close()
	c := clustertest.StartCluster(t, 3, func(o *clustertest.Options) {
		o.HeartbeatTimeout, o.ElectionTimeout, o.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		o.NodeArgs = func(id string) []string {
			return append([]string{"--raft-addr", raftAddrs[id], "--raft-peer-addrs", pn.PeerAddrs(id)}, tlsArgs(files[id])...)
		}
	})
	c.WaitConverged(30 * time.Second)
	old := c.WaitLeader(20 * time.Second)
	var rest []string
	for _, id := range ids {
		if id != old.ID {
			rest = append(rest, id)
		}
	}
	pn.Partition([]string{old.ID}, rest)
	deadline := time.Now().Add(30 * time.Second)
	for {
		sts, _ := c.StatusOf(c.Running(), 5*time.Second)
		moved := false
		for _, st := range sts {
			if st != nil && st.GetNodeId() != old.ID && st.GetState() == "Leader" {
				moved = true
			}
		}
		if moved {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new leader on the majority side of %v", rest)
		}
		time.Sleep(200 * time.Millisecond)
	}
	pn.Heal()
	sts := c.WaitConverged(30 * time.Second)
	for _, st := range sts {
		if n := len(st.GetMembers()); n != 3 {
			t.Fatalf("%s knows %d members", st.GetNodeId(), n)
		}
	}
	for i := range 3 {
		if log, _ := os.ReadFile(c.Node(i).LogPath); strings.Contains(string(log), "certificate is valid for") {
			t.Fatalf("%s refused a peer's name through the proxies", c.Node(i).ID)
		}
	}
}
