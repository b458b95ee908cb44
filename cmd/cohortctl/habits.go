package main

import (
	"fmt"
	"slices"
	"strings"
)

// Habits from kafka-consumer-groups.sh, kafka-topics.sh and rpk. Those
// cohortctl can honour it honours (--bootstrap-server, the singular
// `group` and `topic` of rpk, --help after any command, every reset mode);
// the others are refused in one line that names cohortctl's way.

// habitError is another tool's way of saying something, refused with
// cohortctl's (exit status 2, one line).
type habitError struct{ msg string }

func (e *habitError) Error() string { return e.msg }

func (e *habitError) Unwrap() error { return errUsage }

// kafkaActions are the action flags of kafka-consumer-groups.sh and
// kafka-topics.sh, and cohortctl's command for each.
var kafkaActions = map[string]string{
	"list":           "'cohortctl groups list' (or 'topics list')",
	"describe":       "'cohortctl groups describe GROUP...' (or --all-groups)",
	"reset-offsets":  "'cohortctl offsets reset GROUP --topic T --to-earliest|--to-latest|--to-offset N|... [--execute]'",
	"delete":         "'cohortctl groups delete GROUP' (or 'topics delete TOPIC')",
	"delete-offsets": "'cohortctl offsets delete GROUP --topic T'",
	"create":         "'cohortctl topics create --partitions N TOPIC'",
	"alter":          "'cohortctl topics alter --partitions N TOPIC'",
	"group":          "a command first: 'cohortctl groups describe --group G'",
	"all-groups":     "a command first: 'cohortctl groups describe --all-groups'",
	"topic":          "a command first: 'cohortctl offsets reset GROUP --topic T ...'",
	"command-config": "the --tls-* and --sasl-* flags (see cohortctl --help)",
}

// selectors are the Kafka flags that cohortctl's commands take too
// (after the command).
var selectors = []string{"group", "all-groups", "topic", "command-config"}

// habitOfFlag turns the flag package's "flag provided but not defined"
// for one of Kafka's action flags into the line that names cohortctl's
// command; any other parse error stays a usage error.
func habitOfFlag(err error) error {
	const undefined = "flag provided but not defined: "
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, undefined); ok {
		name = strings.TrimLeft(name, "-")
		if way, ok := kafkaActions[name]; ok {
			return &habitError{fmt.Sprintf("--%s is kafka-consumer-groups.sh's; cohortctl says %s", name, way)}
		}
	}
	return fmt.Errorf("%w: %v", errUsage, err)
}

// refuseHabit refuses a Kafka action flag where cohortctl wants a
// subcommand ("groups --describe").
func refuseHabit(args []string) error {
	if len(args) < 2 || !slices.Contains([]string{"groups", "offsets", "topics"}, args[0]) {
		return nil
	}
	name, _, _ := strings.Cut(strings.TrimLeft(args[1], "-"), "=")
	if way, ok := kafkaActions[name]; ok && strings.HasPrefix(args[1], "-") && !slices.Contains(selectors, name) {
		return &habitError{fmt.Sprintf("%s %s is kafka-consumer-groups.sh's; cohortctl says %s", args[0], args[1], way)}
	}
	return nil
}

// aliases maps rpk's singular command names to cohortctl's.
func aliases(args []string) []string {
	if len(args) == 0 {
		return args
	}
	switch args[0] {
	case "group":
		return append([]string{"groups"}, args[1:]...)
	case "topic":
		return append([]string{"topics"}, args[1:]...)
	}
	return args
}

// takeBootstrap removes --bootstrap and --bootstrap-server (Kafka's tools'
// name) with their values from anywhere on the line, as Kafka's tools
// take them, and sets bootstrap to the last. Arguments after "--" are left
// alone.
func takeBootstrap(args []string, bootstrap *string) ([]string, error) {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			out = append(out, args[i:]...)
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "bootstrap" && name != "bootstrap-server") {
			out = append(out, a)
			continue
		}
		if !hasVal {
			if i+1 == len(args) {
				return nil, fmt.Errorf("%w: %s needs host:port[,host:port...]", errUsage, a)
			}
			i++
			val = args[i]
		}
		if val == "" {
			return nil, fmt.Errorf("%w: %s needs host:port[,host:port...]", errUsage, a)
		}
		*bootstrap = val
	}
	return out, nil
}

// commandWords are the words that start a command, as --help reads them.
var commandWords = []string{"groups", "offsets", "topics", "users", "acls", "cluster"}

// helpWanted reports whether the line asks for help (-h, --help, or
// `help` as its command), and the command it asks about: its first word
// and the word after it ("groups describe --help").
func helpWanted(args []string) ([]string, bool) {
	asked := false
	var words []string
	for i, a := range args {
		if a == "--" {
			break
		}
		switch {
		case a == "-h" || a == "-help" || a == "--help" || (a == "help" && len(words) == 0):
			asked = true
		case len(words) == 0 && slices.Contains(commandWords, aliases([]string{a})[0]):
			words = append(words, aliases([]string{a})[0])
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && args[i+1] != "help" {
				words = append(words, args[i+1])
			}
		}
	}
	return words, asked
}

// helpFor is the help of one command: the lines of the usage text that
// describe it, or the whole text.
func helpFor(words []string) string {
	if len(words) == 0 {
		return usage
	}
	_, cmds, _ := strings.Cut(usage, "\ncommands:\n")
	cmds, _, _ = strings.Cut(cmds, "\n\n")
	for n := len(words); n > 0; n-- {
		prefix := "  " + strings.Join(words[:n], " ")
		var b strings.Builder
		in := false
		for _, l := range strings.Split(cmds, "\n") {
			switch {
			case strings.HasPrefix(l, prefix+" ") || l == prefix:
				in = true
			case strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "   "):
				in = false
			}
			if in {
				b.WriteString(l + "\n")
			}
		}
		if b.Len() > 0 {
			return "usage: cohortctl [global flags] COMMAND\n\n" + b.String() + "\nglobal flags and every command: cohortctl --help\n"
		}
	}
	return usage
}
