package interop

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The Go client families run as child processes of the test binary (see
// TestMain), so that "kill" is a real process kill for every family. They
// speak the same stdin/stdout protocol as the scripts in testdata.

type clientEnv struct {
	bootstrap, group, topic, clientID, assignor string
	partitions                                  int
	session                                     time.Duration
}

func readClientEnv() clientEnv {
	parts, _ := strconv.Atoi(os.Getenv("PARTITIONS"))
	ms, _ := strconv.Atoi(os.Getenv("SESSION_MS"))
	return clientEnv{
		bootstrap:  os.Getenv("BOOTSTRAP"),
		group:      os.Getenv("GROUP"),
		topic:      os.Getenv("TOPIC"),
		clientID:   os.Getenv("CLIENT_ID"),
		assignor:   os.Getenv("ASSIGNOR"),
		partitions: parts,
		session:    time.Duration(ms) * time.Millisecond,
	}
}

var emitMu sync.Mutex

func emit(v map[string]any) {
	emitMu.Lock()
	defer emitMu.Unlock()
	b, _ := json.Marshal(v)
	os.Stdout.Write(append(b, '\n'))
}

func stdinCommands() <-chan string {
	ch := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			ch <- sc.Text()
		}
		close(ch)
	}()
	return ch
}

// commitBase is the B of "commit B": partition p is committed at B+p. A
// bare "commit" commits 100+p.
func commitBase(args string) int64 {
	if b, err := strconv.ParseInt(strings.TrimSpace(args), 10, 64); err == nil {
		return b
	}
	return 100
}

func sortedKeys(m map[int32]bool) []int32 {
	var out []int32
	for p, ok := range m {
		if ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// rejectLogger reports every JoinGroup refused with
// INCONSISTENT_GROUP_PROTOCOL (kgo logs it and retries), and the
// authorization and authentication errors kgo logs.
type rejectLogger struct{}

func (rejectLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (rejectLogger) Log(_ kgo.LogLevel, msg string, keyvals ...any) {
	for _, v := range keyvals {
		err, ok := v.(error)
		if !ok {
			continue
		}
		if strings.Contains(err.Error(), "INCONSISTENT_GROUP_PROTOCOL") {
			emit(map[string]any{"rejected": msg})
			return
		}
		if strings.Contains(err.Error(), "AUTHORIZATION_FAILED") || strings.Contains(err.Error(), "SASL_AUTHENTICATION_FAILED") {
			emit(map[string]any{"log": msg + ": " + err.Error()})
			return
		}
	}
}

func runFranz() int {
	e := readClientEnv()
	var (
		mu    sync.Mutex
		owned = map[int32]bool{}
		cl    *kgo.Client
	)
	report := func(cl *kgo.Client, event string) {
		member, gen := cl.GroupMetadata()
		emit(map[string]any{"owned": sortedKeys(owned), "gen": gen, "member": member, "event": event})
	}
	// ASSIGNOR is a comma-separated list in preference order.
	var balancers []kgo.GroupBalancer
	for _, name := range strings.Split(e.assignor, ",") {
		switch strings.TrimSpace(name) {
		case "cooperative-sticky":
			balancers = append(balancers, kgo.CooperativeStickyBalancer())
		case "sticky":
			balancers = append(balancers, kgo.StickyBalancer())
		case "roundrobin":
			balancers = append(balancers, kgo.RoundRobinBalancer())
		default:
			balancers = append(balancers, kgo.RangeBalancer())
		}
	}
	// Ownership events, timestamped: an assignment starts when its callback
	// is called, a revocation ends when its callback returns. REVOKE_MS
	// makes revocations take that long (finishing work, committing).
	revokeMs, _ := strconv.Atoi(os.Getenv("REVOKE_MS"))
	event := func(kind string, ps []int32, t time.Time) {
		emit(map[string]any{"ev": kind, "parts": ps, "t": t.UnixNano()})
	}
	secOpts, err := franzSecurity()
	if err != nil {
		emit(map[string]any{"error": err.Error()})
		return 1
	}
	cl, err = kgo.NewClient(append(secOpts,
		kgo.SeedBrokers(strings.Split(e.bootstrap, ",")...),
		kgo.ClientID(e.clientID),
		kgo.ConsumerGroup(e.group),
		kgo.ConsumeTopics(e.topic),
		kgo.Balancers(balancers...),
		kgo.WithLogger(rejectLogger{}),
		kgo.SessionTimeout(e.session),
		kgo.RebalanceTimeout(10*time.Second),
		kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, c *kgo.Client, m map[string][]int32) {
			start := time.Now()
			mu.Lock()
			defer mu.Unlock()
			event("assigned", m[e.topic], start)
			for _, p := range m[e.topic] {
				owned[p] = true
			}
			report(c, "assigned")
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, c *kgo.Client, m map[string][]int32) {
			if len(m[e.topic]) > 0 {
				time.Sleep(time.Duration(revokeMs) * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, p := range m[e.topic] {
				delete(owned, p)
			}
			event("revoked", m[e.topic], time.Now())
			report(c, "revoked")
		}),
		kgo.OnPartitionsLost(func(_ context.Context, c *kgo.Client, m map[string][]int32) {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range m[e.topic] {
				delete(owned, p)
			}
			event("lost", m[e.topic], time.Now())
			report(c, "lost")
		}))...,
	)
	if err != nil {
		emit(map[string]any{"error": err.Error()})
		return 1
	}
	emit(map[string]any{"hello": "franz-go kgo"})
	cmds := stdinCommands()
	ctx := context.Background()
	go func() {
		for {
			pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			fs := cl.PollFetches(pctx)
			cancel()
			for _, fe := range fs.Errors() {
				if pctx.Err() == nil {
					emit(map[string]any{"log": fe.Err.Error()})
				}
			}
			if cl.Context().Err() != nil {
				return
			}
		}
	}()
	for line := range cmds {
		cmd, args, _ := strings.Cut(line, " ")
		switch cmd {
		case "commit":
			base := commitBase(args)
			mu.Lock()
			offs := map[string]map[int32]kgo.EpochOffset{e.topic: {}}
			want := map[string]int64{}
			for _, p := range sortedKeys(owned) {
				offs[e.topic][p] = kgo.EpochOffset{Epoch: -1, Offset: base + int64(p)}
				want[strconv.Itoa(int(p))] = base + int64(p)
			}
			mu.Unlock()
			var cerr error
			cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				cerr = err
				if err == nil {
					for _, t := range resp.Topics {
						for _, p := range t.Partitions {
							if p.ErrorCode != 0 {
								cerr = fmt.Errorf("partition %d: error %d", p.Partition, p.ErrorCode)
							}
						}
					}
				}
			})
			if cerr != nil {
				emit(map[string]any{"error": cerr.Error(), "command": "commit"})
				continue
			}
			emit(map[string]any{"committed_own": want})
		case "fetch":
			req := kmsg.NewPtrOffsetFetchRequest()
			req.Group = e.group
			rt := kmsg.NewOffsetFetchRequestTopic()
			rt.Topic = e.topic
			for p := range e.partitions {
				rt.Partitions = append(rt.Partitions, int32(p))
			}
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				emit(map[string]any{"error": err.Error()})
				continue
			}
			out := map[string]int64{}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					out[strconv.Itoa(int(p.Partition))] = p.Offset
				}
			}
			emit(map[string]any{"committed": out})
		case "close":
			cl.Close() // leaves the group
			emit(map[string]any{"closed": true})
			return 0
		}
	}
	return 0
}

