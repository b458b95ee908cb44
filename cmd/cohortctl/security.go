package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohort-coord/cohort/security"
)

// saslOptions are the global SASL flags; the password comes from
// COHORT_SASL_PASSWORD or --sasl-password-file, never the command line.
type saslOptions struct {
	mechanism, user, passwordFile string
	getenv                        func(string) string
}

func addSASLFlags(fs *flag.FlagSet, getenv func(string) string) *saslOptions {
	o := &saslOptions{getenv: getenv, mechanism: getenv("COHORT_SASL_MECHANISM"), user: getenv("COHORT_SASL_USERNAME")}
	fs.StringVar(&o.mechanism, "sasl-mechanism", o.mechanism, "authenticate with SASL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (env COHORT_SASL_MECHANISM)")
	fs.StringVar(&o.user, "sasl-username", o.user, "SASL user (env COHORT_SASL_USERNAME)")
	fs.StringVar(&o.passwordFile, "sasl-password-file", "", "file holding the SASL password (default: env COHORT_SASL_PASSWORD)")
	return o
}

func (o *saslOptions) kafka() ([]kgo.Opt, error) {
	if o.mechanism == "" {
		return nil, nil
	}
	pass := o.getenv("COHORT_SASL_PASSWORD")
	if o.passwordFile != "" {
		b, err := os.ReadFile(o.passwordFile)
		if err != nil {
			return nil, err
		}
		pass = strings.TrimRight(string(b), "\r\n")
	}
	m, err := security.ClientMechanism(strings.ToUpper(o.mechanism), o.user, pass)
	if err != nil {
		return nil, err
	}
	return []kgo.Opt{kgo.SASL(m)}, nil
}

const usersUsage = `users list | users describe USER... | users set USER [--mechanism M] [--iterations N] (--password-stdin | env COHORT_USER_PASSWORD) | users delete USER [--mechanism M]`

// users manages SCRAM credentials (DescribeUserScramCredentials,
// AlterUserScramCredentials).
func (c *cli) users(ctx context.Context, args []string, stdin io.Reader) error {
	adm := kadm.NewClient(c.cl)
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, usersUsage)
	}
	switch args[0] {
	case "list", "describe":
		if args[0] == "list" && len(args) != 1 || args[0] == "describe" && len(args) < 2 {
			return fmt.Errorf("%w: %s", errUsage, usersUsage)
		}
		described, err := adm.DescribeUserSCRAMs(ctx, args[1:]...)
		if err != nil {
			return err
		}
		type cred struct {
			Mechanism  string `json:"mechanism"`
			Iterations int32  `json:"iterations"`
		}
		type user struct {
			User        string `json:"user"`
			Credentials []cred `json:"credentials"`
			Error       string `json:"error,omitempty"`
		}
		var out []user
		for _, d := range described.Sorted() {
			u := user{User: d.User, Credentials: []cred{}}
			if d.Err != nil {
				u.Error = d.Err.Error()
			}
			for _, ci := range d.CredInfos {
				u.Credentials = append(u.Credentials, cred{ci.Mechanism.String(), ci.Iterations})
			}
			out = append(out, u)
		}
		return c.print(out, func(w *tabwriter.Writer) {
			fmt.Fprintln(w, "USER\tMECHANISM\tITERATIONS\tERROR")
			for _, u := range out {
				if len(u.Credentials) == 0 {
					fmt.Fprintf(w, "%s\t-\t-\t%s\n", u.User, dash(u.Error))
				}
				for _, cr := range u.Credentials {
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", u.User, cr.Mechanism, cr.Iterations, dash(u.Error))
				}
			}
		})
	case "set", "delete":
		fs := flag.NewFlagSet("users", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		mech := fs.String("mechanism", "", "SCRAM-SHA-256 or SCRAM-SHA-512 (set: default both; delete: default both)")
		iters := fs.Int("iterations", security.DefaultIterations, "SCRAM iterations (4096 to 16384)")
		fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of standard input")
		user, err := parseGroupFlags(fs, args[1:])
		if err != nil {
			return fmt.Errorf("%w: %s", errUsage, usersUsage)
		}
		mechs := []kadm.ScramMechanism{kadm.ScramSha256, kadm.ScramSha512}
		switch strings.ToUpper(*mech) {
		case "":
		case security.MechanismScramSHA256:
			mechs = mechs[:1]
		case security.MechanismScramSHA512:
			mechs = mechs[1:]
		default:
			return fmt.Errorf("%w: mechanism %q", errUsage, *mech)
		}
		var del []kadm.DeleteSCRAM
		var up []kadm.UpsertSCRAM
		if args[0] == "set" {
			pass := os.Getenv("COHORT_USER_PASSWORD")
			if *fromStdin {
				line, err := bufio.NewReader(stdin).ReadString('\n')
				if err != nil && line == "" {
					return fmt.Errorf("read the password: %w", err)
				}
				pass = strings.TrimRight(line, "\r\n")
			}
			if pass == "" {
				return fmt.Errorf("%w: users set needs a password (--password-stdin or COHORT_USER_PASSWORD)", errUsage)
			}
			for _, m := range mechs {
				up = append(up, kadm.UpsertSCRAM{User: user, Mechanism: m, Iterations: int32(*iters), Password: pass})
			}
		} else {
			for _, m := range mechs {
				del = append(del, kadm.DeleteSCRAM{User: user, Mechanism: m})
			}
		}
		res, err := adm.AlterUserSCRAMs(ctx, del, up)
		if err != nil {
			return err
		}
		if err := res.Error(); err != nil {
			return fmt.Errorf("user %s: %w", user, err)
		}
		fmt.Fprintf(c.out, "%s %s\n", map[string]string{"set": "set", "delete": "deleted"}[args[0]], user)
		return nil
	}
	return fmt.Errorf("%w: %s", errUsage, usersUsage)
}

