// Package clients runs real Kafka consumer-group clients as child processes
// for tests outside the interop package (the cluster tests): franz-go (kgo),
// IBM/sarama, librdkafka through confluent-kafka-python, kafka-python,
// kafkajs, and librdkafka 2.15 through @confluentinc/kafka-javascript (the
// one family here with the consumer group protocol, KIP-848). Each client is one process that joins a group, reports every
// assignment change on stdout as a JSON line and obeys commands on stdin
// (commit [base], fetch, close): the protocol of the drivers in
// kafka/interop (testdata/*.py, testdata/*.js, and the Go families that the
// interop test binary runs when COHORT_INTEROP_CLIENT is set).
//
// Missing client libraries are installed on first use: Debian packages with
// apt-get, kafkajs and @confluentinc/kafka-javascript with npm into cache
// folders.
package clients

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Python is Debian's interpreter, where python3-* packages install.
const Python = "/usr/bin/python3"

// KafkaJSVersion is the kafkajs release the drivers are tested with.
const KafkaJSVersion = "2.2.4"

// KafkaJavaScriptVersion is the @confluentinc/kafka-javascript release the
// consumer-protocol driver is tested with; it bundles librdkafka 2.15.1.
const KafkaJavaScriptVersion = "1.10.1"

// Family is one client library and how to start one of its consumers.
type Family struct {
	Name     string
	Assignor string // range or cooperative-sticky
	Static   bool   // members set group.instance.id
	// SyncCommits says whether a "committed_own" answer means the commit
	// was acknowledged by the coordinator (sarama's offset manager retries
	// and reports failures asynchronously, so its answer does not).
	SyncCommits bool
	argv        []string
	env         []string
}

// Setup prepares the client families: it builds the Go drivers and
// installs what the other families need. root is the module root.
type Setup struct {
	root   string
	binDir string
	goBin  string
}

// NewSetup builds the Go client driver (the interop test binary, built in
// root's kafka/interop folder) into a temporary folder.
func NewSetup(root string) (*Setup, error) {
	dir, err := os.MkdirTemp("", "cohort-clients-")
	if err != nil {
		return nil, err
	}
	s := &Setup{root: root, binDir: dir, goBin: filepath.Join(dir, "interop.test")}
	cmd := exec.Command("go", "test", "-c", "-o", s.goBin, ".")
	cmd.Dir = filepath.Join(root, "kafka", "interop")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("build the Go client drivers: %v\n%s", err, out)
	}
	return s, nil
}

// ScriptSetup is a Setup for the families whose drivers are scripts
// (Python, Node): it builds nothing, and its Franz and Sarama families do
// not run.
func ScriptSetup(root string) *Setup { return &Setup{root: root} }

// Close removes the built drivers.
func (s *Setup) Close() { os.RemoveAll(s.binDir) }

func (s *Setup) testdata(name string) string {
	return filepath.Join(s.root, "kafka", "interop", "testdata", name)
}

// Franz is kgo with the given balancer (range or cooperative-sticky).
func (s *Setup) Franz(assignor string) Family {
	return Family{Name: "kgo", Assignor: assignor, SyncCommits: true, argv: []string{s.goBin, "-test.run=^$"}, env: []string{"COHORT_INTEROP_CLIENT=franz"}}
}

// Sarama is IBM/sarama (range, JoinGroup v3).
func (s *Setup) Sarama() Family {
	return Family{Name: "sarama", Assignor: "range", argv: []string{s.goBin, "-test.run=^$"}, env: []string{"COHORT_INTEROP_CLIENT=sarama"}}
}

// Librdkafka is confluent-kafka-python over Debian's librdkafka.
func (s *Setup) Librdkafka(assignor string, static bool) (Family, error) {
	if err := EnsureDebian("import confluent_kafka", "python3-confluent-kafka"); err != nil {
		return Family{}, err
	}
	return Family{Name: "librdkafka", Assignor: assignor, Static: static, SyncCommits: true, argv: []string{Python, s.testdata("confluent_client.py")}}, nil
}

// KafkaPython is Debian's kafka-python (range).
func (s *Setup) KafkaPython() (Family, error) {
	if err := EnsureDebian("import kafka", "python3-kafka"); err != nil {
		return Family{}, err
	}
	return Family{Name: "kafka-python", Assignor: "range", SyncCommits: true, argv: []string{Python, s.testdata("kafka_python_client.py")}}, nil
}