type saramaHandler struct {
	e    clientEnv
	mu   sync.Mutex
	sess sarama.ConsumerGroupSession
}

func (h *saramaHandler) Setup(s sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sess = s
	owned := slices.Clone(s.Claims()[h.e.topic])
	slices.Sort(owned)
	if owned == nil {
		owned = []int32{}
	}
	emit(map[string]any{"owned": owned, "gen": s.GenerationID(), "member": s.MemberID(), "event": "setup"})
	return nil
}

func (h *saramaHandler) Cleanup(s sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sess = nil
	emit(map[string]any{"owned": []int32{}, "gen": s.GenerationID(), "member": s.MemberID(), "event": "cleanup"})
	return nil
}

func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for {
		select {
		case <-c.Messages():
		case <-s.Context().Done():
			return nil
		}
	}
}

func runSarama() int {
	e := readClientEnv()
	if os.Getenv("SARAMA_LOG") == "1" {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	}
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_1_0_0 // JoinGroup v3
	cfg.ClientID = e.clientID
	cfg.Consumer.Group.Session.Timeout = e.session
	if os.Getenv("CLIENT_DEFAULTS") == "1" {
		// sarama's own heartbeat interval (3 s) and rebalance timeout
		// (60 s), as an application that sets only its session sees them.
		cfg.Version = sarama.V2_8_0_0
	} else {
		cfg.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
		cfg.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	}
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.MaxWaitTime = 500 * time.Millisecond
	if err := saramaSecurity(cfg); err != nil {
		emit(map[string]any{"error": err.Error()})
		return 1
	}
	client, err := sarama.NewClient(strings.Split(e.bootstrap, ","), cfg)
	if err != nil {
		emit(map[string]any{"error": err.Error()})
		return 1
	}
	group, err := sarama.NewConsumerGroupFromClient(e.group, client)
	if err != nil {
		emit(map[string]any{"error": err.Error()})
		return 1
	}
	emit(map[string]any{"hello": "sarama"})
	h := &saramaHandler{e: e}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := group.Consume(ctx, []string{e.topic}, h); err != nil && ctx.Err() == nil {
				emit(map[string]any{"log": err.Error()})
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	go func() {
		for err := range group.Errors() {
			emit(map[string]any{"log": err.Error()})
		}
	}()
	for line := range stdinCommands() {
		cmd, args, _ := strings.Cut(line, " ")
		switch cmd {
		case "commit":
			base := commitBase(args)
			h.mu.Lock()
			s := h.sess
			want := map[string]int64{}
			if s != nil {
				for _, p := range s.Claims()[e.topic] {
					s.MarkOffset(e.topic, p, base+int64(p), "")
					want[strconv.Itoa(int(p))] = base + int64(p)
				}
				s.Commit()
			}
			h.mu.Unlock()
			emit(map[string]any{"committed_own": want})
		case "fetch":
			om, err := sarama.NewOffsetManagerFromClient(e.group, client)
			if err != nil {
				emit(map[string]any{"error": err.Error()})
				continue
			}
			out := map[string]int64{}
			for p := range e.partitions {
				pom, err := om.ManagePartition(e.topic, int32(p))
				if err != nil {
					emit(map[string]any{"error": err.Error()})
					break
				}
				off, _ := pom.NextOffset()
				out[strconv.Itoa(p)] = off
				pom.AsyncClose()
			}
			om.Close()
			emit(map[string]any{"committed": out})
		case "close":
			cancel()
			group.Close() // leaves the group
			<-done
			client.Close()
			emit(map[string]any{"closed": true})
			return 0
		}
	}
	return 0
}
