package chaos

import (
	"encoding/json"
	"os"
	"sort"
	"sync"
	"time"

	clustertest "github.com/cohort-coord/cohort/cluster-test"
)

// OpFetch is an OffsetFetch recorded in the history: Offsets holds what it
// answered (partition -> offset, -1 for none).
const OpFetch = "fetch"

// Fault is one nemesis action, from injection to recovery.
type Fault struct {
	Kind    string    `json:"kind"`   // kill, pause, partition, transfer, membership, snapshot
	Detail  string    `json:"detail"` // e.g. "leader", "isolated-leader", "long"
	Targets []string  `json:"targets"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	// Leader is the Raft leader when the fault began.
	Leader string `json:"leader"`
	Note   string `json:"note,omitempty"`
}

// LeaderSample is the leader seen at a moment ("" for none).
type LeaderSample struct {
	At     time.Time `json:"at"`
	Leader string    `json:"leader"`
	Term   uint64    `json:"term"`
	// Load is the machine's 1-minute load average then: on a machine
	// with more runnable threads than cores, heartbeats are late and
	// leaders step down without a fault.
	Load float64 `json:"load,omitempty"`
}

// Event is a workload membership change or a client callback: add, crash,
// assigned, revoked, lost.
type Event struct {
	At         time.Time `json:"at"`
	Group      string    `json:"group"`
	Client     string    `json:"client"`
	Kind       string    `json:"kind"`
	Partitions []int32   `json:"partitions,omitempty"`
	Gen        int32     `json:"gen,omitempty"` // a franz-go consumer's generation at the callback
}

// GroupInfo describes one group of the workload.
type GroupInfo struct {
	ID         string `json:"id"`
	Topic      string `json:"topic"`
	Partitions int32  `json:"partitions"`
	Style      string `json:"style"` // eager, static, cooperative (kgo)
}

// Op is a clustertest.Op as saved: the error only as text (Op.Err stays
// nil in a Record; ClusterOps puts it back).
type Op struct {
	clustertest.Op
	ErrText string `json:"err_text,omitempty"`
}

// Unknown reports whether the op's outcome is unknown (no answer).
func (o *Op) Unknown() bool { return o.ErrText != "" }

// OK reports whether the op was answered without error.
func (o *Op) OK() bool { return o.ErrText == "" && o.Code == 0 }

// Record is everything a run observed; it is saved as JSON and the checkers
// run on it.
type Record struct {
	Seed             uint64            `json:"seed"`
	Nodes            []string          `json:"nodes"`
	KafkaAddrs       map[string]string `json:"kafka_addrs"` // node id -> Kafka address
	Nemeses          []string          `json:"nemeses"`
	Bugs             string            `json:"bugs,omitempty"`
	SessionTimeout   time.Duration     `json:"session_timeout"`
	RebalanceTimeout time.Duration     `json:"rebalance_timeout"`
	Groups           []GroupInfo       `json:"groups"`
	Start            time.Time         `json:"start"`        // the workload started
	FaultsStart      time.Time         `json:"faults_start"` // the workload settled, faults began
	FaultsEnd        time.Time         `json:"faults_end"`   // the final heal began
	Healed           time.Time         `json:"healed"`       // every node back, voters agreed
	End              time.Time         `json:"end"`
	Ops              []*Op             `json:"ops"`
	Faults           []Fault           `json:"faults"`
	Leaders          []LeaderSample    `json:"leaders"`
	Events           []Event           `json:"events"`
	// Final committed offsets read after the heal, per group/topic/partition.
	Final []FinalOffset `json:"final"`
	// Live results of the checks that need the running cluster.
	Live map[string][]Violation `json:"live"`
	// SnapshotInstalls counts "Installed remote snapshot" in node logs.
	SnapshotInstalls int `json:"snapshot_installs"`
	// PeakLoad is the highest 1-minute load average sampled (every 200 ms).
	PeakLoad float64 `json:"peak_load,omitempty"`
}

// FinalOffset is one committed offset read after the heal.
type FinalOffset struct {
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Violation is one broken invariant, with the moment it shows in the
// history (zero when it has none).
type Violation struct {
	Invariant string    `json:"invariant"`
	At        time.Time `json:"at"`
	Text      string    `json:"text"`
}

// recorder collects faults, leaders and events while a run goes on.
type recorder struct {
	mu       sync.Mutex
	faults   []Fault
	leaders  []LeaderSample
	events   []Event
	peakLoad float64
}

func (r *recorder) fault(f Fault) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
}

func (r *recorder) event(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) leader(s LeaderSample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.peakLoad = max(r.peakLoad, s.Load)
	if n := len(r.leaders); n > 0 && r.leaders[n-1].Leader == s.Leader && r.leaders[n-1].Term == s.Term {
		return
	}
	r.leaders = append(r.leaders, s)
}

// leadershipSince returns how often leadership changed (another leader, a
// new term, or none) after t, and when it last did (t when it did not).
func (r *recorder) leadershipSince(t time.Time) (int, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, last := 0, t
	for i, s := range r.leaders {
		if i > 0 && s.At.After(t) {
			n++
			last = s.At
		}
	}
	return n, last
}

func (r *recorder) lastLeader() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.leaders); n > 0 {
		return r.leaders[n-1].Leader
	}
	return ""
}

func (r *recorder) counts() (faults, leaderChanges int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.faults), leaderChanges0(r.leaders)
}

func leaderChanges0(ls []LeaderSample) int {
	n, last := 0, ""
	for _, s := range ls {
		if s.Leader != "" && s.Leader != last {
			if last != "" {
				n++
			}
			last = s.Leader
		}
	}
	return n
}

// LeaderChanges counts the moments the leader became another node.
func (r *Record) LeaderChanges() int { return leaderChanges0(r.Leaders) }

// MaxLoad is the highest 1-minute load average sampled during the run.
func (r *Record) MaxLoad() float64 {
	m := r.PeakLoad
	for _, s := range r.Leaders {
		m = max(m, s.Load)
	}
	return m
}

// sortOps orders ops by start time (stable for equal starts).
func sortOps(ops []*Op) {
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Start.Before(ops[j].Start) })
}

// ClusterOps returns the ops as clustertest ops for its checkers.
func (r *Record) ClusterOps() []*clustertest.Op {
	out := make([]*clustertest.Op, 0, len(r.Ops))
	for _, o := range r.Ops {
		c := o.Op
		if o.ErrText != "" {
			c.Err = savedError(o.ErrText)
		}
		out = append(out, &c)
	}
	return out
}

func fromCluster(ops []*clustertest.Op) []*Op {
	out := make([]*Op, 0, len(ops))
	for _, o := range ops {
		c := &Op{Op: *o}
		if o.Err != nil {
			c.ErrText = o.Err.Error()
			c.Op.Err = nil
		}
		out = append(out, c)
	}
	sortOps(out)
	return out
}

// Save writes the record as JSON.
func (r *Record) Save(path string) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Load reads a record Save wrote.
func Load(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

type savedError string

func (e savedError) Error() string { return string(e) }

// nodeOfAddr returns the node id of a Kafka address.
func (r *Record) nodeOfAddr(addr string) string {
	for id, a := range r.KafkaAddrs {
		if a == addr {
			return id
		}
	}
	return addr
}

func (r *recorder) peakLoadNow() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.peakLoad
}
