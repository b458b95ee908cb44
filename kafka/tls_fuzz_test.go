package kafka

import (
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/tlsconfig"
)

// FuzzTLSAccept writes arbitrary bytes to a TLS port (a real listener on
// 127.0.0.1 that requests client certificates) and half-closes: the server
// must close the connection without serving a request, and must keep
// serving TLS clients. The seeds are a real ClientHello, its prefixes, a
// plaintext Kafka request and garbage. The server's goroutines make
// coverage vary between runs of one input, so run it with a small
// -fuzzminimizetime (e.g. 10x), or the fuzzer spends its time minimizing.
func FuzzTLSAccept(f *testing.F) {
	fx := startTLS(f, tlsconfig.ClientAuthRequest)
	hello := clientHello(f, fx.client.Client("localhost"))
	f.Add(hello)
	f.Add(hello[:5])
	f.Add(hello[:len(hello)/2])
	f.Add(append(append([]byte{}, hello...), hello...))
	f.Add(kmsg.NewRequestFormatter().AppendRequest(nil, &kmsg.ApiVersionsRequest{Version: 3}, 1))
	f.Add([]byte{0x16, 0x03, 0x01, 0xff, 0xff})
	f.Add([]byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{})
	addr := fx.l.Addr().String()
	var runs, served uint64 // the fuzz function runs one input at a time per process
	f.Fuzz(func(t *testing.T, in []byte) {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(TLSHandshakeTimeout + 5*time.Second))
		go func() {
			nc.Write(in)
			nc.(*net.TCPConn).CloseWrite()
		}()
		if _, err := io.Copy(io.Discard, nc); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the server kept the connection open")
			}
		}
		if n := fx.l.Stats().Requests; n != served {
			t.Fatalf("%d requests served from arbitrary bytes", n-served)
		}
		if runs++; runs%256 == 1 {
			// Still serving TLS clients.
			c := dialTLS(t, fx.l.Addr(), fx.client.Client("localhost"))
			if r := c.do(&kmsg.ApiVersionsRequest{Version: 3}).(*kmsg.ApiVersionsResponse); r.ErrorCode != 0 {
				t.Fatalf("TLS client: code %d", r.ErrorCode)
			}
			c.nc.Close()
			served++
		}
	})
}

// clientHello captures the first flight of a real TLS client.
func clientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		tls.Client(b, cfg).Handshake()
		b.Close()
	}()
	a.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64<<10)
	n, err := a.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}
