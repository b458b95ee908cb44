package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cohort-coord/cohort/internal/seededbug"
	"github.com/cohort-coord/cohort/raftfsm"
)

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestFlagsAndEnvironment(t *testing.T) {
	cfg, _, err := parseConfig([]string{"--group-max-size", "7", "--remote-addr", "127.0.0.1:0"},
		env(map[string]string{"COHORT_GROUP_MAX_SIZE": "99", "COHORT_GROUP_MIN_SESSION_TIMEOUT": "1s", "COHORT_DATA_DIR": "/tmp/x"}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Group.MaxSize != 7 {
		t.Errorf("flag must win over env: max size %d", cfg.Group.MaxSize)
	}
	if cfg.Group.MinSessionTimeout != time.Second || cfg.DataDir != "/tmp/x" {
		t.Errorf("env not applied: %v %q", cfg.Group.MinSessionTimeout, cfg.DataDir)
	}
	if cfg.Group.MaxSessionTimeout != 30*time.Minute || cfg.Group.InitialRebalanceDelay != 3*time.Second ||
		cfg.Group.NewMemberJoinTimeout != 5*time.Minute || cfg.Group.OffsetsRetention != 168*time.Hour {
		t.Errorf("defaults: %+v", cfg.Group)
	}
	if cfg.Consumer.RegexRefreshInterval != 10*time.Minute {
		t.Errorf("regex refresh interval %v, want Kafka's 10m", cfg.Consumer.RegexRefreshInterval)
	}
	cfg, _, err = parseConfig([]string{"--group-consumer-regex-refresh-interval", "30s"},
		env(map[string]string{"COHORT_GROUP_CONSUMER_REGEX_REFRESH_INTERVAL": "1h"}), &bytes.Buffer{})
	if err != nil || cfg.Consumer.RegexRefreshInterval != 30*time.Second {
		t.Errorf("--group-consumer-regex-refresh-interval 30s: %v, %v", cfg.Consumer.RegexRefreshInterval, err)
	}
	cfg, _, err = parseConfig(nil, env(map[string]string{"COHORT_GROUP_CONSUMER_REGEX_REFRESH_INTERVAL": "1h"}), &bytes.Buffer{})
	if err != nil || cfg.Consumer.RegexRefreshInterval != time.Hour {
		t.Errorf("COHORT_GROUP_CONSUMER_REGEX_REFRESH_INTERVAL=1h: %v, %v", cfg.Consumer.RegexRefreshInterval, err)
	}
}

func TestAutoCreateTopicsModes(t *testing.T) {
	cases := []struct {
		args            []string
		env             map[string]string
		on, onlyAllowed bool
	}{
		{nil, nil, true, false},
		{[]string{"--auto-create-topics"}, nil, true, false},
		{[]string{"--auto-create-topics=requested"}, nil, true, true},
		{[]string{"--auto-create-topics=false"}, nil, false, false},
		{nil, map[string]string{"COHORT_AUTO_CREATE_TOPICS": "requested"}, true, true},
		{nil, map[string]string{"COHORT_AUTO_CREATE_TOPICS": "false"}, false, false},
	}
	for _, c := range cases {
		cfg, _, err := parseConfig(c.args, env(c.env), &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v %v: %v", c.args, c.env, err)
		}
		if k := cfg.Kafka; k.AutoCreateTopics != c.on || k.AutoCreateOnlyWhenAllowed != c.onlyAllowed {
			t.Errorf("%v %v: on %v only-when-allowed %v", c.args, c.env, k.AutoCreateTopics, k.AutoCreateOnlyWhenAllowed)
		}
	}
}

func TestInvalidValuesExitWith2(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--group-min-session-timeout", "-1s"}, nil, "min session timeout must be positive"},
		{[]string{"--group-max-size", "many"}, nil, "invalid value"},
		{nil, map[string]string{"COHORT_GROUP_MAX_SIZE": "-3"}, "group max size"},
		{nil, map[string]string{"COHORT_OFFSETS_RETENTION": "soon"}, "COHORT_OFFSETS_RETENTION"},
		{[]string{"--remote-addr", "nohostport"}, nil, "remote addr"},
		{[]string{"--group-min-session-timeout", "1m", "--group-max-session-timeout", "30s"}, nil, "below the min session timeout"},
		{[]string{"extra"}, nil, "unexpected arguments"},
		{[]string{"--auto-create-topics=sometimes"}, nil, "want true, requested or false"},
		{[]string{"--shards", "300"}, nil, "shards must be between 1 and 256"},
		{[]string{"--shards", "-1"}, nil, "shards must be between 1 and 256"},
		{nil, map[string]string{"COHORT_SHARDS": "257"}, "shards must be between 1 and 256"},
		{[]string{"--group-consumer-regex-refresh-interval", "5s"}, nil, "regex refresh interval must be positive and at least 10s, got 5s"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		dir := t.TempDir()
		data := filepath.Join(dir, "data")
		code := run(append([]string{"--data-dir", data}, c.args...), env(c.env), &out)
		if code != 2 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v %v: exit %d, output %q; want 2 and %q", c.args, c.env, code, out.String(), c.want)
		}
		if _, err := os.Stat(data); !os.IsNotExist(err) {
			t.Errorf("%v %v: the refused start left its data dir behind (%v)", c.args, c.env, err)
		}
	}
}

// The operator listener is on by default at 127.0.0.1:9644; the flag or
// COHORT_HTTP_ADDR moves it, and an empty value turns it off.
func TestHTTPAddr(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "127.0.0.1:9644"},
		{nil, map[string]string{"COHORT_HTTP_ADDR": "127.0.0.1:9700"}, "127.0.0.1:9700"},
		{[]string{"--http-addr", ""}, map[string]string{"COHORT_HTTP_ADDR": "127.0.0.1:9700"}, ""},
	} {
		cfg, _, err := parseConfig(c.args, env(c.env), &bytes.Buffer{})
		if err != nil || cfg.HTTPAddr != c.want {
			t.Errorf("%v %v: http addr %q (%v), want %q", c.args, c.env, cfg.HTTPAddr, err, c.want)
		}
	}
	if _, _, err := parseConfig([]string{"--http-addr", "nope"}, env(nil), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "http addr") {
		t.Errorf("bad http addr: %v", err)
	}
}

