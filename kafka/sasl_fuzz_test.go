package kafka

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/twmb/franz-go/pkg/kmsg"
	xscram "github.com/xdg-go/scram"

	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/security"
)

// FuzzSASL feeds arbitrary bytes to a connection of a SASL listener:
// handshakes of every version and mechanism, authenticate requests, raw
// tokens after a v0 handshake, requests before authentication. Nothing may
// panic, and a connection whose exchange failed must have closed itself
// before the client goes away.
func FuzzSASL(f *testing.F) {
	fm := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz"))
	frame := func(reqs ...kmsg.Request) []byte {
		var out []byte
		for i, r := range reqs {
			out = fm.AppendRequest(out, r, int32(i))
		}
		return out
	}
	raw := func(tok string) []byte {
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(tok))), tok...)
	}
	first := func(mech xscram.HashGeneratorFcn) string {
		cl, _ := mech.NewClient(aliceUser, alicePass, "")
		s, _ := cl.NewConversation().Step("")
		return s
	}
	for _, mech := range security.Mechanisms {
		for v := int16(0); v <= 1; v++ {
			hs := &kmsg.SASLHandshakeRequest{Version: v, Mechanism: mech}
			f.Add(frame(hs))
			var tok string
			switch mech {
			case security.MechanismPlain:
				tok = string(plainToken(aliceUser, alicePass))
			case security.MechanismScramSHA256:
				tok = first(xscram.SHA256)
			default:
				tok = first(xscram.SHA512)
			}
			if v == 0 {
				f.Add(append(frame(hs), raw(tok)...))
				f.Add(append(append(frame(hs), raw(tok)...), raw("c=biws,r=x,p=AAAA")...))
				continue
			}
			for av := int16(0); av <= 2; av++ {
				f.Add(frame(hs, &kmsg.SASLAuthenticateRequest{Version: av, SASLAuthBytes: []byte(tok)}, &kmsg.ListGroupsRequest{Version: 1}))
				f.Add(frame(hs, &kmsg.SASLAuthenticateRequest{Version: av, SASLAuthBytes: []byte(tok)},
					&kmsg.SASLAuthenticateRequest{Version: av, SASLAuthBytes: []byte("c=biws,r=" + tok + ",p=AAAA")}))
			}
		}
	}
	f.Add(frame(&kmsg.ApiVersionsRequest{Version: 3}, &kmsg.MetadataRequest{Version: 1}))
	f.Add(frame(&kmsg.SASLAuthenticateRequest{Version: 1, SASLAuthBytes: []byte("x")}))
	f.Add(frame(&kmsg.SASLHandshakeRequest{Version: 1, Mechanism: "GSSAPI"}))

	store := security.NewStore()
	addUser(f, store, aliceUser, alicePass)
	topics := catalog.New()
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.MaxRequestBytes = 1 << 20
	cfg.Security = &Security{SASL: true, Store: store, Admin: storeAdmin{store},
		Authorizer: security.NewAuthorizer(store, nil)}
	l, err := New(cfg, &fakeGroups{}, topics, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { l.ln.Close() })
	var panicked atomic.Value
	l.onPanic = func(v any) { panicked.Store(fmt.Sprint(v)) }

	f.Fuzz(func(t *testing.T, data []byte) {
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
			synctest.Wait()
			if c.sasl.Phase() == security.Failed && c.ctx.Err() == nil {
				t.Fatal("a failed SASL exchange left the connection open")
			}
			client.Close()
			<-done
		})
		if v := panicked.Swap(""); v != nil && v != "" {
			t.Fatalf("handler panicked: %v", v)
		}
	})
}
