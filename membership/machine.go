package membership

import (
	"time"

	"github.com/cohort-coord/cohort/assignor"
	pb "github.com/cohort-coord/cohort/proto/cohort/group/v1"
)

// Phase is where a member is in its protocol loop.
type Phase uint8

const (
	// Idle: not started.
	Idle Phase = iota
	// Discovering: finding the coordinator (or waiting to retry).
	Discovering
	// Preparing: waiting for a revoke or lost callback before JoinGroup.
	Preparing
	// Joining: JoinGroup in flight (or waiting to retry it).
	Joining
	// Assigning: the leader waits for topic metadata to run its assignor.
	Assigning
	// Downgrading: waiting for the revoke of everything before SyncGroup.
	Downgrading
	// Syncing: SyncGroup in flight.
	Syncing
	// Stable: in a generation, heartbeating.
	Stable
	// Closing: revoking, committing and leaving.
	Closing
	// Stopped: done; the machine answers nothing more.
	Stopped
)

var phaseNames = [...]string{"Idle", "Discovering", "Preparing", "Joining", "Assigning", "Downgrading", "Syncing", "Stable", "Closing", "Stopped"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "Unknown"
}

// rebalancing reports whether a join or sync is under way.
func (p Phase) rebalancing() bool {
	return p == Preparing || p == Joining || p == Assigning || p == Downgrading || p == Syncing
}

// after says what a waiting callback unblocks.
type after uint8

const (
	afterNothing after = iota
	afterJoin
	afterSync
	afterClose
	afterAck // Consumer: report the revoked partitions gone
)

// retry says what the retry timer restarts.
type retry uint8

const (
	retryNone retry = iota
	retryDiscover
	retryJoin
	retryMetadata
	retryHeartbeat
)

type commitInFlight struct {
	token      uint64
	generation int32
	closing    bool
}

// Machine is one member's protocol state. It is not safe for concurrent use;
// its owner serialises calls.
type Machine struct {
	cfg        Config
	coopByRule bool // the Java consumer's rule: every balancer supports COOPERATIVE

	phase     Phase
	exclusive bool  // the coordinator enforces exclusive ownership
	resume    Phase // where Discovering returns to: Stable or Joining

	memberID   string
	generation int32
	protocol   string // selected in the current generation
	leader     bool
	members    []*pb.JoinGroupMember // the leader's view of the join
	// assignedFrom: the partition counts the leader took from Metadata for
	// its assignment in this generation (nil when none or not leader).
	assignedFrom   map[string]int32
	metadataTopics []string // the topics the leader sized from Metadata
	owned          set
	marks          map[TopicPartition]int64

	rejoinReason string
	followUp     bool // a rejoin is due once the waiting callback returns

	nextID, nextToken uint64
	joinID, syncID    uint64
	hbID, metaID      uint64
	findID, leaveID   uint64
	// The join and sync in flight when Close began (onClosingAnswer).
	closingJoinID, closingSyncID uint64
	// prevGeneration is the generation a JoinGroup answer moved the member
	// from, until a SyncGroup answer confirms the new one (-1: none): a
	// closing member returns to it if a failover lost the new one.
	prevGeneration int32
	hbGeneration   int32
	commits        map[uint64]commitInFlight

	waitToken  uint64
	waitThen   after
	closeStage closeStage
	// revoking is what the waited-for revoke callback gives up (nil when the
	// waited-for callback is no revoke): lost if the callback outlives the
	// rebalance timeout.
	revoking set
	// revokeSince is when the member began to give partitions up in the
	// current rebalance (zero: it is not): the coordinator's wait for it,
	// and so the revoke limit, runs from then however many revoke
	// callbacks follow, until it sends JoinGroup.
	revokeSince time.Time
	now         time.Time // of the call being handled

	retryWhat retry
	backoff   time.Duration

	err error
}

// New returns a machine for cfg, which must have passed Validate.
func New(cfg Config) *Machine {
	p, _ := assignor.CommonProtocol(cfg.Balancers...)
	return &Machine{
		cfg:            cfg,
		coopByRule:     p == assignor.Cooperative,
		generation:     assignor.DefaultGeneration,
		prevGeneration: assignor.DefaultGeneration,
		owned:          set{},
		marks:          map[TopicPartition]int64{},
		commits:        map[uint64]commitInFlight{},
	}
}

// Phase returns the current phase.
func (m *Machine) Phase() Phase { return m.phase }

// MemberID returns the member id the coordinator gave ("" before).
func (m *Machine) MemberID() string { return m.memberID }

// Generation returns the generation the member is in (-1 when none).
func (m *Machine) Generation() int32 { return m.generation }

// Protocol returns the assignor the group selected in the current generation.
func (m *Machine) Protocol() string { return m.protocol }

// Leader reports whether the member leads the current generation.
func (m *Machine) Leader() bool { return m.leader }

// Owned returns the partitions the member owns.
func (m *Machine) Owned() []assignor.TopicPartitions { return m.owned.list() }

// Err returns why the member stopped, nil while it runs or after Close.
func (m *Machine) Err() error { return m.err }

// Cooperative reports whether the member follows the cooperative protocol in
// a generation that selected the given assignor.
func (m *Machine) Cooperative(protocol string) bool {
	if !m.exclusive {
		return m.coopByRule
	}
	for _, b := range m.cfg.Balancers {
		if b.ProtocolName() == protocol {
			return b.IsCooperative()
		}
	}
	return m.coopByRule
}

