package clustertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/admin"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

// Options configure the cohortd processes of a cluster.
type Options struct {
	// Raft timings passed to every node.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	// Args are added to every node's command line.
	Args []string
	// HTTP serves every node's operator HTTP listener (metrics, readiness,
	// status page) on a free port; off by default.
	HTTP bool
	// StartTimeout bounds how long a node may take to log its listeners.
	StartTimeout time.Duration
	// NodeArgs, when set, returns more arguments for the node with the
	// given id, read at every start (the chaos suite's proxy addresses).
	NodeArgs func(id string) []string
	// Binary, when set, is the cohortd executable to run instead of the
	// one built from ./cmd/cohortd (a build with seeded bugs).
	Binary string
}

// DefaultOptions are short raft timeouts that still hold on a loaded
// two-core machine running the race detector next to the nodes.
func DefaultOptions() Options {
	return Options{
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 250 * time.Millisecond,
		Args: []string{
			"--group-initial-rebalance-delay", "0s",
			"--group-min-session-timeout", "1s",
		},
		StartTimeout: 30 * time.Second,
	}
}

// Node is one cohortd process. The addresses are those the running (or last)
// incarnation logged; a restart reuses them.
type Node struct {
	Index      int
	ID         string
	KafkaAddr  string
	RemoteAddr string
	RaftAddr   string
	// HTTPAddr is the operator HTTP listener (with Options.HTTP).
	HTTPAddr string
	DataDir  string
	LogPath  string
	Cmd      *exec.Cmd

	mu       sync.Mutex
	addrs    map[string]string
	addrCh   chan struct{} // signalled on every listener line
	exited   chan struct{} // closed when Cmd exits
	exitErr  error
	expected bool // the harness ended or will end the process
	ready    bool // the running process logged its listeners
	starts   int
}

// Running reports whether the node's process is alive and serving.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ready && n.aliveLocked()
}

func (n *Node) alive() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.aliveLocked()
}

func (n *Node) aliveLocked() bool {
	if n.exited == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Cluster is a set of cohortd processes forming one raft cluster.
type Cluster struct {
	T      testing.TB
	Opts   Options
	Admin  *admin.Client
	bin    string
	logDir string

	mu    sync.Mutex
	Nodes []*Node
}

// StartCluster builds cohortd (once per process), bootstraps node 0 and joins
// n-1 more nodes through it, and returns when all n are voters.
func StartCluster(t testing.TB, n int, opts ...func(*Options)) *Cluster {
	t.Helper()
	o := DefaultOptions()
	for _, f := range opts {
		f(&o)
	}
	bin, err := o.Binary, error(nil)
	if bin == "" {
		bin, err = Binary("./cmd/cohortd")
	}
	if err != nil {
		t.Fatal(err)
	}
	adm, err := SharedAdmin()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{T: t, Opts: o, Admin: adm, bin: bin, logDir: t.TempDir()}
	t.Cleanup(c.cleanup)

	first := c.newNode()
	c.startNode(first, []string{"--bootstrap"})
	c.WaitLeader(20 * time.Second)
	var rest []*Node
	for i := 1; i < n; i++ {
		rest = append(rest, c.newNode())
	}
	var wg sync.WaitGroup
	errs := make([]error, len(rest))
	for i, nd := range rest {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.launch(nd, []string{"--join", first.RemoteAddr})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	c.WaitVoters(c.ids(), 30*time.Second)
	return c
}

func (c *Cluster) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, n := range c.Nodes {
		ids = append(ids, n.ID)
	}
	return ids
}

func (c *Cluster) newNode() *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := len(c.Nodes)
	id := fmt.Sprintf("node%d", i+1)
	dir := filepath.Join(c.logDir, id)
	n := &Node{
		Index:      i,
		ID:         id,
		DataDir:    filepath.Join(dir, "data"),
		LogPath:    filepath.Join(c.logDir, id+".log"),
		KafkaAddr:  "127.0.0.1:0",
		RemoteAddr: "127.0.0.1:0",
		RaftAddr:   "127.0.0.1:0",
	}
	c.Nodes = append(c.Nodes, n)
	return n
}

// Node returns node i.
func (c *Cluster) Node(i int) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Nodes[i]
}