// KafkaJS is kafkajs from npm (range).
func (s *Setup) KafkaJS() (Family, error) {
	dir, err := EnsureKafkaJS()
	if err != nil {
		return Family{}, err
	}
	return Family{Name: "kafkajs", Assignor: "range", SyncCommits: true, argv: []string{"node", s.testdata("kafkajs_client.js")}, env: []string{"NODE_PATH=" + filepath.Join(dir, "node_modules")}}, nil
}

// LibrdkafkaNode is librdkafka 2.15 through @confluentinc/kafka-javascript
// (its node-rdkafka API, KafkaConsumer), with group.protocol set to protocol:
// "consumer" (KIP-848; the server assigns) or "classic" (with assignor).
// Its driver reports every ownership change with both ends of the callback
// on CLOCK_MONOTONIC (OwnEvent) and counts a commit only when librdkafka's
// offset_commit_cb reports it without error (Proc.Acks).
func (s *Setup) LibrdkafkaNode(protocol, assignor string) (Family, error) {
	dir, err := EnsureKafkaJavaScript()
	if err != nil {
		return Family{}, err
	}
	name := "librdkafka-" + protocol
	return Family{Name: name, Assignor: assignor, SyncCommits: true, argv: []string{"node", s.testdata("kafka_javascript_client.js")},
		env: []string{"NODE_PATH=" + filepath.Join(dir, "node_modules"), "GROUP_PROTOCOL=" + protocol}}, nil
}

var aptMu sync.Mutex

// EnsureDebian makes sure Debian's python can run check, installing pkg with
// apt-get when it cannot.
func EnsureDebian(check, pkg string) error {
	return ensureWith(pkg, func() error { return exec.Command(Python, "-c", check).Run() })
}

// EnsureCommand makes sure the program name is on PATH, installing pkg with
// apt-get when it is not.
func EnsureCommand(name, pkg string) error {
	return ensureWith(pkg, func() error { _, err := exec.LookPath(name); return err })
}

func ensureWith(pkg string, ok func() error) error {
	aptMu.Lock()
	defer aptMu.Unlock()
	if ok() == nil {
		return nil
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	install := func() ([]byte, error) {
		cmd := exec.Command("apt-get", append([]string{"install", "-y", "-q"}, strings.Fields(pkg)...)...)
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	if out, err := install(); err != nil {
		update := exec.Command("apt-get", "update", "-q")
		update.Env = env
		update.Run()
		if out2, err := install(); err != nil {
			return fmt.Errorf("apt-get install %s failed: %v\n%s\n%s", pkg, err, out, out2)
		}
	}
	if err := ok(); err != nil {
		return fmt.Errorf("%s installed but still missing: %v", pkg, err)
	}
	return nil
}

// EnsureKafkaJS installs kafkajs into a cache folder (kept between runs)
// and returns the folder holding node_modules.
func EnsureKafkaJS() (string, error) {
	if err := EnsureCommand("node", "nodejs npm"); err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "cohort-kafkajs-"+KafkaJSVersion)
	pkg := filepath.Join(dir, "node_modules", "kafkajs", "package.json")
	if installedVersion(pkg) == KafkaJSVersion {
		return dir, nil
	}
	npm := exec.Command("npm", "install", "--no-save", "--no-package-lock", "--no-audit", "--no-fund", "--prefix", dir, "kafkajs@"+KafkaJSVersion)
	if out, err := npm.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install kafkajs@%s failed: %v\n%s", KafkaJSVersion, err, out)
	}
	if v := installedVersion(pkg); v != KafkaJSVersion {
		return "", fmt.Errorf("kafkajs %q installed, want %s", v, KafkaJSVersion)
	}
	return dir, nil
}

// kafkaJavaScriptBuild is what building @confluentinc/kafka-javascript
// from source needs from Debian: a C and C++ toolchain, python3 for
// node-gyp, and OpenSSL and zlib, which librdkafka links when present (for
// TLS and gzip, as users have it). librdkafka's configure takes the rest
// (SASL, zstd, curl) as optional and builds without them.
var kafkaJavaScriptBuild = []string{"g++", "make", "python3", "libssl-dev", "zlib1g-dev"}

