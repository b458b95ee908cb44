package membership

import (
	"fmt"
	"slices"
	"time"

	"github.com/cohort-coord/cohort/assignor"
)

// Consumer is one member's state under the consumer group protocol (KIP-848,
// ConsumerGroupHeartbeat): the coordinator assigns, the member reconciles.
// It is driven like Machine and answers through the same Effects. It is not
// safe for concurrent use; its owner serialises calls.
//
// A Consumer whose first heartbeat is answered UNSUPPORTED_VERSION falls
// back to the classic protocol: from then on it hands every call to a
// Machine built from the same configuration (GroupProtocol tells).
type Consumer struct {
	cfg      Config
	topics   []string // the subscription, sorted, without duplicates
	memberID string
	epoch    int32 // 0 while joining; the coordinator's member epoch after
	phase    Phase
	resume   Phase // where Discovering returns to: Joining or Stable
	served   bool  // a heartbeat succeeded: the coordinator speaks the protocol
	sent     bool  // a heartbeat went out: the coordinator may know the member
	interval time.Duration

	// owned: what the application holds (Assigned given, Revoked or Lost
	// not returned yet). target: the last assignment the coordinator sent
	// (nil: none since the member joined). revoking: what the running
	// Revoked callback gives up (nil: none). reported: the owned partitions
	// the coordinator last heard of in a full request (nil: unknown, so
	// the next request is a full one).
	owned, target, revoking, reported set
	revokeSince                       time.Time
	revokeExpired                     bool // the revoke outlasted the rebalance timeout
	rejoinAfter                       bool // fenced while a revoke ran: lost and rejoin once it returned

	hbID    uint64
	hbSent  time.Time
	hbFull  set // what the heartbeat in flight reports (nil: a keepalive)
	findID  uint64
	leaveID uint64

	waitToken    uint64
	waitThen     after
	closeStage   closeStage
	leavePending bool // Close waits for the heartbeat in flight before leaving

	commits map[uint64]*consumerCommit
	parked  []*consumerCommit // STALE_MEMBER_EPOCH: retried after the next heartbeat answer
	marks   map[TopicPartition]int64

	retryWhat         retry
	backoff           time.Duration
	nextID, nextToken uint64
	now               time.Time
	err               error

	classic *Machine // set once the member fell back to the classic protocol
}

// NewConsumer returns a consumer-protocol member for cfg, which must have
// passed Validate. memberID is the member's id for its whole life: the
// client generates it (ConsumerGroupHeartbeat v1; a random UUID is the
// usual choice) and keeps it across rejoins.
func NewConsumer(cfg Config, memberID string) *Consumer {
	topics := slices.Clone(cfg.Topics)
	slices.Sort(topics)
	return &Consumer{
		cfg:      cfg,
		topics:   slices.Compact(topics),
		memberID: memberID,
		interval: cfg.HeartbeatInterval,
		owned:    set{},
		commits:  map[uint64]*consumerCommit{},
		marks:    map[TopicPartition]int64{},
	}
}

// Phase returns the current phase: Discovering, Joining (the epoch-0
// heartbeat), Preparing (a Lost callback runs before the member rejoins),
// Stable (in the group, heartbeating and reconciling), Closing, Stopped.
func (m *Consumer) Phase() Phase {
	if m.classic != nil {
		return m.classic.Phase()
	}
	return m.phase
}

// MemberID returns the member id.
func (m *Consumer) MemberID() string {
	if m.classic != nil {
		return m.classic.MemberID()
	}
	return m.memberID
}

// Generation returns the member epoch (-1 while the member has none).
func (m *Consumer) Generation() int32 {
	if m.classic != nil {
		return m.classic.Generation()
	}
	if m.epoch <= 0 {
		return assignor.DefaultGeneration
	}
	return m.epoch
}

// Protocol returns "": the coordinator does not tell consumer-protocol
// members which assignor it used.
func (m *Consumer) Protocol() string {
	if m.classic != nil {
		return m.classic.Protocol()
	}
	return ""
}

