// Command cohortd runs a cohort consumer-group coordinator.
//
// Every flag can also be set through the environment: --group-max-size is
// COHORT_GROUP_MAX_SIZE. A flag given on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/coordinator"
	"github.com/cohort-coord/cohort/internal/buildinfo"
	"github.com/cohort-coord/cohort/kafka"
	"github.com/cohort-coord/cohort/node"
	"github.com/cohort-coord/cohort/raftfsm"
	"github.com/cohort-coord/cohort/tlsconfig"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

func run(args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, logLevel, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, buildinfo.ErrVersion) {
		fmt.Fprintln(stdout, buildinfo.Read().String("cohortd"))
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "cohortd: %v\n", err)
		return 2
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := node.Run(ctx, cfg); err != nil {
		cfg.Logger.Error("cohortd stopped", "err", err)
		return 1
	}
	return 0
}

// stdout receives --version.
var stdout io.Writer = os.Stdout

// defaultHTTPAddr is where cohortd serves metrics and the status page
// unless told otherwise (the embedded node.DefaultConfig keeps it off).
const defaultHTTPAddr = "127.0.0.1:9644"

// extraFlags register flags that only some builds have (seededbugs.go).
var extraFlags []func(*flag.FlagSet)

// parseConfig reads flags, falling back to COHORT_* variables, and validates
// the result.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (node.Config, slog.Level, error) {
	cfg := node.DefaultConfig()
	fs := flag.NewFlagSet("cohortd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "directory for the node's durable state")
	fs.StringVar(&cfg.RemoteAddr, "remote-addr", cfg.RemoteAddr, "host:port of the native group API (protoactor remote); port 0 picks a free port")
	cfg.HTTPAddr = defaultHTTPAddr
	fs.StringVar(&cfg.HTTPAddr, "http-addr", cfg.HTTPAddr, "host:port of the operator HTTP listener (/metrics, /healthz, /readyz, status page); empty disables it")
	r := &cfg.Raft
	fs.StringVar(&r.NodeID, "node-id", r.NodeID, "this node's id in the Raft cluster")
	fs.StringVar(&r.RaftAddr, "raft-addr", r.RaftAddr, "host:port for Raft traffic; port 0 picks a free port, kept across restarts")
	fs.BoolVar(&cfg.Bootstrap, "bootstrap", cfg.Bootstrap, "start a new cluster with this node as its first voter (a node without --join and without state does this by itself)")
	fs.StringVar(&cfg.Join, "join", cfg.Join, "native API host:port of any cluster member: ask it to add this node as a voter")
	fs.DurationVar(&r.HeartbeatTimeout, "raft-heartbeat-timeout", r.HeartbeatTimeout, "Raft heartbeat timeout (a follower without contact this long starts an election)")
	fs.DurationVar(&r.ElectionTimeout, "raft-election-timeout", r.ElectionTimeout, "Raft election timeout")
	fs.DurationVar(&r.LeaderLeaseTimeout, "raft-leader-lease-timeout", r.LeaderLeaseTimeout, "Raft leader lease (at most the heartbeat timeout)")
	fs.Var(peerAddrsFlag{&r.PeerAddrs}, "raft-peer-addrs", "id=host:port,...: dial these peers there instead of at their configured Raft address (fault-injection proxies in tests)")
	fs.DurationVar(&r.SnapshotInterval, "raft-snapshot-interval", r.SnapshotInterval, "how often Raft checks whether to snapshot (0: hashicorp/raft's 120s)")
	fs.Uint64Var(&r.SnapshotThreshold, "raft-snapshot-threshold", r.SnapshotThreshold, "log entries since the last snapshot that trigger one (0: hashicorp/raft's 8192)")
	fs.Uint64Var(&r.TrailingLogs, "raft-trailing-logs", r.TrailingLogs, "log entries kept after a snapshot; a follower further behind installs the snapshot (0: hashicorp/raft's 10240)")
	fs.IntVar(&r.Shards, "shards", r.Shards, fmt.Sprintf("Raft groups (shards) the cluster's groups are spread over, each led by one node, 1 to %d; fixed when a data dir is first used (0: what the data dir holds, 1 for a new one); every node of a cluster needs the same count", raftfsm.MaxShards))
	fs.DurationVar(&cfg.ShardMoveInterval, "shard-move-interval", node.DefaultShardMoveInterval, "how long a shard keeps its leader before leader placement may move it again")
	fs.Var(logFormatFlag{&r.LogFormat}, "raft-log-format", fmt.Sprintf("highest Raft log format this node agrees to, %d to %d (0: the newest, %d); %d keeps the cluster's log readable by versions before log formats, for a rollback during an upgrade", raftfsm.LogFormatPlain, raftfsm.LogFormat, raftfsm.LogFormat, raftfsm.LogFormatPlain))
	k := &cfg.Kafka
	fs.StringVar(&k.Addr, "kafka-addr", k.Addr, "host:port of the Kafka protocol listener; port 0 picks a free port")
	fs.StringVar(&k.AdvertisedAddr, "kafka-advertised-addr", k.AdvertisedAddr, "host:port that Metadata and FindCoordinator tell clients (default: the bound address)")
	maxReq := int64(k.MaxRequestBytes)
	fs.Int64Var(&maxReq, "max-request-bytes", maxReq, "largest Kafka request accepted; a bigger one closes its connection")
	fs.Var(autoCreateFlag{k}, "auto-create-topics", "create topics that Metadata requests name (auto.create.topics.enable): true (even when the request does not ask to, as librdkafka consumers' do not), requested (only when it asks, Kafka's rule) or false")
	parts := int64(k.DefaultPartitions)
	fs.Int64Var(&parts, "default-partitions", parts, "partitions of auto-created topics (num.partitions)")
	g := &cfg.Group
	fs.DurationVar(&g.MinSessionTimeout, "group-min-session-timeout", g.MinSessionTimeout, "smallest session timeout a member may ask for (group.min.session.timeout.ms)")
	fs.DurationVar(&g.MaxSessionTimeout, "group-max-session-timeout", g.MaxSessionTimeout, "largest session timeout a member may ask for (group.max.session.timeout.ms)")
	fs.DurationVar(&g.InitialRebalanceDelay, "group-initial-rebalance-delay", g.InitialRebalanceDelay, "wait for more members before the first rebalance of an empty group (group.initial.rebalance.delay.ms)")
	fs.IntVar(&g.MaxSize, "group-max-size", g.MaxSize, "most members a group may have, 0 for no limit (group.max.size)")
	fs.DurationVar(&g.NewMemberJoinTimeout, "group-new-member-join-timeout", g.NewMemberJoinTimeout, "how long a new member may wait in its first join phase")
	fs.BoolVar(&g.OwnershipGuard, "group-ownership-guard", g.OwnershipGuard, "never give a consumer-group member a partition another member has not released yet: withhold it and hand it over in a follow-up rebalance")
	fs.BoolVar(&g.MixedAssignors, "group-mixed-assignors", g.MixedAssignors, "admit into a consumer group of built-in assignors a member whose assignor list shares none with the group; the coordinator then assigns the group itself (single-bounce assignor changes)")
	fs.DurationVar(&g.OffsetsRetention, "offsets-retention", g.OffsetsRetention, "how long committed offsets of an empty group are kept (offsets.retention.minutes)")
	fs.Var(rebalanceProtocolsFlag{&k.ConsumerProtocol}, "group-coordinator-rebalance-protocols", "group protocols served, a comma list: classic, or classic,consumer to serve the consumer group protocol of KIP-848 too (group.coordinator.rebalance.protocols)")
	cc := &cfg.Consumer
	fs.DurationVar(&cc.SessionTimeout, "group-consumer-session-timeout", cc.SessionTimeout, "session timeout of consumer-protocol (KIP-848) members (group.consumer.session.timeout.ms)")
	fs.DurationVar(&cc.HeartbeatInterval, "group-consumer-heartbeat-interval", cc.HeartbeatInterval, "heartbeat interval given to consumer-protocol members (group.consumer.heartbeat.interval.ms)")
	fs.IntVar(&cc.MaxSize, "group-consumer-max-size", cc.MaxSize, "most members a consumer-protocol group may have, 0 for no limit (group.consumer.max.size)")
	fs.Var(migrationPolicyFlag{&cc.MigrationPolicy}, "group-consumer-migration-policy", "online migration between the classic and the consumer group protocols of groups with members: bidirectional, upgrade, downgrade or disabled (group.consumer.migration.policy)")
	fs.DurationVar(&cc.RegexRefreshInterval, "group-consumer-regex-refresh-interval", cc.RegexRefreshInterval, "how often a consumer-protocol group's subscription regexes are resolved again against the topics, at least 10s; catalog changes and new regexes resolve sooner (group.consumer.regex.refresh.interval.ms)")
	fs.Var(serverAssignorsFlag{&cc.Assignors}, "group-consumer-assignors", "server assignors of consumer-protocol groups, the default first: a comma list of uniform and range (group.consumer.assignors)")
	takeover := !g.DisableTakeoverWindow
	fs.BoolVar(&takeover, "group-takeover-window", takeover, "after a failover, a member that rejoins unchanged keeps its generation instead of starting a rebalance (false: Kafka's rules)")
	tc := &cfg.TLS
	fs.StringVar(&tc.CertFile, "tls-cert-file", tc.CertFile, "PEM certificate (chain) of this node; turns TLS on for the links in --tls-links. Raft peers must name their node id as a DNS name in it")
	fs.StringVar(&tc.KeyFile, "tls-key-file", tc.KeyFile, "PEM private key of --tls-cert-file")
	fs.StringVar(&tc.CAFile, "tls-ca-file", tc.CAFile, "PEM certificates of the CAs that sign peers' and clients' certificates (required for the native API and Raft links)")
	fs.Var(clientAuthFlag{&tc.KafkaClientAuth}, "tls-client-auth", "client certificates on the Kafka listener (ssl.client.auth): none, request or require; the native API and Raft always require one")
	links := "kafka,native,raft"
	fs.StringVar(&links, "tls-links", links, "links that speak TLS when --tls-cert-file is given: a comma list of kafka, native, raft")
	fs.DurationVar(&tc.ReloadInterval, "tls-reload-interval", time.Second, "how often the TLS files are checked for changes (SIGHUP re-reads them at once)")
	level := slog.LevelInfo
	fs.TextVar(&level, "log-level", level, "debug, info, warn or error")
	securityFlags(fs, &cfg.Security)
	for _, f := range extraFlags {
		f(fs)
	}
	version := buildinfo.Flag(fs)

	if err := fs.Parse(args); err != nil {
		return cfg, level, err
	}
	if *version {
		return cfg, level, buildinfo.ErrVersion
	}
	if fs.NArg() > 0 {
		return cfg, level, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] {
			return
		}
		env := "COHORT_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" {
			if err := f.Value.Set(v); err != nil {
				if f.Name == "bootstrap" {
					// cohortctl's seed brokers once had this name.
					err = fmt.Errorf("%v (it is cohortd's --bootstrap switch, true or false; cohortctl's brokers go in COHORT_BOOTSTRAP_SERVERS)", err)
				}
				errs = append(errs, fmt.Errorf("%s=%q: %v", env, v, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return cfg, level, err
	}
	if maxReq <= 0 || maxReq > 1<<31-1 || parts <= 0 || parts > 1<<31-1 {
		return cfg, level, fmt.Errorf("max request bytes (%d) and default partitions (%d) must be positive 32-bit numbers", maxReq, parts)
	}
	k.MaxRequestBytes, k.DefaultPartitions = int32(maxReq), int32(parts)
	g.DisableTakeoverWindow = !takeover
	if tc.Enabled() {
		if err := setLinks(tc, links); err != nil {
			return cfg, level, err
		}
	}
	return cfg, level, cfg.Validate()
}

// setLinks turns TLS on for the links named in v (--tls-links).
func setLinks(tc *node.TLSConfig, v string) error {
	for _, l := range strings.Split(v, ",") {
		switch strings.ToLower(strings.TrimSpace(l)) {
		case "kafka":
			tc.Kafka = true
		case "native":
			tc.Native = true
		case "raft":
			tc.Raft = true
		case "":
		default:
			return fmt.Errorf("--tls-links: unknown link %q (want kafka, native, raft)", l)
		}
	}
	if !tc.On() {
		return errors.New("--tls-links names no link")
	}
	return nil
}

// clientAuthFlag is --tls-client-auth.
type clientAuthFlag struct{ a *tlsconfig.ClientAuth }

func (f clientAuthFlag) String() string {
	if f.a == nil {
		return "none"
	}
	return f.a.String()
}

func (f clientAuthFlag) Set(v string) error {
	a, err := tlsconfig.ParseClientAuth(v)
	if err != nil {
		return err
	}
	*f.a = a
	return nil
}

// logFormatFlag is --raft-log-format: 0 (the newest) or a format this
// version writes.
type logFormatFlag struct{ v *uint32 }

func (f logFormatFlag) String() string {
	if f.v == nil {
		return "0"
	}
	return strconv.FormatUint(uint64(*f.v), 10)
}

func (f logFormatFlag) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n > uint64(raftfsm.LogFormat) {
		return fmt.Errorf("want 0 (the newest) or a log format from %d to %d", raftfsm.LogFormatPlain, raftfsm.LogFormat)
	}
	*f.v = uint32(n)
	return nil
}

// peerAddrsFlag is --raft-peer-addrs: id=host:port pairs separated by commas.
type peerAddrsFlag struct{ m *map[string]string }

func (f peerAddrsFlag) String() string {
	if f.m == nil || len(*f.m) == 0 {
		return ""
	}
	var parts []string
	for id, a := range *f.m {
		parts = append(parts, id+"="+a)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (f peerAddrsFlag) Set(v string) error {
	m := map[string]string{}
	for _, kv := range strings.Split(v, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		id, addr, ok := strings.Cut(kv, "=")
		if !ok || id == "" {
			return fmt.Errorf("%q is not id=host:port", kv)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		m[id] = addr
	}
	*f.m = m
	return nil
}

// rebalanceProtocolsFlag is --group-coordinator-rebalance-protocols:
// classic always, consumer optionally.
type rebalanceProtocolsFlag struct{ consumer *bool }

func (f rebalanceProtocolsFlag) String() string {
	if f.consumer != nil && *f.consumer {
		return "classic,consumer"
	}
	return "classic"
}

func (f rebalanceProtocolsFlag) Set(v string) error {
	classic, consumer := false, false
	for _, p := range strings.Split(v, ",") {
		switch strings.TrimSpace(strings.ToLower(p)) {
		case "classic":
			classic = true
		case "consumer":
			consumer = true
		default:
			return fmt.Errorf("unknown group protocol %q: want classic or consumer", p)
		}
	}
	if !classic {
		return errors.New("classic must be listed: the classic group protocol cannot be turned off")
	}
	*f.consumer = consumer
	return nil
}

// migrationPolicyFlag is --group-consumer-migration-policy.
type migrationPolicyFlag struct{ p *coordinator.MigrationPolicy }

func (f migrationPolicyFlag) String() string {
	if f.p == nil {
		return ""
	}
	return string(*f.p)
}

func (f migrationPolicyFlag) Set(v string) error {
	p := coordinator.MigrationPolicy(strings.ToLower(strings.TrimSpace(v)))
	switch p {
	case coordinator.MigrationBidirectional, coordinator.MigrationUpgrade, coordinator.MigrationDowngrade, coordinator.MigrationDisabled:
		*f.p = p
		return nil
	}
	return fmt.Errorf("unknown migration policy %q: want bidirectional, upgrade, downgrade or disabled", v)
}

// serverAssignorsFlag is --group-consumer-assignors: server assignor names.
type serverAssignorsFlag struct{ l *[]assignor.ServerAssignor }

func (f serverAssignorsFlag) String() string {
	if f.l == nil {
		return ""
	}
	names := make([]string, len(*f.l))
	for i, a := range *f.l {
		names[i] = a.Name()
	}
	return strings.Join(names, ",")
}

func (f serverAssignorsFlag) Set(v string) error {
	var l []assignor.ServerAssignor
	for _, name := range strings.Split(v, ",") {
		a, ok := assignor.ServerAssignorByName(strings.TrimSpace(name))
		if !ok {
			return fmt.Errorf("unknown server assignor %q: want uniform or range", name)
		}
		l = append(l, a)
	}
	*f.l = l
	return nil
}

// autoCreateFlag is --auto-create-topics: true, requested or false; given
// alone it means true.
type autoCreateFlag struct{ k *kafka.Config }

func (f autoCreateFlag) String() string {
	switch {
	case f.k == nil || !f.k.AutoCreateTopics:
		return "false"
	case f.k.AutoCreateOnlyWhenAllowed:
		return "requested"
	default:
		return "true"
	}
}

func (f autoCreateFlag) Set(v string) error {
	switch strings.ToLower(v) {
	case "true", "1", "on":
		f.k.AutoCreateTopics, f.k.AutoCreateOnlyWhenAllowed = true, false
	case "requested":
		f.k.AutoCreateTopics, f.k.AutoCreateOnlyWhenAllowed = true, true
	case "false", "0", "off":
		f.k.AutoCreateTopics, f.k.AutoCreateOnlyWhenAllowed = false, false
	default:
		return errors.New("want true, requested or false")
	}
	return nil
}

func (f autoCreateFlag) IsBoolFlag() bool { return true }
