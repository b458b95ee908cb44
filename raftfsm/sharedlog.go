package raftfsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/armon/go-metrics"
	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"
)

// sharedLog holds the Raft logs and stable stores of every shard of a
// sharded node in one bbolt file, a bucket pair per shard, and commits the
// writes the shards make at the same time in one transaction: one set of
// page writes and fsyncs for all of them (group commit across shards).
//
// With a file per shard, each shard's entries cost every node a bbolt
// transaction and two fdatasyncs of their own; under a commit load on 16
// shards that was a third of a node's CPU (cluster-test/BENCHMARKS.md).
// Here a shard's write that arrives while another transaction is being
// committed waits for it and leaves with the others queued behind it: no
// timer, no added latency when the node is idle.
//
// bbolt gives the crash safety (copy-on-write pages, a meta page written
// and synced after the data); a write is reported only once its
// transaction committed. Each shard's Raft calls its log from one goroutine
// at a time, so a shard's writes keep their order.
type sharedLog struct {
	db   *bbolt.DB
	path string

	mu    sync.Mutex
	queue []*logWrite
	busy  bool // a caller is committing; later callers queue

	// commits and writes count transactions and the shard writes in them.
	commits, writes atomic.Uint64
}

// logWrite is one caller's part of a transaction.
type logWrite struct {
	fn  func(*bbolt.Tx) error
	err error
	// done receives true once the write committed (or failed: err), and
	// false when its caller is to commit the queue itself.
	done chan bool
}

// sharedLogFile is the shared log's file name in a sharded data dir's
// shards folder.
const sharedLogFile = "log.db"

// openSharedLog opens (or creates) the shared log of a sharded data dir.
func openSharedLog(dir string) (*sharedLog, error) {
	if err := os.MkdirAll(filepath.Join(dir, "shards"), 0o755); err != nil {
		return nil, fmt.Errorf("raft dir: %w", err)
	}
	path := filepath.Join(dir, "shards", sharedLogFile)
	db, err := bbolt.Open(path, 0o600, boltOptions())
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("raft log %s is held by another process (is a cohortd already running on this data dir?)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("raft log: %w", err)
	}
	return &sharedLog{db: db, path: path}, nil
}

// boltOptions are the bbolt options of every Raft log file. Log truncation
// after snapshots frees pages all the time. With bolt's defaults every
// commit rewrites the whole free list (an array), so each write grew slower
// as the file aged. The free list is instead kept in memory as a map and
// rebuilt by a scan when the file is opened; the data written and synced is
// the same.
func boltOptions() *bbolt.Options {
	return &bbolt.Options{
		Timeout:        5 * time.Second, // another process holds the file: fail, not hang
		NoFreelistSync: true,
		FreelistType:   bbolt.FreelistMapType,
	}
}

func (s *sharedLog) close() error { return s.db.Close() }

// update runs fn in a write transaction, together with the writes of other
// shards queued at the same time, and returns once it committed.
func (s *sharedLog) update(fn func(*bbolt.Tx) error) error {
	w := &logWrite{fn: fn, done: make(chan bool, 1)}
	s.mu.Lock()
	s.queue = append(s.queue, w)
	if s.busy {
		s.mu.Unlock()
		if <-w.done {
			return w.err
		}
		// Handed the queue: commit it.
		s.mu.Lock()
	}
	s.busy = true
	batch := s.queue
	s.queue = nil
	s.mu.Unlock()

	s.commit(batch)
	for _, o := range batch {
		if o != w {
			o.done <- true
		}
	}
	s.mu.Lock()
	if len(s.queue) > 0 {
		// The first caller that queued meanwhile commits the next batch.
		next := s.queue[0]
		s.mu.Unlock()
		next.done <- false
	} else {
		s.busy = false
		s.mu.Unlock()
	}
	return w.err
}