func TestOwnershipGuardFlag(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		on   bool
	}{
		{nil, nil, true},
		{[]string{"--group-ownership-guard=false"}, nil, false},
		{nil, map[string]string{"COHORT_GROUP_OWNERSHIP_GUARD": "false"}, false},
		{[]string{"--group-ownership-guard"}, map[string]string{"COHORT_GROUP_OWNERSHIP_GUARD": "false"}, true},
	}
	if cfg, _, err := parseConfig(nil, env(nil), &bytes.Buffer{}); err != nil || cfg.Group.MixedAssignors {
		t.Fatalf("mixed assignors on by default (%v)", err)
	}
	if cfg, _, err := parseConfig(nil, env(map[string]string{"COHORT_GROUP_MIXED_ASSIGNORS": "true"}), &bytes.Buffer{}); err != nil || !cfg.Group.MixedAssignors {
		t.Fatalf("COHORT_GROUP_MIXED_ASSIGNORS=true not applied (%v)", err)
	}
	for _, c := range cases {
		cfg, _, err := parseConfig(c.args, env(c.env), &bytes.Buffer{})
		if err != nil {
			t.Fatalf("%v %v: %v", c.args, c.env, err)
		}
		if cfg.Group.OwnershipGuard != c.on {
			t.Errorf("%v %v: guard %v, want %v", c.args, c.env, cfg.Group.OwnershipGuard, c.on)
		}
	}
	var out bytes.Buffer
	if code := run(nil, env(map[string]string{"COHORT_GROUP_OWNERSHIP_GUARD": "maybe"}), &out); code != 2 || !strings.Contains(out.String(), "COHORT_GROUP_OWNERSHIP_GUARD") {
		t.Errorf("invalid value: exit %d, %q", code, out.String())
	}
}