// Running returns the nodes whose processes are alive.
func (c *Cluster) Running() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Node
	for _, n := range c.Nodes {
		if n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// NameOf returns the id of the node with the given Kafka, remote or raft
// address, or addr itself when no node has it.
func (c *Cluster) NameOf(addr string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.Nodes {
		if n.KafkaAddr == addr || n.RemoteAddr == addr || n.RaftAddr == addr {
			return n.ID + "(" + addr + ")"
		}
	}
	return addr
}

// KafkaAddrs returns the Kafka addresses of the running nodes, as bootstrap
// servers for clients.
func (c *Cluster) KafkaAddrs() []string {
	var out []string
	for _, n := range c.Running() {
		out = append(out, n.KafkaAddr)
	}
	return out
}

func (c *Cluster) startNode(n *Node, extra []string) {
	c.T.Helper()
	if err := c.launch(n, extra); err != nil {
		c.T.Fatal(err)
	}
}

// launch starts n's process and waits until it logged its remote, kafka and
// raft listeners.
func (c *Cluster) launch(n *Node, extra []string) error {
	args := []string{
		"--node-id", n.ID,
		"--data-dir", n.DataDir,
		"--remote-addr", n.RemoteAddr,
		"--kafka-addr", n.KafkaAddr,
		"--raft-addr", n.RaftAddr,
		"--raft-heartbeat-timeout", c.Opts.HeartbeatTimeout.String(),
		"--raft-election-timeout", c.Opts.ElectionTimeout.String(),
		"--raft-leader-lease-timeout", c.Opts.LeaderLeaseTimeout.String(),
		"--http-addr", n.httpBind(c.Opts.HTTP),
	}
	args = append(args, c.Opts.Args...)
	if c.Opts.NodeArgs != nil {
		args = append(args, c.Opts.NodeArgs(n.ID)...)
	}
	args = append(args, extra...)
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.starts++
	fmt.Fprintf(f, "=== start %d: cohortd %s\n", n.starts, strings.Join(args, " "))
	n.addrs = map[string]string{}
	n.addrCh = make(chan struct{}, 1)
	n.expected, n.ready = false, false
	n.exitErr = nil
	n.mu.Unlock()

	cmd := exec.Command(c.bin, args...)
	cmd.Env = cleanEnv()
	lw := &lineWriter{f: f, onLine: n.onLine}
	cmd.Stdout, cmd.Stderr = lw, lw
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", n.ID, err)
	}
	exited := make(chan struct{})
	n.mu.Lock()
	n.Cmd, n.exited = cmd, exited
	n.mu.Unlock()
	go func() {
		err := cmd.Wait()
		lw.flush()
		fmt.Fprintf(f, "=== exit: %v\n", err)
		f.Close()
		n.mu.Lock()
		n.exitErr = err
		n.mu.Unlock()
		close(exited)
	}()

	deadline := time.NewTimer(c.Opts.StartTimeout)
	defer deadline.Stop()
	for {
		n.mu.Lock()
		r, k, a, h := n.addrs["remote"], n.addrs["kafka"], n.addrs["raft"], n.addrs["http"]
		ch := n.addrCh
		n.mu.Unlock()
		if r != "" && k != "" && a != "" && (h != "" || !c.Opts.HTTP) {
			n.mu.Lock()
			// A restart logs the same addresses: write only what changed,
			// since tests read these fields without the lock.
			if n.RemoteAddr != r || n.KafkaAddr != k || n.RaftAddr != a {
				n.RemoteAddr, n.KafkaAddr, n.RaftAddr = r, k, a
			}
			if h != "" && n.HTTPAddr != h {
				n.HTTPAddr = h
			}
			n.ready = true
			n.mu.Unlock()
			return nil
		}
		select {
		case <-ch:
		case <-exited:
			return fmt.Errorf("%s exited before listening (%v); log tail:\n%s", n.ID, n.exitErr, tail(n.LogPath, 30))
		case <-deadline.C:
			return fmt.Errorf("%s did not log its listeners within %v (have %v); log tail:\n%s", n.ID, c.Opts.StartTimeout, n.addrs, tail(n.LogPath, 30))
		}
	}
}

var (
	listenerRe  = regexp.MustCompile(`(?:^| )listener=(\S+)`)
	componentRe = regexp.MustCompile(`(?:^| )component=(\S+)`)
	addrRe      = regexp.MustCompile(`(?:^| )addr=(\S+)`)
)

func (n *Node) onLine(line string) {
	if !strings.Contains(line, "msg=listening") {
		return
	}
	name := ""
	if m := listenerRe.FindStringSubmatch(line); m != nil {
		name = m[1]
	} else if m := componentRe.FindStringSubmatch(line); m != nil {
		name = m[1]
	}
	a := addrRe.FindStringSubmatch(line)
	if name == "" || a == nil {
		return
	}
	n.mu.Lock()
	n.addrs[name] = a[1]
	select {
	case n.addrCh <- struct{}{}:
	default:
	}
	n.mu.Unlock()
}

// httpBind is the --http-addr of n's next start: off unless asked, then
// the address it had (a restart keeps it), or a free port.
func (n *Node) httpBind(on bool) string {
	switch {
	case !on:
		return ""
	case n.HTTPAddr != "":
		return n.HTTPAddr
	}
	return "127.0.0.1:0"
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COHORT_") {
			env = append(env, kv)
		}
	}
	return env
}

