// Package catalog keeps the topic catalog: topic name -> partition count (and a
// topic id), which the Kafka listener answers Metadata from and checks
// OffsetCommit against.
//
// State changes only through explicit commands (CreateTopic, DeleteTopic,
// GrowTopic). A topic's partition count only grows, and a topic keeps its id
// until it is deleted.
// Apply is the deterministic transition (no clock, no randomness: ids are chosen
// by whoever builds the command), so a replicated store can feed the same
// commands from its log. Propose is what callers use to request a change; in
// memory it applies at once, a replicated store replaces it with SetProposer.
package catalog

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Sentinel errors returned by Apply and Propose.
var (
	ErrTopicExists       = errors.New("topic already exists")
	ErrUnknownTopic      = errors.New("unknown topic")
	ErrInvalidTopic      = errors.New("invalid topic name")
	ErrInvalidPartitions = errors.New("invalid partition count")
	// ErrUnsupported: a replicated catalog whose nodes do not all apply
	// the command yet (see raftfsm's log formats) refused it.
	ErrUnsupported = errors.New("not every node of the cluster applies this change yet")
)

// MaxPartitions bounds the partition count of one topic.
const MaxPartitions = 1 << 16

// Topic is one catalog entry.
type Topic struct {
	Name       string
	ID         [16]byte
	Partitions int32
}

// Command is a catalog mutation.
type Command interface{ isCommand() }

// CreateTopic adds a topic. ID is chosen by the proposer (see NewTopicID).
type CreateTopic struct {
	Name       string
	ID         [16]byte
	Partitions int32
}

// DeleteTopic removes a topic by name.
type DeleteTopic struct {
	Name string
}

// GrowTopic raises a topic's partition count to Partitions (Kafka's
// CreatePartitions); the topic keeps its id. A non-zero ID must be the
// topic's: a proposer that looked the topic up sets it, so that a topic
// deleted and created again meanwhile is not grown in its place.
type GrowTopic struct {
	Name       string
	ID         [16]byte
	Partitions int32
}

func (CreateTopic) isCommand() {}
func (DeleteTopic) isCommand() {}
func (GrowTopic) isCommand()   {}

// Proposer submits a command and returns once it has been applied (or failed).
type Proposer func(ctx context.Context, cmd Command) error

// Catalog is a thread-safe topic catalog.
type Catalog struct {
	mu      sync.RWMutex
	topics  map[string]Topic
	propose Proposer
	// version counts the changes (under mu).
	version uint64
}

// New returns an empty in-memory catalog whose Propose applies directly.
func New() *Catalog {
	c := &Catalog{topics: make(map[string]Topic)}
	c.propose = func(_ context.Context, cmd Command) error { return c.Apply(cmd) }
	return c
}

// SetProposer replaces how Propose submits commands (e.g. through a replicated log
// whose apply step calls Apply). Call before the catalog is shared.
func (c *Catalog) SetProposer(p Proposer) { c.propose = p }

// Propose requests a change.
func (c *Catalog) Propose(ctx context.Context, cmd Command) error { return c.propose(ctx, cmd) }

