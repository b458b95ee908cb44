// Command cohort-members runs N members of one group in one process and
// prints every assigned, revoked and lost as it happens, so that one can
// watch partitions move as members come and go (run it in several
// terminals, stop one with Ctrl-C).
//
//	go run ./cmd/cohortd &
//	go run ./cmd/cohort-members --members 3
package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohort-coord/cohort/actors/member"
	"github.com/cohort-coord/cohort/admin"
	"github.com/cohort-coord/cohort/assignor"
	"github.com/cohort-coord/cohort/catalog"
	"github.com/cohort-coord/cohort/internal/buildinfo"
	raftpb "github.com/cohort-coord/cohort/proto/cohort/raft/v1"
	"github.com/cohort-coord/cohort/tlsconfig"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	group, topic   string
	partitions     int
	members        int
	remote, kafka  string
	listen         string
	balancers      string
	instancePrefix string
	session        time.Duration
	debug          bool
	tls            tlsconfig.Files
	saslMechanism  string
	saslUser       string
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("cohort-members", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.group, "group", "demo", "group id")
	fs.StringVar(&o.topic, "topic", "demo", "topic the members subscribe to")
	fs.IntVar(&o.partitions, "partitions", 12, "partitions of the topic (the native API has no topic metadata; ignored with --kafka)")
	fs.IntVar(&o.members, "members", 3, "members to run in this process")
	fs.StringVar(&o.remote, "remote", cmp.Or(os.Getenv("COHORT_REMOTE_ADDR"), member.DefaultBootstrap), "comma-separated native API addresses of cohortd nodes (env COHORT_REMOTE_ADDR, as for cohortd and cohortctl)")
	fs.StringVar(&o.kafka, "kafka", "", "comma-separated Kafka listener addresses: use the Kafka protocol instead of the native API (works against any Kafka broker too)")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:0", "host:port where this process receives native API answers (port 0 picks one)")
	fs.StringVar(&o.balancers, "balancers", "cooperative-sticky,range", "assignors in preference order: range, roundrobin, sticky, cooperative-sticky")
	fs.StringVar(&o.instancePrefix, "instance-prefix", "", "make members static: instance ids <prefix>-1, <prefix>-2, ...")
	fs.DurationVar(&o.session, "session-timeout", 10*time.Second, "session timeout")
	fs.BoolVar(&o.debug, "debug", false, "log every answer the members get")
	fs.StringVar(&o.tls.CertFile, "tls-cert-file", "", "client certificate: TLS to the nodes (required for the native API over TLS)")
	fs.StringVar(&o.tls.KeyFile, "tls-key-file", "", "private key of --tls-cert-file")
	fs.StringVar(&o.tls.CAFile, "tls-ca-file", "", "CA certificates of the nodes; alone it turns on TLS to the Kafka listener without a client certificate")
	fs.StringVar(&o.saslMechanism, "sasl-mechanism", "", "with --kafka: authenticate with SASL PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (password from COHORT_SASL_PASSWORD)")
	fs.StringVar(&o.saslUser, "sasl-username", "", "SASL user name")
	version := buildinfo.Flag(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *version {
		return o, buildinfo.ErrVersion
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.members < 1 {
		return o, fmt.Errorf("--members %d: at least one", o.members)
	}
	if o.partitions < 1 || o.partitions > 1<<20 {
		return o, fmt.Errorf("--partitions %d: between 1 and %d", o.partitions, 1<<20)
	}
	if _, err := balancers(o.balancers); err != nil {
		return o, err
	}
	return o, nil
}

// checkNativeTLS refuses at once a native API address whose TLS does not
// match the flags (admin.Probe), which the members would otherwise retry
// without end. A node not reachable yet is left to the members' retries.
func checkNativeTLS(addr string, files tlsconfig.Files) error {
	var cfg *tls.Config
	if files.Enabled() {
		c, err := tlsconfig.ClientConfig(files)
		if err != nil {
			return err
		}
		cfg = c
	}
	err := admin.Probe(context.Background(), addr, cfg)
	if errors.Is(err, admin.ErrTLSRequired) || errors.Is(err, admin.ErrNotTLS) {
		return err
	}
	return nil
}

func balancers(spec string) ([]assignor.Balancer, error) {
	var bs []assignor.Balancer
	for _, name := range strings.Split(spec, ",") {
		b, ok := assignor.ByName(strings.TrimSpace(name))
		if !ok {
			return nil, fmt.Errorf("--balancers: unknown assignor %q (range, roundrobin, sticky, cooperative-sticky)", name)
		}
		bs = append(bs, b)
	}
	return bs, nil
}

func split(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// startRemote starts protoactor remote on listen (a free port for port 0),
// over TLS with files' certificate when given.
func startRemote(system *actor.ActorSystem, listen string, files tlsconfig.Files) (err error) {
	var opts []remote.ConfigOption
	if files.Enabled() {
		src, err := tlsconfig.Load(files, nil)
		if err != nil {
			return err
		}
		opts = admin.RemoteTLS(src)
	}
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("--listen %q: bad port", listen)
	}
	if port == 0 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return fmt.Errorf("--listen %q: %w", listen, err)
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("native API endpoint on %s:%d: %v", host, port, p)
		}
	}()
	remote.NewRemote(system, remote.Configure(host, port, opts...)).Start()
	return nil
}

// printer writes one line per partition change.
type printer struct {
	mu  sync.Mutex
	out io.Writer
}

