// Command cohortctl administers consumer groups and topics over the Kafka
// protocol, so it works against cohort and against any Kafka cluster.
//
//	cohortctl [--bootstrap host:port] [--json] groups list
//	cohortctl groups describe [--members | --state] GROUP
//	cohortctl groups delete GROUP
//	cohortctl offsets GROUP
//	cohortctl offsets reset GROUP --topic T (--to-offset N | --shift-by N) [--execute]
//	cohortctl offsets reset GROUP --from-file plan.csv [--execute]
//	cohortctl offsets delete GROUP --topic T [--partitions P,...]
//	cohortctl topics list
//	cohortctl topics create [--partitions N] [--replication-factor R] TOPIC
//	cohortctl topics delete TOPIC
//	cohortctl users list|describe|set|delete ...
//	cohortctl acls list|create|delete ...
//
// --bootstrap defaults to $COHORT_BOOTSTRAP, else 127.0.0.1:9092.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

const defaultBootstrap = "127.0.0.1:9092"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks command-line mistakes (exit status 2).
var errUsage = errors.New("usage")

const usage = `usage: cohortctl [--bootstrap host:port] [--json] [--timeout d] [--tls] [--tls-cert-file F --tls-key-file F] [--tls-ca-file F] COMMAND

commands:
  groups list                  groups with protocol type and state
  groups describe [--members | --state] GROUP
                               state, protocol, generation, members and their assignments
  groups delete GROUP          delete an empty group and its offsets
  offsets GROUP                committed offset, log end, lag and owner per partition
  offsets reset GROUP (--topic T [--partitions P,...] (--to-offset N | --shift-by N) | --from-file CSV) [--execute]
                               plan (and with --execute commit) new offsets; the group must have no members
  offsets delete GROUP --topic T [--partitions P,...]
                               delete committed offsets (OffsetDelete)
  topics list                  topics and partition counts
  topics create [--partitions N] [--replication-factor R] TOPIC
  topics delete TOPIC
  users list | describe USER... | set USER [--mechanism M] [--iterations N] [--password-stdin] | delete USER [--mechanism M]
                               SCRAM credentials (the password: --password-stdin or env COHORT_USER_PASSWORD)
  acls list|create|delete [--group G] [--topic T] [--cluster] [--resource-pattern-type P]
       [--allow-principal User:x] [--deny-principal User:x] [--host H] [--operation OP]
                               ACLs, as kafka-acls.sh manages them
  cluster [--remote host:port] status|add-voter|remove-voter|transfer-leadership

SASL: --sasl-mechanism PLAIN|SCRAM-SHA-256|SCRAM-SHA-512 --sasl-username U, password from
env COHORT_SASL_PASSWORD or --sasl-password-file F.
`

type cli struct {
	cl      *kgo.Client
	out     io.Writer
	json    bool
	timeout time.Duration
	tls     *tlsOptions
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cohortctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	bootstrap := getenv("COHORT_BOOTSTRAP")
	if bootstrap == "" {
		bootstrap = defaultBootstrap
	}
	fs.StringVar(&bootstrap, "bootstrap", bootstrap, "comma-separated seed brokers (env COHORT_BOOTSTRAP)")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	timeout := fs.Duration("timeout", 15*time.Second, "deadline of the whole command")
	tlsOpts := addTLSFlags(fs, getenv)
	saslOpts := addSASLFlags(fs, getenv)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	kopts, err := tlsOpts.kafka()
	if err != nil {
		fmt.Fprintf(stderr, "cohortctl: %v\n", err)
		return 1
	}
	sopts, err := saslOpts.kafka()
	if err != nil {
		fmt.Fprintf(stderr, "cohortctl: %v\n", err)
		return 1
	}
	kopts = append(kopts, sopts...)
	cl, err := kgo.NewClient(append(kopts, kgo.SeedBrokers(strings.Split(bootstrap, ",")...), kgo.ClientID("cohortctl"))...)
	if err != nil {
		fmt.Fprintf(stderr, "cohortctl: %v\n", err)
		return 1
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c := &cli{cl: cl, out: stdout, json: *asJSON, timeout: *timeout, tls: tlsOpts}
	if err := c.dispatch(ctx, fs.Args()); err != nil {
		fmt.Fprintf(stderr, "cohortctl: %v\n", err)
		if errors.Is(err, errUsage) {
			fmt.Fprint(stderr, usage)
			return 2
		}
		return 1
	}
	return 0
}

func (c *cli) dispatch(ctx context.Context, args []string) error {
	cmd := strings.Join(args[:min(2, len(args))], " ")
	switch {
	case cmd == "groups list" && len(args) == 2:
		return c.groupsList(ctx)
	case cmd == "groups describe" && len(args) >= 3:
		fs := flag.NewFlagSet("groups describe", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		members := fs.Bool("members", false, "")
		state := fs.Bool("state", false, "")
		group, err := parseGroupFlags(fs, args[2:])
		if err != nil || (*members && *state) {
			return fmt.Errorf("%w: groups describe [--members | --state] GROUP", errUsage)
		}
		view := viewAll
		if *members {
			view = viewMembers
		} else if *state {
			view = viewState
		}
		return c.groupsDescribe(ctx, group, view)
	case cmd == "groups delete" && len(args) == 3:
		return c.groupsDelete(ctx, args[2])
	case cmd == "offsets reset" && len(args) > 2:
		return c.offsetsReset(ctx, args[2:])
	case cmd == "offsets delete" && len(args) > 2:
		return c.offsetsDelete(ctx, args[2:])
	case args[0] == "offsets" && len(args) == 2:
		return c.offsets(ctx, args[1])
	case args[0] == "users":
		return c.users(ctx, args[1:], os.Stdin)
	case args[0] == "acls":
		return c.acls(ctx, args[1:])
	case args[0] == "cluster":
		return c.cluster(ctx, args[1:])
	case cmd == "topics list" && len(args) == 2:
		return c.topicsList(ctx)
	case cmd == "topics delete" && len(args) == 3:
		return c.topicsDelete(ctx, args[2])
	case cmd == "topics create":
		fs := flag.NewFlagSet("topics create", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		parts := fs.Int("partitions", -1, "partition count (-1: the broker default)")
		rf := fs.Int("replication-factor", -1, "replication factor (-1: the broker default)")
		if err := fs.Parse(args[2:]); err != nil || fs.NArg() != 1 {
			return fmt.Errorf("%w: topics create [--partitions N] [--replication-factor R] TOPIC", errUsage)
		}
		return c.topicsCreate(ctx, fs.Arg(0), int32(*parts), int16(*rf))
	}
	return fmt.Errorf("%w: unknown command %q", errUsage, strings.Join(args, " "))
}

// print writes v as JSON, or calls table to write a table.
func (c *cli) print(v any, table func(w *tabwriter.Writer)) error {
	if c.json {
		enc := json.NewEncoder(c.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	w := tabwriter.NewWriter(c.out, 2, 4, 2, ' ', 0)
	table(w)
	return w.Flush()
}
