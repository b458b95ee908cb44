package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cohort-coord/cohort/internal/testcerts"
	"github.com/cohort-coord/cohort/internal/testnode"
	"github.com/cohort-coord/cohort/node"
)

func TestBadFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--members", "0"}, "--members 0"},
		{[]string{"--partitions", "-1"}, "--partitions -1"},
		{[]string{"--balancers", "range,nope"}, `unknown assignor "nope"`},
		{[]string{"--listen", "nonsense"}, "--listen"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, &out, &errb)
		if c.args[0] == "--listen" {
			if code != 1 || !strings.Contains(errb.String(), c.want) {
				t.Errorf("%v: code %d, stderr %q", c.args, code, errb.String())
			}
			continue
		}
		if code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: code %d, stderr %q", c.args, code, errb.String())
		}
	}
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "cohort-members ") || !strings.Contains(out.String(), "revision ") {
		t.Fatalf("--version: code %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// Without a certificate against a node whose native API speaks TLS, the
// members are refused at once with the reason, not retried without end.
func TestNativeTLSRequired(t *testing.T) {
	ca := testcerts.NewCA(t, "cohort-test-ca")
	files := ca.Issue(t, testcerts.Options{CommonName: "node1"}).Write(t, t.TempDir(), "node1", ca)
	cfg := testnode.Config(t)
	cfg.RemoteAddr = "127.0.0.1:0"
	cfg.TLS = node.TLSConfig{Files: files.TLSFiles(), Native: true}
	n := testnode.Start(t, cfg)
	var out, errb bytes.Buffer
	if code := run([]string{"--remote", n.RemoteAddr()}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "TLS required") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}