// GroupProtocol returns ConsumerProtocol, or ClassicProtocol after a
// fallback.
func (m *Consumer) GroupProtocol() string {
	if m.classic != nil {
		return ClassicProtocol
	}
	return ConsumerProtocol
}

// Owned returns the partitions the member owns.
func (m *Consumer) Owned() []assignor.TopicPartitions {
	if m.classic != nil {
		return m.classic.Owned()
	}
	return m.owned.list()
}

// Err returns why the member stopped, nil while it runs or after Close.
func (m *Consumer) Err() error {
	if m.classic != nil {
		return m.classic.Err()
	}
	return m.err
}

func (m *Consumer) send(fx *Effects, msg any) uint64 {
	m.nextID++
	fx.Requests = append(fx.Requests, Request{ID: m.nextID, Msg: msg})
	return m.nextID
}

func (m *Consumer) callback(fx *Effects, kind CallbackKind, s set, wait bool) uint64 {
	m.nextToken++
	fx.Callbacks = append(fx.Callbacks, Callback{Token: m.nextToken, Kind: kind, Partitions: s.list(), Generation: m.epoch, Wait: wait})
	return m.nextToken
}

func (m *Consumer) wait(token uint64, then after) { m.waitToken, m.waitThen = token, then }

// Start begins the member's loop: find the coordinator, then join.
func (m *Consumer) Start(now time.Time, fx *Effects) {
	if m.classic != nil {
		m.classic.Start(now, fx)
		return
	}
	m.now = now
	if m.phase != Idle {
		return
	}
	m.resume = Joining
	m.discover(fx)
}

func (m *Consumer) discover(fx *Effects) {
	m.phase = Discovering
	m.hbID, m.hbFull = 0, nil
	m.reported = nil
	fx.cancel(TimerHeartbeat)
	fx.cancel(TimerRetry)
	m.retryWhat = retryNone
	m.findID = m.send(fx, &FindCoordinator{Group: m.cfg.Group})
}

// rediscover finds the coordinator again after it moved or did not answer,
// then goes on where the member was.
func (m *Consumer) rediscover(fx *Effects) {
	m.resume = Stable
	if m.epoch == 0 {
		m.resume = Joining
	}
	m.discover(fx)
}

func (m *Consumer) retryAfter(fx *Effects, what retry) {
	if m.backoff == 0 {
		m.backoff = m.cfg.RetryBackoff
	} else {
		m.backoff = min(2*m.backoff, m.cfg.MaxRetryBackoff)
	}
	m.retryWhat = what
	fx.cancel(TimerHeartbeat)
	fx.arm(TimerRetry, m.backoff)
}

func (m *Consumer) onFound(res any, err error, fx *Effects) {
	if _, ok := res.(*CoordinatorFound); err != nil || !ok {
		m.retryAfter(fx, retryDiscover)
		return
	}
	switch {
	case m.phase == Closing:
		if m.closeStage == closeDone {
			if m.leavePending {
				m.sendLeave(fx)
			}
		} else if m.epoch > 0 {
			m.sendHeartbeat(fx)
		}
	case m.waitThen == afterJoin || m.rejoinAfter:
		m.phase = Preparing // the Lost callback returns first, then the member joins
	default:
		m.phase = m.resume
		m.sendHeartbeat(fx)
	}
}

// join sends the epoch-0 heartbeat that (re)joins the group.
func (m *Consumer) join(fx *Effects) {
	m.phase = Joining
	m.epoch = 0
	m.target, m.reported = nil, nil
	m.sendHeartbeat(fx)
}

