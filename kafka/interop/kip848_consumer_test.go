package interop

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// consumer848 is one unmodified kgo consumer in this process, using the
// consumer group protocol (kgo.ServerSideBalancer with the default
// cooperative-sticky balancer, so the "uniform" server assignor), or the
// classic one with the balancers of consumerOpts.classic. It writes
// its ownership to the shared log from its callbacks, samples its member
// epoch, and commits made-up offsets (the targets hold no records) for the
// partitions it owns, keeping the acknowledged ones in the commit book.
type consumer848 struct {
	name  string
	topic string
	log   *ownLog
	book  *commitBook
	cl    *kgo.Client
	// classic: the consumer uses the classic protocol (consumerOpts.classic).
	classic bool

	// mu guards owned. A commit holds it for its whole round trip and the
	// revoked and lost callbacks take it first, so an offset is committed
	// only for a partition the consumer owns until the commit is answered.
	mu    sync.Mutex
	owned map[int32]bool

	fellBack atomic.Bool // kgo fell back to the classic protocol
	// unreleased counts joins refused with UNRELEASED_INSTANCE_ID (another
	// member still holds the instance id).
	unreleased atomic.Int64
	lg         *noteLogger

	// manageErrs are the errors that ended a group session (kgo's
	// OnGroupManageError hook: a refused join, a fatal heartbeat error),
	// and refusals the joins or heartbeats refused with
	// GROUP_ID_NOT_FOUND or INCONSISTENT_GROUP_PROTOCOL, whatever kgo made
	// of them.
	errMu      sync.Mutex
	manageErrs []timedErr
	refusals   []timedErr

	stop     chan struct{}
	bg       sync.WaitGroup
	refused  atomic.Int64 // commits the target refused during churn
	leaveErr error        // what the target answered to the leave
}

type consumerOpts struct {
	// classic: the consumer uses the classic protocol with these
	// balancers (kgo.Balancers) instead of kgo.ServerSideBalancer.
	classic    []kgo.GroupBalancer
	instanceID string // static membership when set
	// background commits every interval while the consumer runs (0: none).
	commitEvery time.Duration
}

func startConsumer848(t *testing.T, tg *target848, group, topic, name string, log *ownLog, book *commitBook, o consumerOpts) *consumer848 {
	t.Helper()
	c := &consumer848{name: name, topic: topic, log: log, book: book, classic: o.classic != nil, owned: map[int32]bool{}, stop: make(chan struct{})}
	c.lg = &noteLogger{c: c}
	opts := []kgo.Opt{
		kgo.SeedBrokers(tg.addr),
		kgo.ClientID(name),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		kgo.RebalanceTimeout(20 * time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
		kgo.WithLogger(c.lg),
		kgo.OnPartitionsAssigned(c.onAssigned),
		kgo.OnPartitionsRevoked(c.onRevoked),
		kgo.OnPartitionsLost(c.onLost),
		kgo.WithHooks(c),
	}
	if o.classic != nil {
		// The classic group's timing as the consumer protocol's.
		opts = append(opts, kgo.Balancers(o.classic...), kgo.HeartbeatInterval(heartbeat848), kgo.SessionTimeout(session848))
	} else {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	if o.instanceID != "" {
		opts = append(opts, kgo.InstanceID(o.instanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	c.cl = cl
	t.Cleanup(func() { c.close() })

	c.bg.Add(2)
	go c.poll()
	go c.sampleEpochs()
	if o.commitEvery > 0 {
		c.bg.Add(1)
		go c.commitLoop(o.commitEvery)
	}
	return c
}

// timedErr is an error kgo reported, on the ownership log's clock.
type timedErr struct {
	at  time.Duration
	err error
}

func (e timedErr) String() string { return fmt.Sprintf("%v at %v", e.err, e.at) }

// OnGroupManageError implements kgo.HookGroupManageError.
func (c *consumer848) OnGroupManageError(err error) {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	c.manageErrs = append(c.manageErrs, timedErr{c.log.now(), err})
}

// noteRefusal keeps err if it refuses the consumer the group.
func (c *consumer848) noteRefusal(err error) {
	if !errors.Is(err, kerr.GroupIDNotFound) && !errors.Is(err, kerr.InconsistentGroupProtocol) {
		return
	}
	c.errMu.Lock()
	defer c.errMu.Unlock()
	c.refusals = append(c.refusals, timedErr{c.log.now(), err})
}

// groupErrors returns the errors that ended a group session and the
// refusals (see manageErrs).
func (c *consumer848) groupErrors() (manage, refused []timedErr) {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return slices.Clone(c.manageErrs), slices.Clone(c.refusals)
}

// callbackBegins notes when a callback began and the member id and epoch
// kgo holds then (sampling the epoch for the group's log).
func (c *consumer848) callbackBegins(cl *kgo.Client) (begin time.Duration, member string, epoch int32) {
	begin = c.log.now()
	c.log.sampleEpoch(c.name, cl.GroupMetadata)
	member, epoch = cl.GroupMetadata()
	return begin, member, epoch
}

func (c *consumer848) onAssigned(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	begin, member, epoch := c.callbackBegins(cl)
	c.mu.Lock()
	for _, p := range m[c.topic] {
		c.owned[p] = true
	}
	c.mu.Unlock()
	c.record(acquire, "assigned", m[c.topic], member, epoch, begin)
}

// onRevoked commits the partitions it gives up, as a consumer finishing its
// work does, then lets them go.
func (c *consumer848) onRevoked(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	begin, member, epoch := c.callbackBegins(cl)
	ps := m[c.topic]
	c.mu.Lock()
	if len(ps) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c.commitLocked(ctx, ps)
		cancel()
	}
	for _, p := range ps {
		delete(c.owned, p)
	}
	c.mu.Unlock()
	c.record(release, "revoked", ps, member, epoch, begin)
}

// onLost drops the partitions without committing: they may have another
// owner already.
func (c *consumer848) onLost(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	begin, member, epoch := c.callbackBegins(cl)
	c.mu.Lock()
	for _, p := range m[c.topic] {
		delete(c.owned, p)
	}
	c.mu.Unlock()
	c.record(release, "lost", m[c.topic], member, epoch, begin)
}

func (c *consumer848) record(kind ownKind, cause string, ps []int32, member string, epoch int32, begin time.Duration) {
	end := c.log.now()
	evs := make([]ownEvent, 0, len(ps))
	for _, p := range ps {
		evs = append(evs, ownEvent{consumer: c.name, member: member, epoch: epoch, partition: p, kind: kind, cause: cause, begin: begin, end: end})
	}
	c.log.add(evs...)
}

func (c *consumer848) ownedNow() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return sortedKeys(c.owned)
}

// poll drains fetches as an application would (there are no records).
func (c *consumer848) poll() {
	defer c.bg.Done()
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		c.cl.PollFetches(ctx)
		cancel()
	}
}

func (c *consumer848) sampleEpochs() {
	defer c.bg.Done()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c.log.sampleEpoch(c.name, c.cl.GroupMetadata)
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
	}
}

func (c *consumer848) commitLoop(every time.Duration) {
	defer c.bg.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := c.commit(ctx); err != nil {
			c.refused.Add(1)
		}
		cancel()
	}
}

