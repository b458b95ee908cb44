package raftfsm

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cohort-coord/cohort/tlsconfig"
)

// raftHandshakeTimeout bounds the TLS handshake of an incoming Raft
// connection.
const raftHandshakeTimeout = 10 * time.Second

// tlsStream is a raft.StreamLayer over TLS with client certificates
// required both ways. A peer's certificate must carry the peer's node id
// as a DNS name: the address dialed may be a proxy's (Config.PeerAddrs), so
// the name to verify is looked up from the address (the cluster
// configuration, or the PeerAddrs entry it came from). An address that
// names no known node is verified against its host.
type tlsStream struct {
	ln     net.Listener
	src    *tlsconfig.Source
	server *tls.Config
	log    *slog.Logger
	// names tells the node id behind an address (shards.go).
	names *peerNames
}

func newTLSStream(bind string, src *tlsconfig.Source, peers map[string]string, log *slog.Logger) (*tlsStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().(*net.TCPAddr)
	if addr.IP == nil || addr.IP.IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("raft addr %s is not advertisable (bind a specific address)", bind)
	}
	return &tlsStream{ln: ln, src: src, server: src.Server(tlsconfig.ClientAuthRequire), log: log, names: newPeerNames(peers)}, nil
}

// Accept returns the next connection; its handshake runs on its first read
// or write, in the transport's goroutine for that connection.
func (s *tlsStream) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: tls.Server(c, s.server), log: s.log}, nil
}

func (s *tlsStream) Close() error   { return s.ln.Close() }
func (s *tlsStream) Addr() net.Addr { return s.ln.Addr() }

// Dial connects to a peer and completes the handshake within timeout.
func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	name := s.serverName(address)
	d := &net.Dialer{Timeout: timeout}
	c, err := tls.DialWithDialer(d, "tcp", string(address), s.src.Client(name))
	if err != nil {
		return nil, fmt.Errorf("raft TLS to %s (as %s): %w", address, name, err)
	}
	return c, nil
}

// serverName is the node id behind address, or its host.
func (s *tlsStream) serverName(address raft.ServerAddress) string { return s.names.lookup(address) }

// handshakeConn completes the server side of the handshake on first use,
// within raftHandshakeTimeout, and logs a refused peer.
type handshakeConn struct {
	*tls.Conn
	log  *slog.Logger
	once sync.Once
	err  error
}

func (c *handshakeConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), raftHandshakeTimeout)
		defer cancel()
		if err := c.Conn.HandshakeContext(ctx); err != nil {
			c.err = fmt.Errorf("raft TLS handshake with %s: %w", c.RemoteAddr(), err)
			c.log.Warn("raft: refused a peer: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
			c.Conn.Close()
		}
	})
	return c.err
}

func (c *handshakeConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *handshakeConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
