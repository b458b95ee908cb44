// Package docs_test runs the README's quickstart blocks as written, so the
// commands a new reader copies cannot rot.
//
// A block is the fenced shell block after a `<!-- quickstart: NAME -->`
// line. Its commands run as a reader runs them, each "in a terminal of its
// own", with three substitutions only:
//   - `go run ./cmd/X` runs X, built once for the test binary (the same
//     package, compiled once instead of at every command);
//   - every 127.0.0.1 port in the block is replaced by a free one;
//   - the default addresses of a command that names none come from the
//     COHORT_* variables every binary reads, pointed at free ports.
//
// cohortd and cohort-members keep running until the test ends; any other
// command must exit 0, and is retried while the cluster settles.
package docs_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binDir holds cohortd, cohortctl and cohort-members, built once per test
// binary by build; TestMain removes it.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// build compiles the three commands the quickstarts name into binDir.
func build(t *testing.T) {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cohort-quickstart-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator),
			"./cmd/cohortd", "./cmd/cohortctl", "./cmd/cohort-members")
		cmd.Dir = ".." // the module root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

// defaults are the addresses the binaries use when a command names none,
// with the variable that overrides each.
// (COHORT_BOOTSTRAP_SERVERS is cohortctl's Kafka seed list; only cohortctl
// gets it. COHORT_BOOTSTRAP would be cohortd's --bootstrap switch.)
var defaults = []struct{ env, addr, only string }{
	{"COHORT_KAFKA_ADDR", "127.0.0.1:9092", ""},
	{"COHORT_REMOTE_ADDR", "127.0.0.1:8090", ""},
	{"COHORT_HTTP_ADDR", "127.0.0.1:9644", ""},
	{"COHORT_RAFT_ADDR", "127.0.0.1:7946", ""},
	{"COHORT_BOOTSTRAP_SERVERS", "127.0.0.1:9092", "cohortctl"},
}

// partitions is what cohort-members' members share by default (topic demo).
const partitions = 12

func TestREADMEQuickstart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts cohortd processes")
	}
	build(t)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"single", "cluster"} {
		t.Run(name, func(t *testing.T) {
			block, err := quickstartBlock(string(readme), name)
			if err != nil {
				t.Fatal(err)
			}
			runQuickstart(t, block)
		})
	}
}