// commit commits a new offset for every partition the consumer owns. It
// returns the partitions acknowledged and the first error.
func (c *consumer848) commit(ctx context.Context) ([]int32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.commitLocked(ctx, sortedKeys(c.owned))
}

func (c *consumer848) commitLocked(ctx context.Context, ps []int32) ([]int32, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	want := map[int32]int64{}
	offs := map[string]map[int32]kgo.EpochOffset{c.topic: {}}
	for _, p := range ps {
		want[p] = c.book.nextOffset()
		offs[c.topic][p] = kgo.EpochOffset{Epoch: -1, Offset: want[p]}
	}
	var acked []int32
	var first error
	c.cl.CommitOffsetsSync(ctx, offs, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			first = err
			return
		}
		// OffsetCommit v10 answers with topic ids only.
		ids := map[[16]byte]string{}
		for _, t := range req.Topics {
			ids[t.TopicID] = t.Topic
		}
		for _, t := range resp.Topics {
			if t.Topic == "" {
				t.Topic = ids[t.TopicID]
			}
			if t.Topic != c.topic {
				continue
			}
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					if first == nil {
						first = fmt.Errorf("partition %d: %w", p.Partition, perr)
					}
					continue
				}
				off, ok := want[p.Partition]
				if !ok {
					continue
				}
				c.book.ack(p.Partition, off, c.name, req.Generation)
				acked = append(acked, p.Partition)
			}
		}
	})
	slices.Sort(acked)
	return acked, first
}

// close stops the consumer the way an application does: it leaves the
// group (kgo revokes what it owns first, which commits it), then closes
// the client. Whatever no callback released is released by the close.
func (c *consumer848) close() {
	select {
	case <-c.stop:
		return
	default:
	}
	close(c.stop)
	c.bg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	c.leaveErr = c.cl.LeaveGroupContext(ctx)
	cancel()
	member, epoch := c.cl.GroupMetadata()
	c.cl.Close()
	at := c.log.now()
	c.mu.Lock()
	left := sortedKeys(c.owned)
	clear(c.owned)
	c.mu.Unlock()
	c.record(release, "closed", left, member, epoch, at)
}

// noteLogger keeps what kgo says at Warn and above, and the Info messages
// about the group's protocol and the leave, for failure messages; it
// notices kgo falling back to the classic protocol.
type noteLogger struct {
	c     *consumer848
	mu    sync.Mutex
	notes []string
}