// Kill ends node i with SIGKILL and waits for it to exit.
func (c *Cluster) Kill(i int) {
	n := c.Node(i)
	if !n.alive() {
		return
	}
	n.mu.Lock()
	n.expected = true
	n.mu.Unlock()
	n.Cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
}

// Stop ends node i with SIGTERM (graceful: it hands leadership over first)
// and waits up to 20 s for it to exit. After that it fails the test and ends
// the process with SIGQUIT, so the log shows where it hung.
func (c *Cluster) Stop(i int) {
	c.T.Helper()
	n := c.Node(i)
	if !n.alive() {
		return
	}
	n.mu.Lock()
	n.expected = true
	n.mu.Unlock()
	n.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(20 * time.Second):
		// SIGQUIT makes the Go runtime write every goroutine's stack to
		// the log before it exits.
		n.Cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-n.exited:
		case <-time.After(5 * time.Second):
			n.Cmd.Process.Signal(syscall.SIGKILL)
			<-n.exited
		}
		c.T.Errorf("%s did not exit within 20s of SIGTERM; its goroutines are in %s", n.ID, n.LogPath)
	}
}

// ExpectExit marks node i's process as allowed to exit on its own (a node
// removed from the cluster may shut itself down).
func (c *Cluster) ExpectExit(i int) {
	n := c.Node(i)
	n.mu.Lock()
	n.expected = true
	n.mu.Unlock()
}

// Restart starts node i again on its data directory and addresses. It asks
// a running node to add it (which is a no-op for a member).
func (c *Cluster) Restart(i int) {
	c.T.Helper()
	n := c.Node(i)
	if n.alive() {
		c.T.Fatalf("restart %s: still running", n.ID)
	}
	var extra []string
	for _, o := range c.Running() {
		extra = []string{"--join", o.RemoteAddr}
		break
	}
	c.startNode(n, extra)
}

// AddNode starts a new node that joins through the current leader and waits
// until it is a voter.
func (c *Cluster) AddNode() *Node {
	c.T.Helper()
	leader := c.WaitLeader(20 * time.Second)
	n := c.newNode()
	c.startNode(n, []string{"--join", leader.RemoteAddr})
	var voters []string
	for _, o := range c.Nodes {
		if o.Running() {
			voters = append(voters, o.ID)
		}
	}
	c.WaitVoters(voters, 30*time.Second)
	return n
}

// StatusOf asks every given node for its status concurrently; a node that
// does not answer has a nil entry and an error.
func (c *Cluster) StatusOf(nodes []*Node, timeout time.Duration) ([]*clusterpb.StatusResponse, []error) {
	sts := make([]*clusterpb.StatusResponse, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sts[i], errs[i] = status(c.Admin, n.RemoteAddr, timeout)
		}()
	}
	wg.Wait()
	return sts, errs
}

// Leader polls the running nodes once and returns the one that reports
// itself leader with the highest term, or nil.
func (c *Cluster) Leader() *Node {
	nodes := c.Running()
	sts, _ := c.StatusOf(nodes, 2*time.Second)
	var best *Node
	var term uint64
	for i, st := range sts {
		if st != nil && st.State == "Leader" && (best == nil || st.Term > term) {
			best, term = nodes[i], st.Term
		}
	}
	return best
}