const aclsUsage = `acls list|create|delete [--group G | --topic T | --cluster]... [--resource-pattern-type literal|prefixed|match|any] (--allow-principal P | --deny-principal P)... [--host H] [--operation OP]...`

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// acls manages ACLs as kafka-acls.sh does (CreateAcls, DescribeAcls,
// DeleteAcls); list and delete take the flags as a filter.
func (c *cli) acls(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, aclsUsage)
	}
	fs := flag.NewFlagSet("acls", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var groups, topics, allow, deny, hosts, ops multi
	fs.Var(&groups, "group", "group resource (repeatable)")
	fs.Var(&topics, "topic", "topic resource (repeatable)")
	clusterRes := fs.Bool("cluster", false, "the cluster resource")
	pattern := fs.String("resource-pattern-type", "", "literal or prefixed (create: default literal); match or any too for list and delete (default any)")
	fs.Var(&allow, "allow-principal", "User:name allowed (repeatable)")
	fs.Var(&deny, "deny-principal", "User:name denied (repeatable)")
	fs.Var(&hosts, "host", "host the principals connect from (default *)")
	fs.Var(&ops, "operation", "READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, ALL, ... (repeatable)")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 0 {
		return fmt.Errorf("%w: %s", errUsage, aclsUsage)
	}
	create := args[0] == "create"
	b := kadm.NewACLs()
	if len(groups) > 0 {
		b.Groups(groups...)
	}
	if len(topics) > 0 {
		b.Topics(topics...)
	}
	if *clusterRes {
		b.Clusters()
	}
	if !create && len(groups)+len(topics) == 0 && !*clusterRes {
		b.AnyResource()
	}
	if len(allow) > 0 || create {
		b.MaybeAllow(allow...)
	} else if len(deny) == 0 {
		b.Allow()
	}
	if len(deny) > 0 || create {
		b.MaybeDeny(deny...)
	} else if len(allow) == 0 {
		b.Deny()
	}
	if len(hosts) == 0 && create {
		hosts = multi{"*"}
	}
	if len(hosts) > 0 {
		if len(allow) > 0 || !create {
			b.AllowHosts(hosts...)
		}
		if len(deny) > 0 || !create {
			b.DenyHosts(hosts...)
		}
	} else {
		b.AllowHosts()
		b.DenyHosts()
	}
	var kops []kadm.ACLOperation
	for _, o := range ops {
		op, err := kmsg.ParseACLOperation(strings.ReplaceAll(strings.ToLower(o), "_", ""))
		if err != nil {
			return fmt.Errorf("%w: operation %q", errUsage, o)
		}
		kops = append(kops, op)
	}
	if len(kops) == 0 && !create {
		kops = []kadm.ACLOperation{kadm.OpAny}
	}
	b.Operations(kops...)
	switch p := strings.ToLower(*pattern); {
	case p == "" && create, p == "literal":
		b.ResourcePatternType(kadm.ACLPatternLiteral)
	case p == "prefixed":
		b.ResourcePatternType(kadm.ACLPatternPrefixed)
	case p == "match" && !create:
		b.ResourcePatternType(kadm.ACLPatternMatch)
	case p == "" || p == "any" && !create:
		b.ResourcePatternType(kadm.ACLPatternAny)
	default:
		return fmt.Errorf("%w: resource pattern type %q", errUsage, *pattern)
	}
	adm := kadm.NewClient(c.cl)
	type row struct {
		Principal    string `json:"principal"`
		Host         string `json:"host"`
		Operation    string `json:"operation"`
		Permission   string `json:"permission"`
		ResourceType string `json:"resource_type"`
		ResourceName string `json:"resource_name"`
		Pattern      string `json:"pattern_type"`
	}
	var rows []row
	switch args[0] {
	case "create":
		if err := b.ValidateCreate(); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		res, err := adm.CreateACLs(ctx, b)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return fmt.Errorf("create %s %s on %s %s: %w", r.Principal, r.Operation, r.Type, r.Name, r.Err)
			}
			rows = append(rows, row{r.Principal, r.Host, r.Operation.String(), r.Permission.String(), r.Type.String(), r.Name, r.Pattern.String()})
		}
	case "list":
		res, err := adm.DescribeACLs(ctx, b)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
			for _, d := range r.Described {
				rows = append(rows, row{d.Principal, d.Host, d.Operation.String(), d.Permission.String(), d.Type.String(), d.Name, d.Pattern.String()})
			}
		}
	case "delete":
		res, err := adm.DeleteACLs(ctx, b)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
			for _, d := range r.Deleted {
				if d.Err != nil {
					return d.Err
				}
				rows = append(rows, row{d.Principal, d.Host, d.Operation.String(), d.Permission.String(), d.Type.String(), d.Name, d.Pattern.String()})
			}
		}
	default:
		return fmt.Errorf("%w: %s", errUsage, aclsUsage)
	}
	if rows == nil {
		rows = []row{}
	}
	return c.print(rows, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "PRINCIPAL\tHOST\tOPERATION\tPERMISSION\tRESOURCE\tNAME\tPATTERN")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Principal, r.Host, r.Operation, r.Permission, r.ResourceType, r.ResourceName, r.Pattern)
		}
	})
}
