// Command cohortctl administers consumer groups and topics over the Kafka
// protocol, so it works against cohort and against any Kafka cluster. Its
// columns and flags are kafka-consumer-groups.sh's (GROUP, TOPIC, PARTITION,
// CURRENT-OFFSET, LOG-END-OFFSET, LAG, CONSUMER-ID, HOST, CLIENT-ID) with
// rpk's COORDINATOR and TOTAL-LAG; --json (anywhere on the line) prints the
// same data with the same key names in every command.
//
//	cohortctl [--bootstrap host:port] [--json] groups list
//	cohortctl groups describe [--members | --state] (GROUP... | --group G... | --all-groups)
//	cohortctl groups delete GROUP
//	cohortctl offsets (GROUP... | --group G... | --all-groups)
//	cohortctl offsets reset GROUP (--topic T[:P,...] | --all-topics) (--to-offset N | --shift-by N | --to-earliest | --to-latest | --to-current | --to-datetime T) [--dry-run | --execute] [--export]
//	cohortctl offsets reset GROUP --from-file plan.csv [--dry-run | --execute]
//	cohortctl offsets delete GROUP --topic T[:P,...]
//	cohortctl topics list
//	cohortctl topics create [--partitions N] [--replication-factor R] TOPIC
//	cohortctl topics alter --partitions N TOPIC
//	cohortctl topics delete TOPIC
//	cohortctl users list|describe|set|delete ...
//	cohortctl acls list|create|delete ...
//
// --bootstrap defaults to $COHORT_BOOTSTRAP_SERVERS (Kafka's
// bootstrap.servers), else $COHORT_BOOTSTRAP unless it holds a boolean (that
// is cohortd's --bootstrap switch, not a broker list), else 127.0.0.1:9092. A group
// that does not exist is an error (exit status 1); usage mistakes exit 2.
// No command creates a topic by naming it: topics are looked up in the
// full topic list, never through a Metadata request that names them (which a
// broker with auto-creation answers by creating the topic).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohort-coord/cohort/internal/buildinfo"
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

const usage = `usage: cohortctl [--bootstrap host:port,...] [--json] [--timeout d] [--tls] [--tls-cert-file F --tls-key-file F] [--tls-ca-file F] COMMAND
       cohortctl COMMAND --help
       cohortctl --version

--json and --bootstrap (or Kafka's --bootstrap-server) may appear anywhere
on the line; every command uses the same keys (group, topic, partition,
current_offset, log_end_offset, lag, consumer_id, host, client_id,
coordinator, total_lag, ...).

--bootstrap defaults to env COHORT_BOOTSTRAP_SERVERS, else 127.0.0.1:9092
(COHORT_BOOTSTRAP still works unless it is true/false: cohortd's switch).
A broker that does not answer is named on stderr and the command goes on
with the others. group and topic work for groups and topics (rpk's names).

GROUPS is one or more group names, --group G (repeatable) or --all-groups.
A group that does not exist is an error (exit 1); usage mistakes exit 2.

commands:
  groups list                  groups with protocol type and state
  groups describe [--members | --state] GROUPS
                               coordinator, state, generation, total lag, then per partition
                               GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
  groups delete GROUP          delete an empty group and its offsets
  offsets GROUPS               the per-partition table of groups describe
  offsets reset GROUP (--topic T[:P,...] [--partitions P,...] | --all-topics) MODE [--dry-run | --execute] [--export]
  offsets reset GROUP --from-file CSV [--dry-run | --execute]
                               plan (dry run, the default) or commit new offsets; the group must have
                               no members and every partition must exist (topics are never created).
                               MODE: --to-offset N | --shift-by N | --to-earliest | --to-latest |
                               --to-current | --to-datetime YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm].
                               --topic repeats; --all-topics: the topics the group committed
                               offsets for; --export prints the plan as topic,partition,offset
                               CSV, which --from-file reads back
  offsets delete GROUP --topic T[:P,...] [--partitions P,...]
                               delete committed offsets (OffsetDelete)
  topics list                  topics and partition counts
  topics create [--partitions N] [--replication-factor R] TOPIC
  topics alter --partitions N TOPIC
                               grow a topic to N partitions (CreatePartitions; only ever more)
  topics delete TOPIC
  users list | describe USER... | set USER [--mechanism M] [--iterations N] [--password-stdin] | delete USER [--mechanism M]
                               SCRAM credentials (the password: --password-stdin or env COHORT_USER_PASSWORD)
  acls list|create|delete [--group G] [--topic T] [--cluster] [--resource-pattern-type P]
       [--allow-principal User:x] [--deny-principal User:x] [--host H] [--operation OP]
                               ACLs, as kafka-acls.sh manages them
  cluster [--remote host:port,...] status|add-voter|remove-voter|transfer-leadership|balance
                               over the native API; the first --remote that answers is asked

SASL: --sasl-mechanism PLAIN|SCRAM-SHA-256|SCRAM-SHA-512 --sasl-username U, password from
env COHORT_SASL_PASSWORD or --sasl-password-file F.
`