func (p *printer) print(name, kind string, m *member.Member, ps []assignor.TopicPartitions) {
	if kind == "assigned" && len(ps) == 0 {
		return
	}
	var parts []string
	for _, tp := range ps {
		for _, n := range tp.Partitions {
			parts = append(parts, fmt.Sprintf("%s/%d", tp.Topic, n))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "%s %-10s %-8s gen=%-3d [%s]  now owns %d\n", time.Now().Format("15:04:05.000"), name, kind,
		m.Generation(), strings.Join(parts, " "), count(m.Assignment()))
}

func count(ps []assignor.TopicPartitions) int {
	n := 0
	for _, tp := range ps {
		n += len(tp.Partitions)
	}
	return n
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if errors.Is(err, buildinfo.ErrVersion) {
		fmt.Fprintln(stdout, buildinfo.Read().String("cohort-members"))
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "cohort-members: %v\n", err)
		return 2
	}
	level := slog.LevelWarn
	if o.debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	quiet := slog.New(slog.DiscardHandler)
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	transport := member.Native(split(o.remote)...)
	if o.kafka != "" {
		var kopts []kgo.Opt
		if o.tls.Enabled() || o.tls.CAFile != "" {
			cfg, err := tlsconfig.ClientConfig(o.tls)
			if err != nil {
				fmt.Fprintf(stderr, "cohort-members: %v\n", err)
				return 1
			}
			kopts = append(kopts, kgo.DialTLSConfig(cfg))
		}
		if o.saslMechanism != "" {
			opt, err := member.KafkaSASL(strings.ToUpper(o.saslMechanism), o.saslUser, os.Getenv("COHORT_SASL_PASSWORD"))
			if err != nil {
				fmt.Fprintf(stderr, "cohort-members: %v\n", err)
				return 1
			}
			kopts = append(kopts, opt)
		}
		transport = member.KafkaWithOptions(split(o.kafka), kopts...)
	} else if err := checkNativeTLS(split(o.remote)[0], o.tls); err != nil {
		fmt.Fprintf(stderr, "cohort-members: %v\n", err)
		return 1
	} else if err := startRemote(system, o.listen, o.tls); err != nil {
		fmt.Fprintf(stderr, "cohort-members: %v\n", err)
		return 1
	} else if err := createTopic(system, split(o.remote), o.topic, o.partitions); err != nil {
		// The members work without it: they name the partition count.
		fmt.Fprintf(stderr, "cohort-members: topic %s is not in the cluster's topic list: %v\n", o.topic, err)
	}
	bs, _ := balancers(o.balancers)
	p := &printer{out: stdout}
	host, _ := os.Hostname()
	var members []*member.Member
	for i := 1; i <= o.members; i++ {
		name := fmt.Sprintf("member-%d", i)
		opts := []member.Opt{
			member.Topics(o.topic),
			member.Balancers(bs...),
			member.WithTransport(transport),
			member.SessionTimeout(o.session),
			member.HeartbeatInterval(o.session / 10),
			member.ClientID(fmt.Sprintf("%s-%s-%d", name, host, os.Getpid())),
			member.Logger(log),
			member.OnAssigned(func(_ context.Context, m *member.Member, ps []assignor.TopicPartitions) {
				p.print(name, "assigned", m, ps)
			}),
			member.OnRevoked(func(_ context.Context, m *member.Member, ps []assignor.TopicPartitions) {
				p.print(name, "revoked", m, ps)
			}),
			member.OnLost(func(_ context.Context, m *member.Member, ps []assignor.TopicPartitions) { p.print(name, "lost", m, ps) }),
		}
		if o.kafka == "" {
			// The native API has no topic metadata; over the Kafka protocol
			// the leader asks the broker.
			opts = append(opts, member.Partitions(o.topic, int32(o.partitions)))
		}
		if o.instancePrefix != "" {
			opts = append(opts, member.InstanceID(fmt.Sprintf("%s-%d", o.instancePrefix, i)))
		}
		m, err := member.Start(system, o.group, opts...)
		if err != nil {
			fmt.Fprintf(stderr, "cohort-members: %v\n", err)
			return 2
		}
		members = append(members, m)
	}
	fmt.Fprintf(stdout, "%d members of group %q on topic %q; Ctrl-C to leave\n", len(members), o.group, o.topic)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failed := make(chan *member.Member, len(members))
	for _, m := range members {
		go func() {
			<-m.Done()
			failed <- m
		}()
	}
	code := 0
	select {
	case <-ctx.Done():
	case m := <-failed:
		fmt.Fprintf(stderr, "cohort-members: member %s stopped: %v\n", m.MemberID(), m.Err())
		code = 1
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.Close(closeCtx); err != nil && code == 0 {
				fmt.Fprintf(stderr, "cohort-members: close: %v\n", err)
			}
		}()
	}
	wg.Wait()
	system.Shutdown()
	return code
}

// createTopic adds the members' topic to the cluster's topic list when it
// is not there (the native API has no topic metadata: the members name
// the partition count themselves), so that cohortctl topics list and
// Kafka clients see it, as a Kafka consumer's topic is auto-created. It
// asks the meta group's leader, following a node that is not it; a topic
// of that name already there is left as it is.
func createTopic(system *actor.ActorSystem, remotes []string, topic string, partitions int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := admin.NewClient(system)
	id := catalog.NewTopicID()
	req := &raftpb.TopicCreate{Name: topic, Id: id[:], Partitions: int32(partitions)}
	var last error
	for _, addr := range remotes {
		for hop := 0; hop < 3 && addr != ""; hop++ {
			_, err := a.Do(ctx, addr, req)
			var ae *admin.Error
			switch {
			case err == nil:
				return nil
			case errors.As(err, &ae) && ae.Message == "topic_exists":
				return nil
			case errors.As(err, &ae) && ae.Leader != "" && ae.Leader != addr:
				addr, last = ae.Leader, err
				continue
			}
			last = err
			break
		}
	}
	return last
}
