package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/internal/testcerts"
	"github.com/cohort-coord/cohort/internal/testnode"
	"github.com/cohort-coord/cohort/node"
	"github.com/cohort-coord/cohort/tlsconfig"
)

// BenchmarkTLS measures what TLS on the Kafka listener costs: heartbeats/s
// and commits/s from franz-go clients to an in-process cohort node, over
// plaintext and over TLS (TLS 1.3, ECDSA P-256, client certificates
// required). Both nodes run for the whole benchmark and the sub-benchmarks
// alternate between them, so load from elsewhere on the machine falls on
// both alike; run it several times and compare medians:
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench BenchmarkTLS -benchtime 20000x ./kafka/; done
//
// tlsGroups single-member groups join each node first; then tlsWorkers
// goroutines send requests for them round-robin over tlsClients clients
// (franz-go pipelines the requests of one client on its connection).
func BenchmarkTLS(b *testing.B) {
	dir := b.TempDir()
	ca := testcerts.NewCA(b, "bench CA")
	testcerts.WriteFile(b, dir+"/ca.crt", ca.PEM)
	sf := ca.Issue(b, testcerts.Options{CommonName: "node1"}).Write(b, dir, "node1", nil)
	cf := ca.Issue(b, testcerts.Options{CommonName: "bench"}).Write(b, dir, "bench", nil)
	client := cf.Load(b)
	modes := []string{"plaintext", "tls"}
	benches := map[string]*tlsBench{}
	for _, mode := range modes {
		cfg := testnode.Config(b)
		var opts []kgo.Opt
		if mode == "tls" {
			cfg.TLS = node.TLSConfig{Files: sf.TLSFiles(), Kafka: true, KafkaClientAuth: tlsconfig.ClientAuthRequire}
			opts = append(opts, kgo.DialTLSConfig(client.Client("")))
		}
		bc := newTLSBench(b, testnode.Start(b, cfg).KafkaAddr(), opts)
		defer bc.close()
		benches[mode] = bc
	}
	for _, mode := range modes {
		bc := benches[mode]
		b.Run("heartbeat/"+mode, func(b *testing.B) { bc.run(b, "heartbeats/s", bc.heartbeat) })
	}
	for _, mode := range modes {
		bc := benches[mode]
		b.Run("offsetcommit/"+mode, func(b *testing.B) { bc.run(b, "commits/s", bc.commit) })
	}
}

const (
	tlsGroups  = 200
	tlsClients = 8
	tlsWorkers = 64
)

type tlsMember struct {
	group, id string
	gen       int32
}

type tlsBench struct {
	clients []*kgo.Client
	members []tlsMember
	offset  atomic.Int64
}

func newTLSBench(b *testing.B, addr string, opts []kgo.Opt) *tlsBench {
	b.Helper()
	bc := &tlsBench{}
	for range tlsClients {
		cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(addr), kgo.ClientID("tls-bench"))...)
		if err != nil {
			b.Fatal(err)
		}
		bc.clients = append(bc.clients, cl)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ct := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = "tls-bench", 1, 1
	ct.Topics = append(ct.Topics, t)
	if _, err := ct.RequestWith(ctx, bc.clients[0]); err != nil {
		b.Fatal(err)
	}
	bc.members = make([]tlsMember, tlsGroups)
	var wg sync.WaitGroup
	errs := make(chan error, tlsGroups)
	for i := range tlsGroups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, err := joinOne(ctx, bc.clients[i%tlsClients], fmt.Sprintf("tls-bench-%d", i))
			if err != nil {
				errs <- err
				return
			}
			bc.members[i] = m
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return bc
}

// joinOne makes a one-member consumer group and returns its member.
func joinOne(ctx context.Context, cl *kgo.Client, group string) (tlsMember, error) {
	meta := (&kmsg.ConsumerMemberMetadata{Topics: []string{"tls-bench"}}).AppendTo(nil)
	j := kmsg.NewPtrJoinGroupRequest()
	j.Group, j.ProtocolType, j.SessionTimeoutMillis, j.RebalanceTimeoutMillis = group, "consumer", 600000, 60000
	j.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: meta}}
	var jr *kmsg.JoinGroupResponse
	for range 2 { // the first join of v4+ asks for the member id
		var err error
		if jr, err = j.RequestWith(ctx, cl); err != nil {
			return tlsMember{}, err
		}
		if jr.ErrorCode != kerr.MemberIDRequired.Code {
			break
		}
		j.MemberID = jr.MemberID
	}
	if err := kerr.ErrorForCode(jr.ErrorCode); err != nil {
		return tlsMember{}, fmt.Errorf("join %s: %w", group, err)
	}
	s := kmsg.NewPtrSyncGroupRequest()
	s.Group, s.MemberID, s.Generation = group, jr.MemberID, jr.Generation
	proto := "range"
	s.ProtocolType, s.Protocol = &j.ProtocolType, &proto
	a := (&kmsg.ConsumerMemberAssignment{Topics: []kmsg.ConsumerMemberAssignmentTopic{{Topic: "tls-bench", Partitions: []int32{0}}}}).AppendTo(nil)
	s.GroupAssignment = []kmsg.SyncGroupRequestGroupAssignment{{MemberID: jr.MemberID, MemberAssignment: a}}
	sr, err := s.RequestWith(ctx, cl)
	if err != nil {
		return tlsMember{}, err
	}
	if err := kerr.ErrorForCode(sr.ErrorCode); err != nil {
		return tlsMember{}, fmt.Errorf("sync %s: %w", group, err)
	}
	return tlsMember{group: group, id: jr.MemberID, gen: jr.Generation}, nil
}

func (bc *tlsBench) heartbeat(ctx context.Context, cl *kgo.Client, m tlsMember) error {
	r := kmsg.NewPtrHeartbeatRequest()
	r.Group, r.MemberID, r.Generation = m.group, m.id, m.gen
	resp, err := r.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.ErrorCode)
}

func (bc *tlsBench) commit(ctx context.Context, cl *kgo.Client, m tlsMember) error {
	r := kmsg.NewPtrOffsetCommitRequest()
	r.Group, r.MemberID, r.Generation = m.group, m.id, m.gen
	t := kmsg.NewOffsetCommitRequestTopic()
	t.Topic = "tls-bench"
	p := kmsg.NewOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset = 0, bc.offset.Add(1)
	t.Partitions = append(t.Partitions, p)
	r.Topics = append(r.Topics, t)
	resp, err := r.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// run sends b.N requests from tlsWorkers goroutines and reports their rate.
func (bc *tlsBench) run(b *testing.B, unit string, do func(context.Context, *kgo.Client, tlsMember) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range tlsWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := bc.clients[w%tlsClients]
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := do(ctx, cl, bc.members[i%tlsGroups]); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), unit)
}

func (bc *tlsBench) close() {
	for _, cl := range bc.clients {
		cl.Close()
	}
}