type cli struct {
	cl      *kgo.Client
	out     io.Writer
	errOut  io.Writer
	errMu   sync.Mutex
	json    bool
	timeout time.Duration
	tls     *tlsOptions

	seeds []string // --bootstrap, as given

	reachOnce sync.Once
	brokers   *brokerSet
	reachErr  error
}

// helpHint ends every usage error: the one line that says what was wrong,
// then where the rest is (not the whole help).
const helpHint = "run 'cohortctl --help' for the commands, 'cohortctl COMMAND --help' for one"

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cohortctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	bootstrap := bootstrapFromEnv(getenv)
	fs.StringVar(&bootstrap, "bootstrap", bootstrap, "comma-separated seed brokers (env COHORT_BOOTSTRAP_SERVERS)")
	fs.StringVar(&bootstrap, "bootstrap-server", bootstrap, "kafka-consumer-groups.sh's name for --bootstrap")
	asJSON := fs.Bool("json", false, "print JSON instead of tables")
	timeout := fs.Duration("timeout", 15*time.Second, "deadline of the whole command")
	tlsOpts := addTLSFlags(fs, getenv)
	saslOpts := addSASLFlags(fs, getenv)
	version := buildinfo.Flag(fs)
	if words, ok := helpWanted(args); ok {
		fmt.Fprint(stdout, helpFor(words))
		return 0
	}
	args, jsonAnywhere, err := takeJSON(args)
	if err != nil {
		return usageError(stderr, err)
	}
	args, err = takeBootstrap(args, &bootstrap)
	if err != nil {
		return usageError(stderr, err)
	}
	if err := fs.Parse(args); err != nil {
		return usageError(stderr, habitOfFlag(err))
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.Read().String("cohortctl"))
		return 0
	}
	*asJSON = *asJSON || jsonAnywhere
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
	c := &cli{cl: cl, out: stdout, errOut: stderr, json: *asJSON, timeout: *timeout, tls: tlsOpts, seeds: strings.Split(bootstrap, ",")}
	if err := c.dispatch(ctx, aliases(fs.Args())); err != nil {
		if errors.Is(err, errUsage) {
			return usageError(stderr, err)
		}
		fmt.Fprintf(stderr, "cohortctl: %v\n", err)
		return 1
	}
	return 0
}

// usageError prints a command-line mistake as one line, then where help
// is (a habit from another tool is refused in one line that names
// cohortctl's way), and returns exit status 2.
func usageError(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "cohortctl: %v\n", err)
	var h *habitError
	if !errors.As(err, &h) {
		fmt.Fprintln(stderr, helpHint)
	}
	return 2
}