// quickstartBlock returns the commands of the fenced block that follows the
// marker `<!-- quickstart: name -->`: continuation lines joined, comments
// and empty lines dropped.
func quickstartBlock(readme, name string) ([]string, error) {
	marker := "<!-- quickstart: " + name + " -->"
	i := strings.Index(readme, marker)
	if i < 0 {
		return nil, fmt.Errorf("README has no %q", marker)
	}
	rest := strings.TrimLeft(readme[i+len(marker):], "\n")
	if !strings.HasPrefix(rest, "```sh\n") {
		return nil, fmt.Errorf("%q is not followed by a ```sh block", marker)
	}
	body, _, ok := strings.Cut(rest[len("```sh\n"):], "```")
	if !ok {
		return nil, fmt.Errorf("the block after %q is not closed", marker)
	}
	var cmds []string
	var cur strings.Builder
	for _, line := range strings.Split(body, "\n") {
		if cont, ok := strings.CutSuffix(strings.TrimRight(line, " "), `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		if c := strings.TrimSpace(stripComment(cur.String())); c != "" {
			cmds = append(cmds, c)
		}
		cur.Reset()
	}
	if len(cmds) == 0 {
		return nil, fmt.Errorf("the block after %q has no commands", marker)
	}
	return cmds, nil
}

// stripComment drops a shell comment: a # at the start of the line or after
// a blank. The quickstart commands quote nothing, and fields rejects quotes.
func stripComment(line string) string {
	for i, r := range line {
		if r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return line[:i]
		}
	}
	return line
}

// fields splits a command into words as the shell would for the plain
// commands quickstarts use; it refuses what it would get wrong.
func fields(cmd string) ([]string, error) {
	if strings.ContainsAny(cmd, "'\"$`|;&<>()*?") {
		return nil, fmt.Errorf("command %q uses shell syntax the test does not run", cmd)
	}
	return strings.Fields(cmd), nil
}

var addrRE = regexp.MustCompile(`(127\.0\.0\.1|localhost):([0-9]+)`)

// ports maps each port a block names, and each default port, to a free one.
type ports map[string]string

func freePorts(t *testing.T, block []string) ports {
	want := map[string]bool{}
	for _, d := range defaults {
		_, p, _ := net.SplitHostPort(d.addr)
		want[p] = true
	}
	for _, c := range block {
		for _, m := range addrRE.FindAllStringSubmatch(c, -1) {
			want[m[2]] = true
		}
	}
	m := ports{}
	var ls []net.Listener
	for p := range want {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		m[p] = strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return m
}

func (m ports) rewrite(s string) string {
	return addrRE.ReplaceAllStringFunc(s, func(a string) string {
		host, port, _ := net.SplitHostPort(a)
		return net.JoinHostPort(host, m[port])
	})
}

// proc is one command of a block, running or finished.
type proc struct {
	name string // the binary
	args []string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

func (p *proc) String() string { return p.name + " " + strings.Join(p.args, " ") }

// flag returns the value of --name (or -name) in p's arguments, or def.
func (p *proc) flag(name, def string) string {
	for i, a := range p.args {
		a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(p.args) {
			return p.args[i+1]
		}
	}
	return def
}

type quickstart struct {
	t     *testing.T
	dir   string   // every command's working directory
	env   []string // without COHORT_* variables
	ports ports
	nodes []*proc // cohortd processes
	procs []*proc // everything started
}

func runQuickstart(t *testing.T, block []string) {
	q := &quickstart{t: t, dir: t.TempDir(), ports: freePorts(t, block)}
	q.env = append(q.env, "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COHORT_") && !strings.HasPrefix(kv, "PATH=") {
			q.env = append(q.env, kv)
		}
	}
	t.Cleanup(q.stopAll)
	defer func() {
		if t.Failed() {
			q.dump()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var members []*proc
	for _, c := range block {
		p := q.command(c)
		switch p.name {
		case "cohortd":
			q.start(p)
			q.nodes = append(q.nodes, p)
		case "cohort-members":
			// A reader starts members once the nodes say they listen.
			q.waitReady(ctx)
			q.start(p)
			members = append(members, p)
		default:
			// A reader runs it once the nodes and the members have settled.
			q.waitReady(ctx)
			for _, m := range members {
				q.waitOwned(ctx, m)
			}
			q.runOnce(ctx, p)
		}
	}
	if len(q.nodes) == 0 || len(members) == 0 {
		t.Fatalf("the block starts %d cohortd and %d cohort-members; want at least one of each", len(q.nodes), len(members))
	}
	q.waitReady(ctx)
	for _, m := range members {
		q.waitOwned(ctx, m)
	}
}

// command turns a README line into a process description.
func (q *quickstart) command(line string) *proc {
	q.t.Helper()
	words, err := fields(q.ports.rewrite(line))
	if err != nil {
		q.t.Fatal(err)
	}
	if len(words) >= 3 && words[0] == "go" && words[1] == "run" && strings.HasPrefix(words[2], "./cmd/") {
		words = append([]string{filepath.Base(words[2])}, words[3:]...)
	}
	switch words[0] {
	case "cohortd", "cohortctl", "cohort-members":
	default:
		q.t.Fatalf("quickstart command %q: the test runs only cohortd, cohortctl and cohort-members", line)
	}
	return &proc{name: words[0], args: words[1:], out: &syncBuffer{}, done: make(chan struct{})}
}

func (q *quickstart) exec(p *proc) {
	q.t.Helper()
	p.cmd = exec.Command(filepath.Join(binDir, p.name), p.args...)
	p.cmd.Dir = q.dir
	p.cmd.Env = q.env
	for _, d := range defaults {
		if d.only == "" || d.only == p.name {
			p.cmd.Env = append(p.cmd.Env, d.env+"="+q.ports.rewrite(d.addr))
		}
	}
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	if err := p.cmd.Start(); err != nil {
		q.t.Fatalf("%s: %v", p, err)
	}
	q.procs = append(q.procs, p)
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
}

// start runs a long-lived command (a node, the members); it must not exit
// before the test ends.
func (q *quickstart) start(p *proc) {
	q.t.Helper()
	q.t.Logf("start: %s", p)
	q.exec(p)
}

// runOnce runs a command that must exit 0, again every half second until it
// does or ctx ends: right after the nodes start, Raft may still be electing.
// A `cluster status` must also name every node started so far.
func (q *quickstart) runOnce(ctx context.Context, tmpl *proc) {
	q.t.Helper()
	q.t.Logf("run: %s", tmpl)
	var last *proc
	for {
		p := &proc{name: tmpl.name, args: tmpl.args, out: &syncBuffer{}, done: make(chan struct{})}
		q.exec(p)
		select {
		case <-p.done:
		case <-ctx.Done():
			q.t.Fatalf("%s did not finish: %v\n%s", p, ctx.Err(), p.out)
		}
		last = p
		if p.cmd.ProcessState.Success() && q.namesEveryNode(p) {
			q.t.Logf("%s\n%s", p, p.out)
			return
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			q.t.Fatalf("%s never succeeded (%v); last run: %v\n%s", tmpl, ctx.Err(), last.cmd.ProcessState, last.out)
		}
	}
}

func (q *quickstart) namesEveryNode(p *proc) bool {
	if !strings.Contains(p.String(), "cluster") || !strings.Contains(p.String(), "status") {
		return true
	}
	for _, n := range q.nodes {
		if !strings.Contains(p.out.String(), n.flag("node-id", "node1")) {
			return false
		}
	}
	return true
}

// waitReady waits until every node started so far answers /readyz with 200:
// it knows the Raft leader and has caught up (and, on the leader, has loaded
// its groups). A node that exited fails the test.
func (q *quickstart) waitReady(ctx context.Context) {
	q.t.Helper()
	for _, n := range q.nodes {
		url := "http://" + n.flag("http-addr", q.ports.rewrite("127.0.0.1:9644")) + "/readyz"
		for {
			select {
			case <-n.done:
				q.t.Fatalf("%s exited: %v\n%s", n, n.cmd.ProcessState, n.out)
			default:
			}
			if code, body := get(ctx, url); code == http.StatusOK {
				break
			} else if ctx.Err() != nil {
				q.t.Fatalf("%s never became ready: %s answers %d\n%s", n, url, code, body)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func get(ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}

// ownsRE matches a line cohort-members prints for every change, such as
// "12:00:03.512 member-1   assigned gen=1   [demo/0 demo/1]  now owns 2".
var ownsRE = regexp.MustCompile(`^\S+ (\S+)\s+(?:assigned|revoked|lost)\s+gen=\d+\s+\[.*\]\s+now owns (\d+)$`)

// waitOwned waits until the members of p own every partition between them,
// each member at least one. (A member prints only changes, so the last line
// of each says what it owns now.)
func (q *quickstart) waitOwned(ctx context.Context, p *proc) {
	q.t.Helper()
	members := 3
	if n, err := strconv.Atoi(p.flag("members", "3")); err == nil {
		members = n
	}
	for {
		select {
		case <-p.done:
			q.t.Fatalf("%s exited: %v\n%s", p, p.cmd.ProcessState, p.out)
		default:
		}
		owns := map[string]int{}
		sc := bufio.NewScanner(strings.NewReader(p.out.String()))
		for sc.Scan() {
			if m := ownsRE.FindStringSubmatch(sc.Text()); m != nil {
				owns[m[1]], _ = strconv.Atoi(m[2])
			}
		}
		total, each := 0, len(owns) == members
		for _, n := range owns {
			total += n
			each = each && n > 0
		}
		if each && total == partitions {
			q.t.Logf("%d members own the %d partitions between them: %v", members, total, owns)
			return
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			q.t.Fatalf("members never owned all %d partitions (%v): %v", partitions, ctx.Err(), owns)
		}
	}
}

// stopAll ends every process as a reader would, the last started first
// (the members leave while their coordinator still runs): SIGTERM, then
// SIGKILL if it has not exited after 10 s.
func (q *quickstart) stopAll() {
	for i := len(q.procs) - 1; i >= 0; i-- {
		p := q.procs[i]
		select {
		case <-p.done:
			continue
		default:
		}
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			q.t.Logf("%s: no exit 10 s after SIGTERM; killed", p)
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func (q *quickstart) dump() {
	for _, p := range q.procs {
		if p.name != "cohortctl" {
			q.t.Logf("--- %s\n%s", p, p.out)
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
