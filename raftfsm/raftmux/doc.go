// Package raftmux carries many Raft groups (shards) over one TCP port per
// node, so that every shard of a node can have its own
// raft.NetworkTransport without a port of its own.
//
// A Mux owns the node's listener. A connection, after its TLS handshake
// when TLS is on, starts with a 5-byte header: the magic "cR", a version
// byte (1) and the shard id (uint16, big endian). The mux reads it within
// Config.HeaderTimeout and hands the connection, header consumed, to the
// Layer registered for that shard. A Layer is a raft.StreamLayer: its
// Accept yields the shard's connections, its Dial connects to a peer's mux
// and writes the header. Anything else — a handshake that fails, a header
// that is garbage, names a shard not registered here, or does not arrive
// in time — closes the connection and is counted in Stats, never more.
//
// The design is rqlite's tcp/mux.go (a first byte picks the handler, TLS
// around the whole mux) and Consul's RPC byte, widened to a shard id: each
// shard keeps hashicorp/raft's own connection pool, so a node holds about
// one to three connections per (shard, peer) and direction. Streams are
// not multiplexed inside a connection (that would be hashicorp/yamux's
// job, not hand-written framing).
//
// Idle cost per shard over this mux is measured by TestIdleCost; the
// figures and the commands are in BENCHMARKS.md next to this file.
package raftmux
