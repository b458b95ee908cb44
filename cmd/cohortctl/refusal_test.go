package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/internal/testcerts"
	"github.com/cohort-coord/cohort/internal/testlog"
	"github.com/cohort-coord/cohort/internal/testnode"
	"github.com/cohort-coord/cohort/node"
)

// A node whose native API speaks TLS refuses cohortctl without a client
// certificate at once, saying why, and logs the refusal; a plaintext gRPC
// client is logged as "TLS required"; cohortctl with TLS flags against a
// listener without TLS is told so. (Only the node runs protoactor remote in
// this process: cohortctl stops at its check before starting its own.)
func TestNativeAPIRefusals(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "cohort-test-ca")
	files := ca.Issue(t, testcerts.Options{CommonName: "node1", DNSNames: []string{"localhost", "node1"}}).Write(t, dir, "node1", ca)
	var logs testlog.Buffer
	cfg := testnode.Config(t)
	cfg.RemoteAddr = "127.0.0.1:0"
	cfg.TLS = node.TLSConfig{Files: files.TLSFiles(), Native: true}
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	n := testnode.Start(t, cfg)
	remote := n.RemoteAddr()

	waitLog := func(want string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), want); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the node never logged %q:\n%s", want, logs.String())
			}
		}
	}

	_, errOut, code := ctl(t, n.KafkaAddr(), "--timeout", "30s", "cluster", "--remote", remote, "status")
	if code != 1 || !strings.Contains(errOut, "TLS required") || !strings.Contains(errOut, "--tls-cert-file") {
		t.Fatalf("cluster status without a certificate: exit %d %q", code, errOut)
	}
	waitLog(`msg="native API connection refused: client certificate required" listener=native`)

	// A plaintext HTTP/2 (gRPC) client.
	c, err := net.Dial("tcp", remote)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	c.Read(make([]byte, 64)) // the node closes it
	c.Close()
	waitLog(`msg="native API connection refused: TLS required" listener=native`)

	// TLS flags against a listener that does not speak TLS (the node's
	// plaintext Kafka listener stands in for a native API without TLS).
	var out, stderr bytes.Buffer
	env := map[string]string{"COHORT_TLS_CERT_FILE": files.Cert, "COHORT_TLS_KEY_FILE": files.Key, "COHORT_TLS_CA_FILE": files.CA}
	code = run(context.Background(), []string{"cluster", "--remote", n.KafkaAddr(), "status"}, func(k string) string { return env[k] }, &out, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "does not speak TLS") {
		t.Fatalf("cluster status with TLS against plaintext: exit %d %q", code, stderr.String())
	}
}