// EnsureKafkaJavaScript installs @confluentinc/kafka-javascript into a
// cache folder (kept between runs) and returns the folder holding
// node_modules. The package's install step would download a prebuilt
// binary from outside the package registries; it is told to build from
// source instead (npm_config_build_from_source), with the installed Node
// headers (npm_config_nodedir) and librdkafka linked dynamically against
// the system's libraries (CKJS_LINKING=dynamic: the static build would
// download its dependencies' sources). The build takes minutes; a file
// lock keeps test processes that need it at once from building it twice.
func EnsureKafkaJavaScript() (string, error) {
	if err := EnsureCommand("node", "nodejs npm"); err != nil {
		return "", err
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "cohort-kafka-javascript-"+KafkaJavaScriptVersion)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if kafkaJavaScriptLoads(dir) == nil {
		return dir, nil
	}
	if err := ensureWith(strings.Join(kafkaJavaScriptBuild, " "), debInstalled(kafkaJavaScriptBuild)); err != nil {
		return "", err
	}
	// A partial folder (an interrupted build, another Node) is built anew.
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	pkg := "@confluentinc/kafka-javascript@" + KafkaJavaScriptVersion
	npm := exec.Command("npm", "install", "--no-save", "--no-package-lock", "--no-audit", "--no-fund", "--prefix", dir, pkg)
	npm.Env = append(os.Environ(), "npm_config_build_from_source=true", "npm_config_nodedir="+nodeDir(), "CKJS_LINKING=dynamic")
	if out, err := npm.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install %s (built from source) failed: %v\n%s", pkg, err, out)
	}
	if err := kafkaJavaScriptLoads(dir); err != nil {
		return "", fmt.Errorf("%s installed but does not load: %w", pkg, err)
	}
	return dir, nil
}

// debInstalled returns a check that every one of the Debian packages is
// installed.
func debInstalled(pkgs []string) func() error {
	return func() error {
		out, err := exec.Command("dpkg-query", append([]string{"-W", "-f", "${db:Status-Status} "}, pkgs...)...).Output()
		if err != nil {
			return fmt.Errorf("dpkg-query %v: %w", pkgs, err)
		}
		for i, st := range strings.Fields(string(out)) {
			if st != "installed" {
				return fmt.Errorf("package %s is %s", pkgs[i], st)
			}
		}
		return nil
	}
}

// nodeDir is the prefix whose include/node holds the running Node's
// headers (Debian's and NodeSource's packages install them under /usr), so
// that node-gyp does not download them.
func nodeDir() string {
	out, err := exec.Command("node", "-p", "require('path').resolve(process.execPath, '../..')").Output()
	if err != nil {
		return "/usr"
	}
	return strings.TrimSpace(string(out))
}

// kafkaJavaScriptLoads checks that the package in dir is the version wanted
// and that its native module loads in the running Node (a Node of another
// ABI does not load it).
func kafkaJavaScriptLoads(dir string) error {
	pkg := filepath.Join(dir, "node_modules", "@confluentinc", "kafka-javascript")
	if v := installedVersion(filepath.Join(pkg, "package.json")); v != KafkaJavaScriptVersion {
		return fmt.Errorf("version %q, want %s", v, KafkaJavaScriptVersion)
	}
	cmd := exec.Command("node", "-e", "require(process.argv[1])", pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func installedVersion(packageJSON string) string {
	b, err := os.ReadFile(packageJSON)
	if err != nil {
		return ""
	}
	var p struct{ Version string }
	if json.Unmarshal(b, &p) != nil {
		return ""
	}
	return p.Version
}

// Config is what one consumer is told.
type Config struct {
	Bootstrap  []string
	Group      string
	Topic      string
	ClientID   string
	Partitions int
	Session    time.Duration
	// Env is added to the client's environment (KAFKAJS_LOG=info, say).
	Env []string
	// StderrPath, when set, is a file that gets the client's whole
	// standard error (its library's log); StderrTail still works.
	StderrPath string
}

// Report is one assignment change a client reported: the partitions it owns
// after the callback, its generation (-1 when the library does not say) and
// member id ("" likewise).
type Report struct {
	At     time.Time
	Event  string // the callback, as the driver names it
	Owned  []int32
	Gen    int64
	Member string
}

// Proc is one running client.
type Proc struct {
	Name    string
	Family  Family
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	replies chan map[string]any
	done    chan struct{}

	logFile *os.File

	mu       sync.Mutex
	reports  []Report
	events   []OwnEvent
	rejected int
	// acks are the commits the library acknowledged (partition -> offset),
	// commitFailed how many it reported failed, where the driver says
	// (the librdkafka consumer-protocol driver does).
	acks         []Ack
	commitFailed int
	logs         []string
	stderr       bytes.Buffer
}

// OwnEvent is a timestamped ownership change a driver reported from its
// callbacks (the kgo and librdkafka drivers do): an assignment when its
// callback starts, a revocation or loss when its callback returns.
type OwnEvent struct {
	Client string
	Kind   string // assigned, revoked, lost, closed
	Parts  []int32
	At     int64 // nanoseconds: unix time, or CLOCK_MONOTONIC where Begin is set
	// Begin is when the callback was called, where the driver says
	// (CLOCK_MONOTONIC nanoseconds, as At then); At is when it returned.
	Begin int64
}

// Events returns the ownership changes reported so far.
func (p *Proc) Events() []OwnEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// Rejected is how many JoinGroups the client said were refused with
// INCONSISTENT_GROUP_PROTOCOL.
func (p *Proc) Rejected() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rejected
}

// Ack is one commit the library acknowledged.
type Ack struct {
	Offsets  map[int32]int64 // partition -> offset
	Sent, At int64           // CLOCK_MONOTONIC nanoseconds: committed, acknowledged
}

// Acks returns the commits the library acknowledged so far and how many
// commits it reported failed.
func (p *Proc) Acks() (acked []Ack, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.acks), p.commitFailed
}

