package kafka

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/catalog"
)

// FuzzConn feeds arbitrary bytes to one connection's frame reader and
// dispatcher. It checks that nothing panics (handler panics are recovered in
// production, so they are reported here) and, through the synctest bubble,
// that every goroutine of the connection ends once the client goes away.
func FuzzConn(f *testing.F) {
	fm := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	var all []byte
	for _, k := range []int16{0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 37, 42, 47, 68, 69} {
		for v := int16(0); v <= kmsg.RequestForKey(k).MaxVersion(); v++ {
			req := sampleRequest(k, v)
			req.SetVersion(v)
			b := fm.AppendRequest(nil, req, int32(v))
			f.Add(b)
			all = append(all, b...)
		}
	}
	f.Add(all)
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0, 0, 0, 10, 0, 18, 0, 99, 0, 0, 0, 1, 0, 0})

	topics := catalog.New()
	if err := topics.Apply(catalog.CreateTopic{Name: "t", ID: catalog.NewTopicID(), Partitions: 3}); err != nil {
		f.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.MaxRequestBytes = 1 << 20
	l, err := New(cfg, &fakeGroups{}, topics, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.ln.Close() })
	var panicked atomic.Value
	l.onPanic = func(v any) { panicked.Store(fmt.Sprint(v)) }

	f.Fuzz(func(t *testing.T, data []byte) {
		// A fresh catalog per input: topics created by one input must not
		// make later inputs slower.
		l.topics = catalog.New()
		if err := l.topics.Apply(catalog.CreateTopic{Name: "t", ID: catalog.NewTopicID(), Partitions: 3}); err != nil {
			t.Fatal(err)
		}
		l.commitSlots = new(sync.Pool) // a slot's channel is its bubble's
		l.waitSlots = new(sync.Pool)
		synctest.Test(t, func(t *testing.T) {
			client, server := net.Pipe()
			c := l.newConn(context.Background(), server)
			done := make(chan struct{})
			go func() {
				defer close(done)
				c.serve()
			}()
			go io.Copy(io.Discard, client)
			client.Write(data)
			synctest.Wait() // everything the input started has run
			client.Close()
			<-done
		})
		if v := panicked.Swap(""); v != nil && v != "" {
			t.Fatalf("handler panicked: %v", v)
		}
	})
}
