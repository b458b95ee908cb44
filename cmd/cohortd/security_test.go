package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cohort-coord/cohort/security"
)

func TestSecurityFlags(t *testing.T) {
	users := filepath.Join(t.TempDir(), "users")
	if err := os.WriteFile(users, []byte("# first admin\nadmin:pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := parseConfig([]string{
		"--listeners", "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093",
		"--advertised-listeners", "SASL_PLAINTEXT://kafka.example:9093",
		"--sasl-enabled-mechanisms", "scram-sha-512,PLAIN",
		"--authorizer", "--scram-users-file", users,
	}, env(map[string]string{"COHORT_SUPER_USERS": "User:admin;User:ops"}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Security
	if len(s.Listeners) != 2 || s.Listeners[1] != (security.Listener{Protocol: security.SASLPlaintext, Addr: "127.0.0.1:9093"}) {
		t.Fatalf("listeners %v", s.Listeners)
	}
	if len(s.AdvertisedListeners) != 1 || s.AdvertisedListeners[0].Addr != "kafka.example:9093" {
		t.Fatalf("advertised %v", s.AdvertisedListeners)
	}
	if strings.Join(s.SASLMechanisms, ",") != "SCRAM-SHA-512,PLAIN" || !s.Authorizer || s.ScramUsersFile != users {
		t.Fatalf("%+v", s)
	}
	if len(s.SuperUsers) != 2 || s.SuperUsers[1] != security.User("ops") {
		t.Fatalf("super users %v", s.SuperUsers)
	}
	// Defaults: one PLAINTEXT listener on --kafka-addr, authorization off.
	cfg, _, err = parseConfig(nil, env(nil), &bytes.Buffer{})
	if err != nil || len(cfg.Security.Listeners) != 0 || cfg.Security.Authorizer {
		t.Fatalf("defaults: %+v %v", cfg.Security, err)
	}
}

func TestInvalidSecurityFlagsExitWith2(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "users")
	os.WriteFile(bad, []byte("admin-without-password\n"), 0o600)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--listeners", "KERBEROS://127.0.0.1:1"}, "unknown security protocol"},
		{[]string{"--listeners", "SASL_SSL://127.0.0.1:9093"}, "needs TLS on the Kafka link"},
		{[]string{"--listeners", "PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2"}, "a second PLAINTEXT listener"},
		{[]string{"--sasl-enabled-mechanisms", "GSSAPI"}, `SASL mechanism "GSSAPI"`},
		{[]string{"--super-users", "admin"}, "is not Type:name"},
		{[]string{"--scram-users-file", bad}, "line 1: want user:password"},
		{[]string{"--scram-users-file", bad + ".missing"}, "scram users file"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		if code := run(c.args, env(nil), &out); code != 2 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v: exit %d, output %q; want 2 and %q", c.args, code, out.String(), c.want)
		}
		if strings.Contains(out.String(), "admin-without-password") {
			t.Errorf("the users file's content is in the error: %q", out.String())
		}
	}
}
