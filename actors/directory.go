package actors

import (
	"hash/maphash"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// directory maps group ids to their actors, for local calls that go
// straight to the group actor. The router writes it; every call reads it.
// Sharded maps keep a lookup to one short hash and one map probe.
type directory struct {
	seed   maphash.Seed
	shards [64]dirShard
}

type dirShard struct {
	mu sync.RWMutex
	m  map[string]dirEntry
}

// dirEntry keeps the id with the actor, so that an id given as bytes can
// be answered with the directory's own string (GroupID).
type dirEntry struct {
	id  string
	pid *actor.PID
}

func newDirectory() *directory {
	d := &directory{seed: maphash.MakeSeed()}
	for i := range d.shards {
		d.shards[i].m = map[string]dirEntry{}
	}
	return d
}

func (d *directory) shard(id string) *dirShard { return d.shardOf(maphash.String(d.seed, id)) }

func (d *directory) shardOf(h uint64) *dirShard { return &d.shards[h%uint64(len(d.shards))] }

func (d *directory) Load(id string) (*actor.PID, bool) {
	s := d.shard(id)
	s.mu.RLock()
	e, ok := s.m[id]
	s.mu.RUnlock()
	return e.pid, ok
}

// ID returns the directory's string equal to b, if it holds that group.
func (d *directory) ID(b []byte) (string, bool) {
	s := d.shardOf(maphash.Bytes(d.seed, b))
	s.mu.RLock()
	e, ok := s.m[string(b)]
	s.mu.RUnlock()
	return e.id, ok
}

func (d *directory) Store(id string, pid *actor.PID) {
	s := d.shard(id)
	s.mu.Lock()
	s.m[id] = dirEntry{id: id, pid: pid}
	s.mu.Unlock()
}

func (d *directory) Delete(id string) {
	s := d.shard(id)
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}