// fence gives up the member's epoch: the coordinator fenced it, or it was
// silent for longer than the coordinator keeps a member. What the member
// owns may be another's already: it is reported lost, and the member
// rejoins at epoch 0 with the same id once the Lost callback returned.
func (m *Consumer) fence(fx *Effects) {
	discovering := m.phase == Discovering
	fx.cancel(TimerSession)
	if !discovering {
		fx.cancel(TimerHeartbeat)
		fx.cancel(TimerRetry)
		m.retryWhat = retryNone
	}
	m.hbID, m.hbFull = 0, nil
	m.epoch = 0
	m.target, m.reported = nil, nil
	m.failParked(fx, fmt.Errorf("%w: the member was fenced", ErrCommitFailed))
	park := func() {
		if discovering {
			m.resume = Joining
		} else {
			m.phase = Preparing
		}
	}
	if m.revoking != nil {
		m.rejoinAfter = true // once the running revoke returned
		park()
		return
	}
	if len(m.owned) > 0 {
		lost := m.owned
		m.owned = set{}
		m.wait(m.callback(fx, Lost, lost, true), afterJoin)
		park()
		return
	}
	if discovering {
		m.resume = Joining
		return
	}
	m.join(fx)
}

// fallback hands the member to the classic protocol: the coordinator does
// not serve ConsumerGroupHeartbeat.
func (m *Consumer) fallback(fx *Effects) {
	if m.cfg.TopicRegex != "" {
		// The classic protocol has no subscription by regex.
		m.stop(fx, fmt.Errorf("%w: subscription by regex: the coordinator does not serve the consumer group protocol", ErrUnsupported))
		return
	}
	fx.cancel(TimerHeartbeat)
	fx.cancel(TimerSession)
	fx.cancel(TimerRetry)
	c := New(m.cfg)
	c.nextID, c.nextToken = m.nextID, m.nextToken
	c.marks = m.marks
	m.classic = c
	c.Start(m.now, fx)
}

// stop ends the member: what it owns is lost and nothing more is sent.
func (m *Consumer) stop(fx *Effects, err error) {
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
	for id, c := range m.commits {
		if !c.closing {
			fx.Commits = append(fx.Commits, CommitResult{Token: c.token, Err: ErrIllegalState})
		}
		delete(m.commits, id)
	}
	m.failParked(fx, ErrIllegalState)
	for _, k := range []TimerKind{TimerHeartbeat, TimerSession, TimerRetry, TimerRevoke} {
		fx.cancel(k)
	}
	fx.Stopped, fx.Err = true, err
}

// OnResponse feeds the answer to request id (or the transport error that
// stands for it) into the member.
func (m *Consumer) OnResponse(now time.Time, id uint64, res any, err error, fx *Effects) {
	if m.classic != nil {
		m.classic.OnResponse(now, id, res, err, fx)
		return
	}
	m.now = now
	if m.phase == Stopped || id == 0 {
		return
	}
	switch id {
	case m.findID:
		m.findID = 0
		m.onFound(res, err, fx)
	case m.hbID:
		m.onHeartbeat(res, err, fx)
	case m.leaveID:
		m.leaveID = 0
		m.stop(fx, nil)
	default:
		if c, ok := m.commits[id]; ok {
			delete(m.commits, id)
			m.onCommit(c, res, err, fx)
		}
	}
}

// OnTimer feeds a timer fire into the member.
func (m *Consumer) OnTimer(now time.Time, kind TimerKind, fx *Effects) {
	if m.classic != nil {
		m.classic.OnTimer(now, kind, fx)
		return
	}
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
		case retryHeartbeat:
			m.sendHeartbeat(fx)
		}
	case TimerRevoke:
		if m.revoking != nil {
			// The coordinator fences a member that has not acknowledged a
			// revocation within its rebalance timeout: once the callback
			// returns, what the member kept is lost and it rejoins.
			m.revokeExpired = true
		}
	}
}

// EnforceRebalance has no counterpart in the consumer protocol: the
// coordinator reassigns on every change of membership, subscription or
// topic metadata, and Kafka (as of 4.x) gives clients no request to force
// one. It returns ErrUnsupported (ErrIllegalState once closed) and sends
// nothing.
func (m *Consumer) EnforceRebalance(now time.Time, reason string, fx *Effects) error {
	if m.classic != nil {
		return m.classic.EnforceRebalance(now, reason, fx)
	}
	m.now = now
	if m.phase == Stopped || m.phase == Closing || m.phase == Idle {
		return ErrIllegalState
	}
	return fmt.Errorf("%w: the consumer protocol has no client-triggered rebalance (the coordinator assigns on every membership, subscription or metadata change)", ErrUnsupported)
}