func (*noteLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (l *noteLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if strings.Contains(msg, "falling back to standard consumer group management") {
		l.c.fellBack.Store(true)
	}
	for _, v := range keyvals {
		if err, ok := v.(error); ok {
			if errors.Is(err, kerr.UnreleasedInstanceID) {
				l.c.unreleased.Add(1)
			}
			l.c.noteRefusal(err)
		}
	}
	keep := level <= kgo.LogLevelWarn || strings.Contains(msg, "heartbeat error") || strings.Contains(msg, "leav")
	// kgo warns after every commit of offsets it did not consume itself
	// (there are no records here); that says nothing about the group.
	if !keep || strings.Contains(msg, "after our group session has ended") {
		return
	}
	var kv []string
	for i := 0; i+1 < len(keyvals); i += 2 {
		if k, _ := keyvals[i].(string); k == "err" || k == "member_id" || k == "generation" {
			kv = append(kv, fmt.Sprintf("%s=%v", k, keyvals[i+1]))
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	note := fmt.Sprintf("%s: %s %s", l.c.name, msg, strings.Join(kv, " "))
	if len(l.notes) < 20 && !slices.Contains(l.notes, note) {
		l.notes = append(l.notes, note)
	}
}

func notes(cs []*consumer848) []string {
	var out []string
	for _, c := range cs {
		c.lg.mu.Lock()
		out = append(out, c.lg.notes...)
		c.lg.mu.Unlock()
	}
	return out
}

// ---------------------------------------------------------------------------
// Commits.

// commitBook hands out increasing offsets, so a later commit of a
// partition carries a larger offset, and keeps the largest acknowledged one
// per partition.
type commitBook struct {
	mu    sync.Mutex
	next  int64
	acked map[int32]ackedCommit
	count int
}

type ackedCommit struct {
	offset   int64
	consumer string
	epoch    int32 // the generation (member epoch) the commit carried
}

func newCommitBook() *commitBook { return &commitBook{next: 1000, acked: map[int32]ackedCommit{}} }

func (b *commitBook) nextOffset() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	return b.next
}

func (b *commitBook) ack(p int32, off int64, consumer string, epoch int32) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.count++
	if off > b.acked[p].offset {
		b.acked[p] = ackedCommit{offset: off, consumer: consumer, epoch: epoch}
	}
}

// check fetches the group's offsets (as an admin: no member id) and fails
// the test for every acknowledged commit not found: a partition whose
// committed offset is below the largest acknowledged one.
func (b *commitBook) check(t *testing.T, tg *target848, group, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait848)
	defer cancel()
	got, err := tg.adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("%s: OffsetFetch: %v", tg.name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.acked) == 0 {
		t.Fatalf("%s: no commit was acknowledged", tg.name)
	}
	var lost []string
	for _, p := range slices.Sorted(maps.Keys(b.acked)) {
		a := b.acked[p]
		o, ok := got.Lookup(topic, p)
		switch {
		case !ok:
			lost = append(lost, fmt.Sprintf("partition %d: no offset, acknowledged %d (%s, epoch %d)", p, a.offset, a.consumer, a.epoch))
		case o.Err != nil:
			lost = append(lost, fmt.Sprintf("partition %d: %v", p, o.Err))
		case o.At < a.offset:
			lost = append(lost, fmt.Sprintf("partition %d: offset %d, acknowledged %d (%s, epoch %d)", p, o.At, a.offset, a.consumer, a.epoch))
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%s: acknowledged commits not found: %s", tg.name, strings.Join(lost, "; "))
	}
	t.Logf("%s: %d commits acknowledged, the last of each of %d partitions found", tg.name, b.count, len(b.acked))
}

// commitAll has every consumer commit what it owns, in a stable group:
// every commit must be acknowledged, and together they cover all n
// partitions.
func commitAll(t *testing.T, tg *target848, cs []*consumer848, n int32, step string) {
	t.Helper()
	seen := map[int32]bool{}
	for _, c := range cs {
		ctx, cancel := context.WithTimeout(context.Background(), wait848)
		acked, err := c.commit(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%s: %s: %s's commit in a stable group: %v", tg.name, step, c.name, err)
		}
		for _, p := range acked {
			seen[p] = true
		}
	}
	if len(seen) != int(n) {
		t.Fatalf("%s: %s: commits acknowledged for %d partitions, want %d", tg.name, step, len(seen), n)
	}
}

// ---------------------------------------------------------------------------
// End of scenario checks.

// checkLog fails the test on any overlap, any contradiction in the log and
// any member epoch that went down.
func checkLog(t *testing.T, tg *target848, log *ownLog) {
	t.Helper()
	evs, epochs := log.snapshot()
	o := readOwnership(evs)
	var bad []string
	for _, ov := range o.overlaps() {
		bad = append(bad, "overlap: "+ov.String())
	}
	for _, p := range o.problems {
		bad = append(bad, "log: "+p)
	}
	for _, r := range epochRegressions(epochs) {
		bad = append(bad, "epoch went down: "+r)
	}
	if len(bad) > 0 {
		t.Fatalf("%s: %d findings:\n%s", tg.name, len(bad), strings.Join(bad, "\n"))
	}
	t.Logf("%s: %d ownership events, %d members sampled, 0 overlaps, no epoch went down", tg.name, len(evs), len(epochs))
}