func TestRaftPeerAddrsAndSnapshotFlags(t *testing.T) {
	cfg, _, err := parseConfig([]string{"--raft-peer-addrs", "node2=127.0.0.1:7002, node3=127.0.0.1:7003", "--raft-snapshot-threshold", "64", "--raft-trailing-logs", "16"},
		env(map[string]string{"COHORT_RAFT_SNAPSHOT_INTERVAL": "2s"}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Raft
	if len(r.PeerAddrs) != 2 || r.PeerAddrs["node2"] != "127.0.0.1:7002" || r.PeerAddrs["node3"] != "127.0.0.1:7003" {
		t.Errorf("peer addrs %v", r.PeerAddrs)
	}
	if r.SnapshotThreshold != 64 || r.TrailingLogs != 16 || r.SnapshotInterval != 2*time.Second {
		t.Errorf("snapshot settings %d %d %v", r.SnapshotThreshold, r.TrailingLogs, r.SnapshotInterval)
	}
	for _, bad := range []string{"node2", "=127.0.0.1:1", "node2=nohostport"} {
		var out bytes.Buffer
		if code := run([]string{"--raft-peer-addrs", bad}, env(nil), &out); code != 2 || !strings.Contains(out.String(), "raft-peer-addrs") {
			t.Errorf("--raft-peer-addrs %q: exit %d, output %q", bad, code, out.String())
		}
	}
}

func TestRaftLogFormatFlag(t *testing.T) {
	cfg, _, err := parseConfig(nil, env(map[string]string{"COHORT_RAFT_LOG_FORMAT": "1"}), &bytes.Buffer{})
	if err != nil || cfg.Raft.LogFormat != 1 {
		t.Fatalf("COHORT_RAFT_LOG_FORMAT=1: %v, format %d", err, cfg.Raft.LogFormat)
	}
	if cfg, _, err = parseConfig(nil, env(nil), &bytes.Buffer{}); err != nil || cfg.Raft.LogFormat != 0 {
		t.Fatalf("default: %v, format %d", err, cfg.Raft.LogFormat)
	}
	// One above the newest format this version applies.
	for _, bad := range []string{strconv.Itoa(int(raftfsm.LogFormat) + 1), "-1", "two"} {
		var out bytes.Buffer
		if code := run([]string{"--raft-log-format", bad}, env(nil), &out); code != 2 || !strings.Contains(out.String(), "raft-log-format") {
			t.Errorf("--raft-log-format %q: exit %d, output %q", bad, code, out.String())
		}
	}
}

func TestNoSeededBugsInANormalBuild(t *testing.T) {
	if seededbug.Enabled {
		t.Skip("a seededbugs build")
	}
	var out bytes.Buffer
	if code := run([]string{"--seeded-bugs", "stale-leader"}, env(nil), &out); code != 2 || !strings.Contains(out.String(), "flag provided but not defined") {
		t.Errorf("exit %d, output %q; a normal build must not know the flag", code, out.String())
	}
}

func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	stdout = &out
	t.Cleanup(func() { stdout = os.Stdout })
	if code := run([]string{"--version"}, env(nil), &errb); code != 0 || !strings.HasPrefix(out.String(), "cohortd ") || !strings.Contains(out.String(), "revision ") {
		t.Fatalf("--version: code %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// TestBootstrapEnvNotABrokerList: COHORT_BOOTSTRAP is cohortd's --bootstrap
// switch; a broker list left there for cohortctl is refused (exit 2) with the
// name cohortctl reads its brokers from, and a boolean still applies.
func TestBootstrapEnvNotABrokerList(t *testing.T) {
	var out bytes.Buffer
	if code := run(nil, env(map[string]string{"COHORT_BOOTSTRAP": "127.0.0.1:9092"}), &out); code != 2 || !strings.Contains(out.String(), "COHORT_BOOTSTRAP_SERVERS") {
		t.Errorf("COHORT_BOOTSTRAP=127.0.0.1:9092: exit %d, %q", code, out.String())
	}
	cfg, _, err := parseConfig(nil, env(map[string]string{"COHORT_BOOTSTRAP": "true"}), &bytes.Buffer{})
	if err != nil || !cfg.Bootstrap {
		t.Fatalf("COHORT_BOOTSTRAP=true: %v, bootstrap %v", err, cfg.Bootstrap)
	}
}