// WaitLeader waits until a running node reports itself leader and fails the
// test after timeout.
func (c *Cluster) WaitLeader(timeout time.Duration) *Node {
	c.T.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if l := c.Leader(); l != nil {
			return l
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("no leader among %d running nodes within %v", len(c.Running()), timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Voters returns the ids of the voters in the leader's configuration.
func Voters(st *clusterpb.StatusResponse) []string {
	var ids []string
	for _, m := range st.Members {
		if m.Suffrage == "voter" {
			ids = append(ids, m.NodeId)
		}
	}
	return ids
}

// WaitVoters waits until the leader's configuration has exactly ids as
// voters and every node in ids reports the same leader.
func (c *Cluster) WaitVoters(ids []string, timeout time.Duration) *Node {
	c.T.Helper()
	want := sortedCopy(ids)
	deadline := time.Now().Add(timeout)
	var last string
	for {
		if l := c.Leader(); l != nil {
			st, err := status(c.Admin, l.RemoteAddr, 2*time.Second)
			if err == nil {
				got := sortedCopy(Voters(st))
				last = fmt.Sprintf("leader %s voters %v", l.ID, got)
				if slices.Equal(got, want) && c.agreeOnLeader(ids, st.NodeId) {
					return l
				}
			}
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("voters did not become %v within %v; last: %s", want, timeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) agreeOnLeader(ids []string, leader string) bool {
	var nodes []*Node
	for _, n := range c.Running() {
		for _, id := range ids {
			if n.ID == id {
				nodes = append(nodes, n)
			}
		}
	}
	sts, _ := c.StatusOf(nodes, 2*time.Second)
	for _, st := range sts {
		if st == nil || st.LeaderId != leader {
			return false
		}
	}
	return true
}

// WaitConverged waits until every running node has reported the same FSM
// hash at one applied index, and returns their latest statuses. The nodes
// need not be at that index at the same moment: clients may go on writing
// meanwhile (see convergence).
func (c *Cluster) WaitConverged(timeout time.Duration) []*clusterpb.StatusResponse {
	c.T.Helper()
	deadline := time.Now().Add(timeout)
	seen := newConvergence()
	var errs []error
	var ids []string
	for {
		nodes := c.Running()
		ids = ids[:0]
		for _, n := range nodes {
			ids = append(ids, n.ID)
		}
		var sts []*clusterpb.StatusResponse
		sts, errs = c.StatusOf(nodes, 2*time.Second)
		for _, st := range sts {
			seen.add(st)
		}
		if _, ok := seen.agreed(ids); ok && errors.Join(errs...) == nil {
			return sts
		}
		if time.Now().After(deadline) {
			break
		}
		// Often enough to see the leader at the index a follower reaches
		// next while clients write (a follower trails by an entry).
		time.Sleep(convergePoll)
	}
	lines := seen.report(ids)
	for i, err := range errs {
		if err != nil {
			lines = append(lines, fmt.Sprintf("%s: %v", ids[i], err))
		}
	}
	if m := seen.mismatches(ids); m != "" {
		lines = append(lines, "hashes: "+m)
	}
	c.T.Fatalf("nodes did not converge within %v:\n  %s", timeout, strings.Join(lines, "\n  "))
	return nil
}

// convergePoll is how often WaitConverged polls the nodes.
const convergePoll = 20 * time.Millisecond

// RemoveVoter asks the leader to remove node i from the configuration,
// following leadership when node i is the leader (it hands leadership over
// and asks for the request again).
func (c *Cluster) RemoveVoter(i int) error {
	l := c.WaitLeader(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.Admin.DoOnLeader(ctx, l.RemoteAddr, &clusterpb.RemoveVoterRequest{NodeId: c.Node(i).ID})
	return err
}

// DumpLogs writes the tail of every node's log to the test log.
func (c *Cluster) DumpLogs(lines int) {
	c.mu.Lock()
	nodes := append([]*Node(nil), c.Nodes...)
	c.mu.Unlock()
	for _, n := range nodes {
		c.T.Logf("---- %s (%s) last %d lines ----\n%s", n.ID, n.LogPath, lines, tail(n.LogPath, lines))
	}
}

func (c *Cluster) cleanup() {
	c.mu.Lock()
	nodes := append([]*Node(nil), c.Nodes...)
	c.mu.Unlock()
	for _, n := range nodes {
		n.mu.Lock()
		crashed := n.exited != nil && !n.expected && !n.aliveLocked()
		err := n.exitErr
		n.mu.Unlock()
		if crashed {
			c.T.Errorf("%s exited on its own: %v", n.ID, err)
		}
	}
	for _, n := range nodes {
		if n.alive() {
			n.mu.Lock()
			n.expected = true
			cmd, exited := n.Cmd, n.exited
			n.mu.Unlock()
			cmd.Process.Signal(syscall.SIGKILL)
			<-exited
		}
	}
	if c.T.Failed() {
		c.DumpLogs(60)
	}
	if dir := os.Getenv("COHORT_CLUSTER_LOG_DIR"); dir != "" {
		c.keepLogs(dir, nodes)
	}
}

// keepLogs copies every node's log to dir as <test>-<node>.log, so a run's
// logs survive the test (set COHORT_CLUSTER_LOG_DIR).
func (c *Cluster) keepLogs(dir string, nodes []*Node) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.T.Logf("keep logs: %v", err)
		return
	}
	name := strings.NewReplacer("/", "_", " ", "_").Replace(c.T.Name())
	for _, n := range nodes {
		b, err := os.ReadFile(n.LogPath)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d-%s.log", name, time.Now().UnixMilli(), n.ID)), b, 0o644)
		}
		if err != nil {
			c.T.Logf("keep logs of %s: %v", n.ID, err)
		}
	}
}

// lineWriter copies a process's output to a file and hands every complete
// line to onLine.
type lineWriter struct {
	mu     sync.Mutex
	f      *os.File
	buf    []byte
	onLine func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.f.Write(p)
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.onLine(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.onLine(string(w.buf))
		w.buf = nil
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// ExitErr returns how node i's last process ended (nil for exit status 0).
func (c *Cluster) ExitErr(i int) error {
	n := c.Node(i)
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exitErr
}