// Apply executes a command against the state. It is deterministic.
func (c *Catalog) Apply(cmd Command) error {
	switch cmd := cmd.(type) {
	case CreateTopic:
		if err := ValidateName(cmd.Name); err != nil {
			return err
		}
		if cmd.Partitions <= 0 || cmd.Partitions > MaxPartitions {
			return fmt.Errorf("%w: %d", ErrInvalidPartitions, cmd.Partitions)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.topics[cmd.Name]; ok {
			return fmt.Errorf("%w: %s", ErrTopicExists, cmd.Name)
		}
		c.topics[cmd.Name] = Topic(cmd)
		c.version++
		return nil
	case DeleteTopic:
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.topics[cmd.Name]; !ok {
			return fmt.Errorf("%w: %s", ErrUnknownTopic, cmd.Name)
		}
		delete(c.topics, cmd.Name)
		c.version++
		return nil
	case GrowTopic:
		c.mu.Lock()
		defer c.mu.Unlock()
		t, ok := c.topics[cmd.Name]
		if !ok || (cmd.ID != [16]byte{} && cmd.ID != t.ID) {
			return fmt.Errorf("%w: %s", ErrUnknownTopic, cmd.Name)
		}
		if err := CheckGrow(t, cmd.Partitions); err != nil {
			return err
		}
		t.Partitions = cmd.Partitions
		c.topics[cmd.Name] = t
		c.version++
		return nil
	default:
		return fmt.Errorf("catalog: unknown command %T", cmd)
	}
}

// CheckGrow reports whether t may grow to partitions (GrowTopic's rules):
// an error wrapping ErrInvalidPartitions, which reads as Kafka's message,
// unless partitions is above t's count and at most MaxPartitions.
func CheckGrow(t Topic, partitions int32) error {
	switch {
	case partitions == t.Partitions:
		return growError(fmt.Sprintf("Topic already has %d partition(s).", t.Partitions))
	case partitions < t.Partitions:
		return growError(fmt.Sprintf("The topic %s currently has %d partition(s); %d would not be an increase.", t.Name, t.Partitions, partitions))
	case partitions > MaxPartitions:
		return growError(fmt.Sprintf("The topic %s would have %d partitions; a topic has at most %d.", t.Name, partitions, MaxPartitions))
	}
	return nil
}

// growError is a refused GrowTopic: ErrInvalidPartitions, worded as Kafka
// words it, so the Kafka listener can answer with the error's text.
type growError string

func (e growError) Error() string { return string(e) }
func (e growError) Unwrap() error { return ErrInvalidPartitions }

// Get returns a topic by name.
func (c *Catalog) Get(name string) (Topic, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.topics[name]
	return t, ok
}

// GetByID returns a topic by id.
func (c *Catalog) GetByID(id [16]byte) (Topic, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, t := range c.topics {
		if t.ID == id {
			return t, true
		}
	}
	return Topic{}, false
}

// HasPartition reports whether topic exists and has the partition.
func (c *Catalog) HasPartition(topic string, partition int32) bool {
	t, ok := c.Get(topic)
	return ok && partition >= 0 && partition < t.Partitions
}

// List returns all topics sorted by name.
func (c *Catalog) List() []Topic {
	c.mu.RLock()
	out := make([]Topic, 0, len(c.topics))
	for _, t := range c.topics {
		out = append(out, t)
	}
	c.mu.RUnlock()
	slices.SortFunc(out, func(a, b Topic) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Snapshot returns the full state (sorted by name).
func (c *Catalog) Snapshot() []Topic { return c.List() }

// Restore replaces the state with a snapshot.
func (c *Catalog) Restore(topics []Topic) {
	m := make(map[string]Topic, len(topics))
	for _, t := range topics {
		m[t.Name] = t
	}
	c.mu.Lock()
	c.topics = m
	c.version++
	c.mu.Unlock()
}

// Partitions returns every topic's partition count, in a new map, and the
// catalog's version: a number that changes whenever the catalog does.
func (c *Catalog) Partitions() (version uint64, partitions map[string]int32) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	partitions = make(map[string]int32, len(c.topics))
	for name, t := range c.topics {
		partitions[name] = t.Partitions
	}
	return c.version, partitions
}

// Version is a number that changes whenever the catalog does.
func (c *Catalog) Version() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.version
}

// NewTopicID returns a random non-zero topic id.
func NewTopicID() [16]byte {
	var id [16]byte
	for id == ([16]byte{}) {
		_, _ = rand.Read(id[:])
	}
	return id
}

// ValidateName applies Kafka's topic name rules: 1-249 characters of
// [a-zA-Z0-9._-], not "." or "..".
func ValidateName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 249 {
		return fmt.Errorf("%w: %q", ErrInvalidTopic, name)
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
		default:
			return fmt.Errorf("%w: %q", ErrInvalidTopic, name)
		}
	}
	return nil
}
