package chaos

import (
	"bufio"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// echoServer answers every line with "<name>:<line>".
func echoServer(t *testing.T, name string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(name + ":" + line))
				}
			}()
		}
	}()
	return l.Addr().String()
}

func proxyAddr(t *testing.T, n *Net, from, to string) string {
	t.Helper()
	for _, kv := range strings.Split(n.PeerAddrs(from), ",") {
		id, addr, _ := strings.Cut(kv, "=")
		if id == to {
			return addr
		}
	}
	t.Fatalf("no proxy %s->%s in %q", from, to, n.PeerAddrs(from))
	return ""
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string, wait time.Duration) (string, error) {
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	line, err := r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

func TestNetCutsSlowsAndHeals(t *testing.T) {
	var mu sync.Mutex
	addrs := map[string]string{"a": echoServer(t, "a"), "b": echoServer(t, "b")}
	n, err := NewNet([]string{"a", "b"}, func(id string) string {
		mu.Lock()
		defer mu.Unlock()
		return addrs[id]
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if got := len(strings.Split(n.PeerAddrs("a"), ",")); got != 1 {
		t.Fatalf("a has %d peers, want 1: %q", got, n.PeerAddrs("a"))
	}
	c, err := net.Dial("tcp", proxyAddr(t, n, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "1", 5*time.Second); err != nil || got != "b:1" {
		t.Fatalf("open link: %q %v", got, err)
	}

	// One way: b's answers are held, a's request gets through.
	n.Cut("b", "a")
	if got, err := roundTrip(c, r, "2", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("b->a cut: read %q %v, want a timeout", got, err)
	}
	n.Heal()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "b:2\n" {
		t.Fatalf("after heal: %q %v, want the held answer b:2", line, err)
	}

	// The other way: the request waits, nothing reaches b.
	n.Partition([]string{"a"}, []string{"b"})
	if got, err := roundTrip(c, r, "3", 300*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("partition: read %q %v, want a timeout", got, err)
	}
	if f := n.Faulty(); len(f) != 2 {
		t.Errorf("faulty links %v, want both directions cut", f)
	}
	n.Heal()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || line != "b:3\n" {
		t.Fatalf("after heal: %q %v, want b:3", line, err)
	}

	// Slow: an answer cannot come back sooner than the delay.
	n.Slow("a", "b", 150*time.Millisecond)
	start := time.Now()
	if got, err := roundTrip(c, r, "4", 5*time.Second); err != nil || got != "b:4" {
		t.Fatalf("slow link: %q %v", got, err)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("slowed round trip took %v, less than the 150ms delay", took)
	}
	n.Slow("a", "b", 0)

	// A link to a node without an address closes the connection.
	mu.Lock()
	delete(addrs, "b")
	mu.Unlock()
	c2, err := net.Dial("tcp", proxyAddr(t, n, "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err == nil {
		t.Error("proxy to a node without an address kept the connection")
	}
}