// Logs returns the driver's hello and log lines.
func (p *Proc) Logs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.logs)
}

// Start starts one consumer of the family.
func (f Family) Start(name string, c Config) (*Proc, error) {
	env := append(slices.Clone(f.env),
		"BOOTSTRAP="+strings.Join(c.Bootstrap, ","), "GROUP="+c.Group, "TOPIC="+c.Topic, "CLIENT_ID="+c.ClientID,
		fmt.Sprintf("PARTITIONS=%d", c.Partitions), fmt.Sprintf("SESSION_MS=%d", c.Session.Milliseconds()),
		"ASSIGNOR="+f.Assignor)
	if f.Static {
		env = append(env, "INSTANCE_ID="+c.ClientID)
	}
	env = append(env, c.Env...)
	p, err := StartCommand(name, f.argv, env, c.StderrPath)
	if p != nil {
		p.Family = f
	}
	return p, err
}

// StartCommand starts a client driver from its command line and the
// environment it adds (BOOTSTRAP, GROUP, ... as the drivers read them);
// stderrPath, when set, also gets its standard error.
func StartCommand(name string, argv, env []string, stderrPath string) (*Proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	p := &Proc{Name: name, cmd: cmd, replies: make(chan map[string]any, 64), done: make(chan struct{})}
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = &cappedWriter{mu: &p.mu, w: &p.stderr}
	if stderrPath != "" {
		f, err := os.OpenFile(stderrPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		p.logFile = f
		cmd.Stderr = io.MultiWriter(cmd.Stderr, f)
	}
	if err := cmd.Start(); err != nil {
		if p.logFile != nil {
			p.logFile.Close()
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go p.read(stdout)
	return p, nil
}

func (p *Proc) read(stdout io.Reader) {
	defer close(p.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		switch {
		case m["rejected"] != nil:
			p.mu.Lock()
			p.rejected++
			p.mu.Unlock()
		case m["ev"] != nil:
			ev := OwnEvent{Client: p.Name}
			ev.Kind, _ = m["ev"].(string)
			if ps, ok := m["parts"].([]any); ok {
				for _, v := range ps {
					ev.Parts = append(ev.Parts, int32(v.(float64)))
				}
			}
			if t, ok := m["t"].(float64); ok {
				ev.At = int64(t)
			}
			if t, ok := m["t0"].(float64); ok {
				ev.Begin = int64(t)
			}
			p.mu.Lock()
			p.events = append(p.events, ev)
			p.mu.Unlock()
		case m["owned"] != nil:
			r := Report{At: time.Now(), Gen: -1, Owned: []int32{}}
			for _, v := range m["owned"].([]any) {
				r.Owned = append(r.Owned, int32(v.(float64)))
			}
			slices.Sort(r.Owned)
			if g, ok := m["gen"].(float64); ok {
				r.Gen = int64(g)
			}
			r.Member, _ = m["member"].(string)
			r.Event, _ = m["event"].(string)
			p.mu.Lock()
			p.reports = append(p.reports, r)
			p.mu.Unlock()
		case m["acked"] != nil:
			a := Ack{Offsets: map[int32]int64{}}
			for k, v := range m["acked"].(map[string]any) {
				p, _ := strconv.Atoi(k)
				a.Offsets[int32(p)] = int64(v.(float64))
			}
			if t, ok := m["sent"].(float64); ok {
				a.Sent = int64(t)
			}
			if t, ok := m["t"].(float64); ok {
				a.At = int64(t)
			}
			p.mu.Lock()
			p.acks = append(p.acks, a)
			p.mu.Unlock()
		case m["commit_failed"] != nil:
			p.mu.Lock()
			p.commitFailed++
			p.mu.Unlock()
		case m["hello"] != nil, m["log"] != nil:
			p.mu.Lock()
			p.logs = append(p.logs, fmt.Sprint(m["hello"], m["log"]))
			p.mu.Unlock()
		default:
			select {
			case p.replies <- m:
			default:
			}
		}
	}
	p.cmd.Wait()
	if p.logFile != nil {
		p.logFile.Close()
	}
}

// Reports returns every assignment change reported so far.
func (p *Proc) Reports() []Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.reports)
}

// Last returns the latest report, false before the first.
func (p *Proc) Last() (Report, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.reports) == 0 {
		return Report{}, false
	}
	return p.reports[len(p.reports)-1], true
}