// bootstrapFromEnv is the default of --bootstrap: COHORT_BOOTSTRAP_SERVERS,
// else COHORT_BOOTSTRAP (the older name) unless its value is a boolean:
// cohortd reads COHORT_BOOTSTRAP as its --bootstrap switch, so a shell that
// exports COHORT_BOOTSTRAP=true for a node must not send cohortctl to a broker
// named "true". Else 127.0.0.1:9092.
func bootstrapFromEnv(getenv func(string) string) string {
	if v := getenv("COHORT_BOOTSTRAP_SERVERS"); v != "" {
		return v
	}
	if v := getenv("COHORT_BOOTSTRAP"); v != "" {
		if _, err := strconv.ParseBool(v); err != nil {
			return v
		}
	}
	return defaultBootstrap
}

func (c *cli) dispatch(ctx context.Context, args []string) error {
	cmd := strings.Join(args[:min(2, len(args))], " ")
	if err := refuseHabit(args); err != nil {
		return err
	}
	switch {
	case cmd == "groups list" && len(args) == 2:
		return c.groupsList(ctx)
	case cmd == "groups describe":
		var members, state bool
		names, all, err := groupArgs(cmd, args[2:], func(fs *flag.FlagSet) {
			fs.BoolVar(&members, "members", false, "")
			fs.BoolVar(&state, "state", false, "")
		})
		if err != nil || (members && state) {
			return fmt.Errorf("%w: groups describe [--members | --state] (GROUP... | --group G... | --all-groups)", errUsage)
		}
		view := viewAll
		if members {
			view = viewMembers
		} else if state {
			view = viewState
		}
		return c.groupsDescribe(ctx, names, all, view)
	case cmd == "groups delete" && len(args) == 3:
		return c.groupsDelete(ctx, args[2])
	case cmd == "offsets reset" && len(args) > 2:
		return c.offsetsReset(ctx, args[2:])
	case cmd == "offsets delete" && len(args) > 2:
		return c.offsetsDelete(ctx, args[2:])
	case args[0] == "offsets":
		names, all, err := groupArgs("offsets", args[1:], nil)
		if err != nil {
			return fmt.Errorf("%w: offsets (GROUP... | --group G... | --all-groups)", errUsage)
		}
		return c.groupsDescribe(ctx, names, all, viewOffsets)
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
	case cmd == "topics alter":
		fs := flag.NewFlagSet("topics alter", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		parts := fs.Int("partitions", 0, "the topic's new partition count")
		if err := fs.Parse(args[2:]); err != nil || fs.NArg() != 1 || *parts <= 0 || *parts > math.MaxInt32 {
			return fmt.Errorf("%w: topics alter --partitions N TOPIC", errUsage)
		}
		return c.topicsAlter(ctx, fs.Arg(0), int32(*parts))
	}
	if subs, ok := subcommands[args[0]]; ok {
		if len(args) == 1 {
			return fmt.Errorf("%w: %s needs a subcommand: %s", errUsage, args[0], subs)
		}
		return fmt.Errorf("%w: %q: %s takes %s", errUsage, strings.Join(args, " "), args[0], subs)
	}
	return fmt.Errorf("%w: unknown command %q (commands: %s)", errUsage, args[0], strings.Join(commandWords, ", "))
}

// subcommands are each command's subcommands, as a usage error names them.
var subcommands = map[string]string{
	"groups": "list | describe | delete",
	"topics": "list | create | alter | delete",
}

// takeJSON removes --json (or --json=true|false) from anywhere on the line,
// so that it works after the command as before it, as rpk's --format does.
// Arguments after "--" are left alone.
func takeJSON(args []string) ([]string, bool, error) {
	out := make([]string, 0, len(args))
	on := false
	for i, a := range args {
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			out = append(out, a)
			continue
		}
		on = true
		if hasVal {
			b, err := strconv.ParseBool(val)
			if err != nil {
				return nil, false, fmt.Errorf("%s: want true or false", a)
			}
			on = b
		}
	}
	return out, on, nil
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