func (m *Machine) id() uint64 {
	m.nextID++
	return m.nextID
}

func (m *Machine) send(fx *Effects, msg any) uint64 {
	id := m.id()
	fx.Requests = append(fx.Requests, Request{ID: id, Msg: msg})
	return id
}

func (m *Machine) callback(fx *Effects, kind CallbackKind, s set, wait bool) uint64 {
	m.nextToken++
	fx.Callbacks = append(fx.Callbacks, Callback{Token: m.nextToken, Kind: kind, Partitions: s.list(), Generation: m.generation, Wait: wait})
	return m.nextToken
}

// Start begins the member's loop: find the coordinator, then join.
func (m *Machine) Start(now time.Time, fx *Effects) {
	m.now = now
	if m.phase != Idle {
		return
	}
	m.resume = Joining
	m.discover(fx)
}

func (m *Machine) retryAfter(fx *Effects, what retry) {
	if m.backoff == 0 {
		m.backoff = m.cfg.RetryBackoff
	} else {
		m.backoff = min(2*m.backoff, m.cfg.MaxRetryBackoff)
	}
	m.retryWhat = what
	fx.arm(TimerRetry, m.backoff)
}

// answered records that the coordinator answered: the session runs from now.
func (m *Machine) answered(fx *Effects) {
	m.backoff = 0
	if m.generation >= 0 || len(m.owned) > 0 {
		fx.arm(TimerSession, m.cfg.SessionTimeout)
	}
}

// stop ends the member: what it owns is lost (when err is set) and nothing
// more is sent.
func (m *Machine) stop(fx *Effects, err error) {
	if m.phase == Stopped {
		return
	}
	if len(m.owned) > 0 {
		m.callback(fx, Lost, m.owned, false)
		m.owned = set{}
	}
	m.phase = Stopped
	m.err = err
	m.waitToken, m.revoking = 0, nil
	fx.cancel(TimerRevoke)
	for id, c := range m.commits {
		if !c.closing {
			fx.Commits = append(fx.Commits, CommitResult{Token: c.token, Err: ErrIllegalState})
		}
		delete(m.commits, id)
	}
	fx.cancel(TimerHeartbeat)
	fx.cancel(TimerSession)
	fx.cancel(TimerRetry)
	fx.Stopped, fx.Err = true, err
}

// OnResponse feeds the answer to request id (or the transport error that
// stands for it) into the machine.
func (m *Machine) OnResponse(now time.Time, id uint64, res any, err error, fx *Effects) {
	m.now = now
	if m.phase == Stopped || id == 0 {
		return
	}
	switch {
	case id == m.findID:
		m.findID = 0
		m.onFound(res, err, fx)
	case id == m.joinID:
		m.joinID = 0
		r, _ := res.(*pb.JoinGroupResponse)
		m.onJoin(r, err, fx)
	case id == m.metaID:
		m.metaID = 0
		r, _ := res.(*MetadataResponse)
		m.onMetadata(r, err, fx)
	case id == m.syncID:
		m.syncID = 0
		r, _ := res.(*pb.SyncGroupResponse)
		m.onSync(r, err, fx)
	case id == m.hbID:
		m.hbID = 0
		r, _ := res.(*pb.HeartbeatResponse)
		m.onHeartbeat(r, err, fx)
	case id == m.leaveID:
		m.leaveID = 0
		m.stop(fx, nil)
	case id == m.closingJoinID:
		m.closingJoinID = 0
		r, _ := res.(*pb.JoinGroupResponse)
		m.onClosingAnswer(r.GetErrorCode(), r.GetMemberId(), r.GetGenerationId(), err, fx)
	case id == m.closingSyncID:
		m.closingSyncID = 0
		r, _ := res.(*pb.SyncGroupResponse)
		m.onClosingAnswer(r.GetErrorCode(), m.memberID, m.generation, err, fx)
	default:
		if c, ok := m.commits[id]; ok {
			delete(m.commits, id)
			r, _ := res.(*pb.OffsetCommitResponse)
			m.onCommit(c, r, err, fx)
		}
	}
}

// OnTimer feeds a timer fire into the machine.
func (m *Machine) OnTimer(now time.Time, kind TimerKind, fx *Effects) {
	m.now = now
	if m.phase == Stopped {
		return
	}
	switch kind {
	case TimerHeartbeat:
		m.sendHeartbeat(fx)
	case TimerSession:
		m.onSessionExpired(fx)
	case TimerRetry:
		what := m.retryWhat
		m.retryWhat = retryNone
		switch what {
		case retryDiscover:
			m.discover(fx)
		case retryJoin:
			if m.phase == Joining {
				m.sendJoin(fx)
			}
		case retryMetadata:
			if m.phase == Assigning {
				m.assign(fx)
			}
		case retryHeartbeat:
			m.sendHeartbeat(fx)
		}
	case TimerRevoke:
		m.onRevokeTimeout(fx)
	case TimerMetadata:
		if m.phase == Stable && m.leader && m.metaID == 0 && len(m.metadataTopics) > 0 {
			m.metaID = m.send(fx, &MetadataRequest{Topics: m.metadataTopics})
		}
	}
}