// commit writes batch in one transaction. If that fails, each write is
// tried in a transaction of its own, so that one shard's failure (a
// missing bucket, a full disk) is that shard's alone.
func (s *sharedLog) commit(batch []*logWrite) {
	s.commits.Add(1)
	s.writes.Add(uint64(len(batch)))
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for _, w := range batch {
			if err := w.fn(tx); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil || len(batch) == 1 {
		for _, w := range batch {
			w.err = err
		}
		return
	}
	for _, w := range batch {
		w.err = s.db.Update(w.fn)
	}
}

// shard returns the log and stable store of shard k, creating its buckets
// when they do not exist.
func (s *sharedLog) shard(k int) (*shardLog, error) {
	l := &shardLog{
		log:    s,
		logs:   []byte(fmt.Sprintf("shard-%02d-logs", k)),
		stable: []byte(fmt.Sprintf("shard-%02d-stable", k)),
	}
	err := s.db.Update(func(tx *bbolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(l.logs); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(l.stable)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("raft log %s: %w", s.path, err)
	}
	return l, nil
}

// shardLog is one shard's raft.LogStore and raft.StableStore in a
// sharedLog. Log keys are big-endian indexes, so a cursor walks them in
// order; values are encodeLog's.
type shardLog struct {
	log    *sharedLog
	logs   []byte // bucket names
	stable []byte
}

var (
	_ raft.LogStore    = (*shardLog)(nil)
	_ raft.StableStore = (*shardLog)(nil)
)

// bucket returns the bucket name of tx, or an error when it does not
// exist (bbolt's nil bucket would panic in the shared transaction).
func bucket(tx *bbolt.Tx, name []byte) (*bbolt.Bucket, error) {
	if b := tx.Bucket(name); b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("raft log bucket %s: %w", name, bbolt.ErrBucketNotFound)
}

// errKeyNotFound is what hashicorp/raft expects of a StableStore for a key
// never set: it compares the error's text with "not found".
var errKeyNotFound = errors.New("not found")

func (l *shardLog) FirstIndex() (uint64, error) { return l.edge(true) }

func (l *shardLog) LastIndex() (uint64, error) { return l.edge(false) }

func (l *shardLog) edge(first bool) (uint64, error) {
	var idx uint64
	err := l.log.db.View(func(tx *bbolt.Tx) error {
		b, err := bucket(tx, l.logs)
		if err != nil {
			return err
		}
		c := b.Cursor()
		var k []byte
		if first {
			k, _ = c.First()
		} else {
			k, _ = c.Last()
		}
		if k != nil {
			idx = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return idx, err
}

func (l *shardLog) GetLog(index uint64, out *raft.Log) error {
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], index)
	return l.log.db.View(func(tx *bbolt.Tx) error {
		b, err := bucket(tx, l.logs)
		if err != nil {
			return err
		}
		v := b.Get(key[:])
		if v == nil {
			return raft.ErrLogNotFound
		}
		return decodeLog(index, v, out)
	})
}

func (l *shardLog) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

func (l *shardLog) StoreLogs(logs []*raft.Log) error {
	start := time.Now()
	defer metrics.MeasureSince([]string{"raft", "boltdb", "storeLogs"}, start)
	return l.log.update(func(tx *bbolt.Tx) error {
		b, err := bucket(tx, l.logs)
		if err != nil {
			return err
		}
		for _, e := range logs {
			// bbolt keeps the key and value slices until the transaction
			// ends: every entry gets its own.
			if err := b.Put(binary.BigEndian.AppendUint64(nil, e.Index), encodeLog(e)); err != nil {
				return err
			}
		}
		return nil
	})
}

// DeleteRange deletes the entries from min to max, both included.
func (l *shardLog) DeleteRange(min, max uint64) error {
	return l.log.update(func(tx *bbolt.Tx) error {
		var key [8]byte
		binary.BigEndian.PutUint64(key[:], min)
		b, err := bucket(tx, l.logs)
		if err != nil {
			return err
		}
		c := b.Cursor()
		for k, _ := c.Seek(key[:]); k != nil && binary.BigEndian.Uint64(k) <= max; k, _ = c.Next() {
			if err := c.Delete(); err != nil {
				return err
			}
		}
		return nil
	})
}

func (l *shardLog) Set(key, val []byte) error {
	return l.log.update(func(tx *bbolt.Tx) error {
		b, err := bucket(tx, l.stable)
		if err != nil {
			return err
		}
		return b.Put(key, val)
	})
}

func (l *shardLog) Get(key []byte) ([]byte, error) {
	var out []byte
	err := l.log.db.View(func(tx *bbolt.Tx) error {
		b, err := bucket(tx, l.stable)
		if err != nil {
			return err
		}
		v := b.Get(key)
		if v == nil {
			return errKeyNotFound
		}
		out = append([]byte(nil), v...)
		return nil
	})
	return out, err
}

func (l *shardLog) SetUint64(key []byte, val uint64) error {
	return l.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

func (l *shardLog) GetUint64(key []byte) (uint64, error) {
	v, err := l.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raft stable key %q: %d bytes, not 8", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// logVersion heads every encoded entry, so that a later layout can be
// told apart.
const logVersion = 1

// encodeLog encodes an entry without its index (the key holds it):
// version, term, type, append time (Unix ns), then data and extensions,
// each behind its length.
func encodeLog(e *raft.Log) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+1+2*binary.MaxVarintLen64+len(e.Data)+len(e.Extensions))
	b = append(b, logVersion)
	b = binary.AppendUvarint(b, e.Term)
	b = append(b, byte(e.Type))
	var at int64
	if !e.AppendedAt.IsZero() {
		at = e.AppendedAt.UnixNano()
	}
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(e.Data)))
	b = append(b, e.Data...)
	b = binary.AppendUvarint(b, uint64(len(e.Extensions)))
	return append(b, e.Extensions...)
}

// errBadLogEntry is returned for an entry that does not decode.
var errBadLogEntry = errors.New("raft log entry does not decode")

// decodeLog decodes what encodeLog wrote into out; the data and extensions
// are copied out of v (bbolt's memory is only valid in its transaction).
func decodeLog(index uint64, v []byte, out *raft.Log) error {
	bad := func(what string) error { return fmt.Errorf("%w: index %d: %s", errBadLogEntry, index, what) }
	if len(v) == 0 || v[0] != logVersion {
		return bad("unknown version")
	}
	v = v[1:]
	term, n := binary.Uvarint(v)
	if n <= 0 || len(v) < n+1 {
		return bad("term")
	}
	typ := raft.LogType(v[n])
	v = v[n+1:]
	at, n := binary.Varint(v)
	if n <= 0 {
		return bad("append time")
	}
	v = v[n:]
	field := func(what string) ([]byte, error) {
		l, n := binary.Uvarint(v)
		if n <= 0 || l > uint64(len(v)-n) {
			return nil, bad(what)
		}
		f := v[n : n+int(l)]
		v = v[n+int(l):]
		if len(f) == 0 {
			return nil, nil
		}
		return append([]byte(nil), f...), nil
	}
	data, err := field("data")
	if err != nil {
		return err
	}
	ext, err := field("extensions")
	if err != nil {
		return err
	}
	if len(v) != 0 {
		return bad("trailing bytes")
	}
	*out = raft.Log{Index: index, Term: term, Type: typ, Data: data, Extensions: ext}
	if at != 0 {
		out.AppendedAt = time.Unix(0, at)
	}
	return nil
}

// Close does nothing: the node closes the shared file once every shard's
// Raft has stopped.
func (l *shardLog) Close() error { return nil }

// stableKeys are the keys hashicorp/raft keeps in a stable store.
var stableKeys = []string{"CurrentTerm", "LastVoteTerm", "LastVoteCand"}

// movedNote is left, as a folder named like the old file, where a shard's
// raft-boltdb file was: a cohortd from before the shared log then fails to
// open the shard instead of starting it from an empty log, which would
// forget the shard's term and vote.
const movedNote = "This shard's Raft log moved into ../log.db, the node's shared log. The old file is raft.db.moved.\n"

// moveShardLog copies the raft-boltdb file a shard kept before the shared
// log (path) into to, in one transaction, then renames the file to
// raft.db.moved and leaves movedNote in its place. Nothing to do when there
// is no such file. A crash before the rename copies again on the next
// start, over what the first copy wrote.
func moveShardLog(path string, to *shardLog, logger *slog.Logger) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && fi.IsDir()) {
		return nil
	}
	if err != nil {
		return err
	}
	old, err := openBoltLog(path)
	if err != nil {
		return err
	}
	first, err := old.FirstIndex()
	if err != nil {
		old.Close()
		return err
	}
	last, err := old.LastIndex()
	if err != nil {
		old.Close()
		return err
	}
	err = to.log.update(func(tx *bbolt.Tx) error {
		for _, b := range [][]byte{to.logs, to.stable} {
			if err := tx.DeleteBucket(b); err != nil && !errors.Is(err, bbolt.ErrBucketNotFound) {
				return err
			}
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		logs := tx.Bucket(to.logs)
		for i := first; first > 0 && i <= last; i++ {
			var e raft.Log
			if err := old.GetLog(i, &e); err != nil {
				return fmt.Errorf("entry %d: %w", i, err)
			}
			if err := logs.Put(binary.BigEndian.AppendUint64(nil, i), encodeLog(&e)); err != nil {
				return err
			}
		}
		for _, k := range stableKeys {
			v, err := old.Get([]byte(k))
			if err != nil && err.Error() == "not found" {
				continue
			}
			if err != nil {
				return err
			}
			if err := tx.Bucket(to.stable).Put([]byte(k), v); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := old.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("move %s into the shared log: %w", path, err)
	}
	if err := os.Rename(path, path+".moved"); err != nil {
		return err
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(path, "MOVED"), []byte(movedNote), 0o644); err != nil {
		return err
	}
	var entries uint64
	if first > 0 {
		entries = last - first + 1
	}
	logger.Info("moved a shard's raft log into the shared log", "from", path, "entries", entries)
	return nil
}
