package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/internal/testnode"
	"github.com/cohort-coord/cohort/node"
	"github.com/cohort-coord/cohort/security"
)

// TestUsersAndACLs drives cohortctl users and acls against a node with a
// SASL listener and the authorizer, as the superuser admin from a users
// file, then checks what a new user may do.
func TestUsersAndACLs(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	if err := os.WriteFile(users, []byte("admin:admin-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testnode.Config(t)
	cfg.Security = node.SecurityConfig{
		Listeners:  []security.Listener{{Protocol: security.SASLPlaintext, Addr: "127.0.0.1:0"}},
		Authorizer: true, SuperUsers: []security.Principal{security.User("admin")}, ScramUsersFile: users,
	}
	addr := testnode.Start(t, cfg).KafkaAddr()
	as := func(user, pass string, stdin string, args ...string) (string, string, int) {
		var out, errOut bytes.Buffer
		env := map[string]string{"COHORT_BOOTSTRAP_SERVERS": addr, "COHORT_SASL_MECHANISM": "SCRAM-SHA-512", "COHORT_SASL_USERNAME": user, "COHORT_SASL_PASSWORD": pass}
		old := os.Stdin
		r, w, _ := os.Pipe()
		w.WriteString(stdin)
		w.Close()
		os.Stdin = r
		defer func() { os.Stdin = old }()
		code := run(context.Background(), append([]string{"--timeout", "10s"}, args...), func(k string) string { return env[k] }, &out, &errOut)
		return out.String(), errOut.String(), code
	}
	must := func(user, pass, stdin string, args ...string) string {
		t.Helper()
		var out, errOut string
		var code int
		for deadline := time.Now().Add(20 * time.Second); ; {
			if out, errOut, code = as(user, pass, stdin, args...); code == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond) // the leader creates admin once it leads
		}
		if code != 0 {
			t.Fatalf("cohortctl %v as %s: exit %d: %s", args, user, code, errOut)
		}
		return out
	}
	must("admin", "admin-pw", "", "topics", "create", "--partitions", "2", "orders")
	must("admin", "admin-pw", "bob-pw\n", "users", "set", "bob", "--password-stdin")
	if out := must("admin", "admin-pw", "", "users", "list"); !strings.Contains(out, "bob") || strings.Count(out, "SCRAM-SHA-") != 4 {
		t.Fatalf("users list:\n%s", out)
	}
	// bob has no ACL: listing groups shows nothing, describing one is refused.
	if out := must("bob", "bob-pw", "", "groups", "list"); strings.Contains(out, "orders") {
		t.Fatalf("bob lists %s", out)
	}
	if _, errOut, code := as("bob", "bob-pw", "", "groups", "describe", "orders-app"); code == 0 || !strings.Contains(errOut, "GROUP_AUTHORIZATION_FAILED") {
		t.Fatalf("bob describes: exit %d %s", code, errOut)
	}
	if _, errOut, code := as("bob", "bob-pw", "", "acls", "list"); code == 0 || !strings.Contains(errOut, "CLUSTER_AUTHORIZATION_FAILED") {
		t.Fatalf("bob lists acls: exit %d %s", code, errOut)
	}
	must("admin", "admin-pw", "", "acls", "create", "--allow-principal", "User:bob", "--operation", "read", "--group", "orders-", "--resource-pattern-type", "prefixed")
	if out := must("admin", "admin-pw", "", "acls", "list", "--group", "orders-app", "--resource-pattern-type", "match"); !strings.Contains(out, "User:bob") || !strings.Contains(out, "PREFIXED") {
		t.Fatalf("acls list match:\n%s", out)
	}
	// READ implies DESCRIBE: bob learns that the group does not exist.
	if _, errOut, code := as("bob", "bob-pw", "", "groups", "describe", "orders-app"); code != 1 || !strings.Contains(errOut, "group orders-app does not exist") {
		t.Fatalf("bob describes with READ: exit %d %s", code, errOut)
	}
	if out := must("admin", "admin-pw", "", "acls", "delete", "--group", "orders-", "--resource-pattern-type", "prefixed"); !strings.Contains(out, "User:bob") {
		t.Fatalf("acls delete:\n%s", out)
	}
	if _, errOut, code := as("bob", "bob-pw", "", "groups", "describe", "orders-app"); code != 1 || !strings.Contains(errOut, "GROUP_AUTHORIZATION_FAILED") {
		t.Fatalf("bob describes after the ACL was deleted: exit %d %s", code, errOut)
	}
	must("admin", "admin-pw", "", "users", "delete", "bob")
	if _, errOut, code := as("bob", "bob-pw", "", "groups", "list"); code == 0 || !strings.Contains(errOut, "SASL_AUTHENTICATION_FAILED") {
		t.Fatalf("deleted bob: exit %d %s", code, errOut)
	}
}