// StderrTail returns the end of the client's standard error.
func (p *Proc) StderrTail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stderr.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// ErrCommand is a command the client answered with an error.
var ErrCommand = errors.New("client command failed")

// Request sends a command and waits for the answer carrying key. An error
// answer is returned wrapped in ErrCommand.
func (p *Proc) Request(cmd, key string, timeout time.Duration) (map[string]any, error) {
	if _, err := io.WriteString(p.stdin, cmd+"\n"); err != nil {
		return nil, fmt.Errorf("%s: send %q: %w", p.Name, cmd, err)
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case m := <-p.replies:
			if e, ok := m["error"]; ok {
				return nil, fmt.Errorf("%w: %s: %s: %v", ErrCommand, p.Name, cmd, e)
			}
			if _, ok := m[key]; ok {
				return m, nil
			}
		case <-p.done:
			// Replies are queued before done closes: look at them first.
			for {
				select {
				case m := <-p.replies:
					if _, ok := m[key]; ok {
						return m, nil
					}
					continue
				default:
				}
				break
			}
			return nil, fmt.Errorf("%s exited during %q; stderr:\n%s", p.Name, cmd, p.StderrTail())
		case <-deadline.C:
			return nil, fmt.Errorf("%s: no answer to %q within %v", p.Name, cmd, timeout)
		}
	}
}

// Close asks the client to leave and exit, and kills it if it does not
// within timeout.
func (p *Proc) Close(timeout time.Duration) error {
	_, err := p.Request("close", "closed", timeout)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%s did not exit after close", p.Name)
	}
	return err
}

// Kill ends the client with SIGKILL and waits for it.
func (p *Proc) Kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Settled checks what DescribeGroups shows of a group (state, generation
// and each member's partitions of the consumers' topic) against its
// consumers: the group is Stable with one member per consumer, each of the
// partitions has exactly one owner, and every consumer's last callback left
// it owning one member's assignment (the member with its id when the
// library says, one to one otherwise) in that generation (when it says).
// It returns "" or what does not hold yet.
func Settled(state string, gen int32, members map[string][]int32, partitions int, procs []*Proc) string {
	if state != "Stable" {
		return "state " + state
	}
	if len(members) != len(procs) {
		return fmt.Sprintf("%d members, want %d", len(members), len(procs))
	}
	owner := map[int32]string{}
	for m, ps := range members {
		for _, p := range ps {
			if o, dup := owner[p]; dup {
				return fmt.Sprintf("partition %d owned by %s and %s", p, o, m)
			}
			owner[p] = m
		}
	}
	if len(owner) != partitions {
		return fmt.Sprintf("%d of %d partitions assigned", len(owner), partitions)
	}
	used := map[string]bool{}
	for _, c := range procs {
		r, ok := c.Last()
		if !ok {
			return c.Name + " reported no assignment yet"
		}
		if r.Gen >= 0 && r.Gen != int64(gen) {
			return fmt.Sprintf("%s at generation %d, group at %d", c.Name, r.Gen, gen)
		}
		if r.Member != "" {
			ps, ok := members[r.Member]
			if !ok {
				return fmt.Sprintf("%s has member id %s, not in the group", c.Name, r.Member)
			}
			if !slices.Equal(ps, r.Owned) {
				return fmt.Sprintf("%s owns %v, coordinator assigned %v", c.Name, r.Owned, ps)
			}
			used[r.Member] = true
			continue
		}
		found := false
		for m, ps := range members {
			if !used[m] && slices.Equal(ps, r.Owned) {
				used[m], found = true, true
				break
			}
		}
		if !found {
			return fmt.Sprintf("%s owns %v, which no member is assigned", c.Name, r.Owned)
		}
	}
	return ""
}

type cappedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (c *cappedWriter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w.Len() > 64<<10 {
		return len(b), nil
	}
	return c.w.Write(b)
}
