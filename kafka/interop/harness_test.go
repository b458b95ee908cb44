package interop

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/kafka"
	"github.com/cohort-coord/cohort/kafka/interop/clients"
)

const (
	partitions = 6
	members    = 3
	session    = 6 * time.Second
)

func TestMain(m *testing.M) {
	switch os.Getenv("COHORT_INTEROP_CLIENT") {
	case "franz":
		os.Exit(runFranz())
	case "sarama":
		os.Exit(runSarama())
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// need skips the test locally, or fails it in CI (CI=true), when a
// prerequisite is missing.
func need(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// ---------------------------------------------------------------------------
// The server: a cohortd process.

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// moduleRoot is the folder of the cohort module, where cohortd is built
// with cohort's own go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/cohort-coord/cohort").Output()
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

func buildCohortd(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := moduleRoot()
		if err != nil {
			buildErr = err
			return
		}
		binDir, err = os.MkdirTemp("", "cohort-interop-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(binDir, "cohortd")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/cohortd")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/cohortd: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

type server struct {
	addr  string
	mu    sync.Mutex
	joins map[string][]int // client id -> JoinGroup versions seen
	// Ownership guard decisions logged: rounds that withheld partitions and
	// follow-up rebalances.
	withheldRounds, followUps int
}

var (
	listeningRe = regexp.MustCompile(`msg=listening .*listener=kafka addr=(\S+)`)
	joinRe      = regexp.MustCompile(`msg="join group".* version=(\d+) client_id=(\S+)`)
)

func (s *server) scanLog(r io.Reader, addrCh chan<- string, t *testing.T) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		if m := listeningRe.FindStringSubmatch(line); m != nil && !sent {
			addrCh <- m[1]
			sent = true
		}
		if m := joinRe.FindStringSubmatch(line); m != nil {
			v, _ := strconv.Atoi(m[1])
			s.mu.Lock()
			s.joins[m[2]] = append(s.joins[m[2]], v)
			s.mu.Unlock()
		}
		if strings.Contains(line, "ownership guard withheld") {
			s.mu.Lock()
			s.withheldRounds++
			s.mu.Unlock()
		}
		if strings.Contains(line, "ownership guard starts a follow-up") {
			s.mu.Lock()
			s.followUps++
			s.mu.Unlock()
		}
		if strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN") {
			t.Logf("cohortd: %s", line)
		}
	}
}

// joinVersions returns the distinct JoinGroup versions sent by client ids
// starting with prefix.
func (s *server) joinVersions(prefix string) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []int
	for id, vs := range s.joins {
		if strings.HasPrefix(id, prefix) {
			for _, v := range vs {
				if !slices.Contains(out, v) {
					out = append(out, v)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// startCohort starts a cohortd for the test. With COHORT_INTEROP_LOG_DIR
// set, its whole log is also written to <dir>/<test name>.log.
func startCohort(t *testing.T, extra ...string) *server {
	t.Helper()
	bin := buildCohortd(t)
	s := &server{joins: map[string][]int{}}
	args := append([]string{
		"--kafka-addr", "127.0.0.1:0",
		"--remote-addr", "127.0.0.1:0",
		"--raft-addr", "127.0.0.1:0",
		"--http-addr", "",
		"--data-dir", t.TempDir(),
		"--group-initial-rebalance-delay", "0s",
		"--group-min-session-timeout", "1s",
		"--log-level", "debug",
	}, extra...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logR io.Reader = stderr
	if dir := os.Getenv("COHORT_INTEROP_LOG_DIR"); dir != "" {
		// Keep cohortd's whole log (debug level) for reading afterwards.
		f, err := os.Create(filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())+".log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		logR = io.TeeReader(stderr, f)
	}
	addrCh := make(chan string, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		s.scanLog(logR, addrCh, t)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Error("cohortd did not stop on SIGTERM within 10s")
		}
		<-logDone
	})
	select {
	case s.addr = <-addrCh:
	case <-time.After(30 * time.Second):
		t.Fatal("cohortd did not log its Kafka listener address")
	}
	return s
}

// ---------------------------------------------------------------------------
// Admin calls from the test itself (franz-go, no group).

func adminClient(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ClientID("interop-admin"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// createTopic creates the topic, retrying while the node is still starting
// (electing itself leader of its single-node cluster).
func createTopic(t *testing.T, cl *kgo.Client, topic string, n int32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for attempt := 0; ; attempt++ {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, n, 1
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err == nil && (resp.Topics[0].ErrorCode == 0 || (attempt > 0 && resp.Topics[0].ErrorCode == 36)) { // 36: created by an earlier attempt
			return
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("error %d", resp.Topics[0].ErrorCode)
			}
			t.Fatalf("create topic %s: %v", topic, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type described struct {
	state   string
	gen     int32
	members map[string][]int32 // member id -> partitions of the topic
}

func describe(ctx context.Context, cl *kgo.Client, group, topic string) (described, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return described{}, err
	}
	g := resp.Groups[0]
	if g.ErrorCode != 0 {
		return described{}, fmt.Errorf("describe: error %d", g.ErrorCode)
	}
	d := described{state: g.State, gen: -1, members: map[string][]int32{}}
	if gen, ok := kafka.GenerationFromTags(g.UnknownTags); ok {
		d.gen = gen
	}
	for _, m := range g.Members {
		var a kmsg.ConsumerMemberAssignment
		var ps []int32
		if len(m.MemberAssignment) > 0 {
			if err := a.ReadFrom(m.MemberAssignment); err != nil {
				return described{}, fmt.Errorf("member %s assignment: %w", m.MemberID, err)
			}
			for _, t := range a.Topics {
				if t.Topic == topic {
					ps = append(ps, t.Partitions...)
				}
			}
		}
		slices.Sort(ps)
		d.members[m.MemberID] = ps
	}
	return d, nil
}

func fetchOffsets(t *testing.T, cl *kgo.Client, group, topic string) map[int32]int64 {
	t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for p := range partitions {
		rt.Partitions = append(rt.Partitions, int32(p))
	}
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			out[p.Partition] = p.Offset
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Client processes.

// proc is one client process (kafka/interop/clients drives it) bound to
// the test that started it: failures fail the test.
type proc struct {
	*clients.Proc
	t    *testing.T
	name string
}

func startProc(t *testing.T, name string, argv []string, env []string) *proc {
	t.Helper()
	cp, err := clients.StartCommand(name, argv, env, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !cp.Exited() {
			cp.Kill()
		}
	})
	return &proc{Proc: cp, t: t, name: name}
}

// state is the client's latest report: what it owns, its generation (-1
// when the library does not say), member id and how many reports so far.
func (p *proc) state() (owned []int32, gen int64, member string, reports int) {
	reps := p.Reports()
	if len(reps) == 0 {
		return nil, -1, "", 0
	}
	r := reps[len(reps)-1]
	return r.Owned, r.Gen, r.Member, len(reps)
}

// request sends a command and waits for the reply carrying key.
func (p *proc) request(cmd, key string, timeout time.Duration) map[string]any {
	p.t.Helper()
	m, err := p.Request(cmd, key, timeout)
	if err != nil {
		p.t.Fatalf("%v\nstderr: %s", err, p.StderrTail())
	}
	return m
}

// closeGracefully asks the client to close (leaving the group if it is
// dynamic) and waits for it to exit.
func (p *proc) closeGracefully(timeout time.Duration) {
	p.t.Helper()
	if err := p.Close(timeout); err != nil {
		p.t.Fatalf("%v\nstderr: %s", err, p.StderrTail())
	}
}

func (p *proc) kill() { p.Kill() }

// ---------------------------------------------------------------------------
// The scenario every family runs.

type family struct {
	name     string
	assignor string
	static   bool
	argv     func(t *testing.T) []string // command line of one client
	env      []string                    // extra environment
}

// waitStable waits until the group is Stable with exactly the given clients
// as members, every partition has exactly one owner in DescribeGroups, and
// each client's own view (from its assignment callbacks) equals the
// assignment DescribeGroups shows for it. It returns the generation.
func waitStable(t *testing.T, cl *kgo.Client, group, topic string, clients []*proc, timeout time.Duration) int32 {
	t.Helper()
	return waitGroup(t, cl, group, topic, clients, timeout, func(d described) string { return checkStable(d, clients) })
}

// waitGroup polls DescribeGroups until check finds nothing missing ("")
// and returns the generation; after timeout it fails the test with what
// check said last and every client's own view.
func waitGroup(t *testing.T, cl *kgo.Client, group, topic string, clients []*proc, timeout time.Duration, check func(described) string) int32 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d, err := describe(ctx, cl, group, topic)
		cancel()
		if err != nil {
			why = err.Error()
			continue
		}
		if why = check(d); why == "" {
			return d.gen
		}
	}
	var views []string
	for _, c := range clients {
		owned, gen, member, n := c.state()
		views = append(views, fmt.Sprintf("%s owned=%v gen=%d member=%s reports=%d", c.name, owned, gen, member, n))
	}
	t.Fatalf("group %s not settled within %v: %s\nclients: %s", group, timeout, why, strings.Join(views, "; "))
	return 0
}

func checkStable(d described, procs []*proc) string {
	cs := make([]*clients.Proc, len(procs))
	for i, p := range procs {
		cs[i] = p.Proc
	}
	return clients.Settled(d.state, d.gen, d.members, partitions, cs)
}

func runFamily(t *testing.T, fam family) {
	if testing.Short() {
		t.Skip("interop tests run without -short")
	}
	srv := startCohort(t)
	admin := adminClient(t, srv.addr)
	topic, group := "it-"+fam.name, "group-"+fam.name
	createTopic(t, admin, topic, partitions)

	var clients []*proc
	for i := range members {
		id := fmt.Sprintf("%s-%d", fam.name, i)
		env := append([]string{
			"BOOTSTRAP=" + srv.addr, "GROUP=" + group, "TOPIC=" + topic, "CLIENT_ID=" + id,
			"PARTITIONS=" + strconv.Itoa(partitions), "SESSION_MS=" + strconv.Itoa(int(session.Milliseconds())),
			"ASSIGNOR=" + fam.assignor,
		}, fam.env...)
		if fam.static {
			env = append(env, "INSTANCE_ID="+id)
		}
		clients = append(clients, startProc(t, id, fam.argv(t), env))
	}

	// 1. A stable generation with exclusive, complete ownership.
	gen1 := waitStable(t, admin, group, topic, clients, 60*time.Second)
	if gen1 <= 0 {
		t.Fatalf("generation %d", gen1)
	}

	// 2. Every member commits its partitions in this generation.
	committed := map[string]bool{}
	for _, c := range clients {
		m := c.request("commit", "committed_own", 30*time.Second)
		for p := range m["committed_own"].(map[string]any) {
			committed[p] = true
		}
	}
	if len(committed) != partitions {
		t.Fatalf("members committed %d partitions, want %d", len(committed), partitions)
	}
	for p, off := range fetchOffsets(t, admin, group, topic) {
		if off != 100+int64(p) {
			t.Fatalf("partition %d: committed offset %d, want %d", p, off, 100+p)
		}
	}

	// 3. One member closes, another is killed; the last takes everything over
	// within the session timeout plus 5 s.
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		clients[0].request("close", "closed", 30*time.Second)
	}()
	clients[1].kill()
	killed := time.Now()
	gen2 := waitStable(t, admin, group, topic, clients[2:], session+5*time.Second)
	t.Logf("%s: takeover after %v, generation %d -> %d", fam.name, time.Since(killed).Round(100*time.Millisecond), gen1, gen2)
	<-closed
	if gen2 <= gen1 {
		t.Fatalf("generation %d after takeover, was %d", gen2, gen1)
	}

	// 4. The survivor, in the new generation, fetches what the previous one
	// committed.
	m := clients[2].request("fetch", "committed", 30*time.Second)
	got := m["committed"].(map[string]any)
	for p := range partitions {
		off, _ := got[strconv.Itoa(p)].(float64)
		if int64(off) != 100+int64(p) {
			t.Fatalf("survivor fetched %v for partition %d, want %d (all: %v)", got[strconv.Itoa(p)], p, 100+p, got)
		}
	}
	clients[2].closeGracefully(30 * time.Second)

	vs := srv.joinVersions(fam.name + "-")
	if len(vs) == 0 {
		t.Fatalf("no JoinGroup seen from %s clients", fam.name)
	}
	t.Logf("%s: JoinGroup versions used: %v", fam.name, vs)
	recordVersions(fam.name, vs)
}

var (
	versionsMu sync.Mutex
	versions   = map[string][]int{}
)

func recordVersions(name string, vs []int) {
	versionsMu.Lock()
	defer versionsMu.Unlock()
	versions[name] = vs
}

func lastVersions(name string) []int {
	versionsMu.Lock()
	defer versionsMu.Unlock()
	return versions[name]
}
