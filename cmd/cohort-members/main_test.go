package main

import (
	"bytes"
	"strings"
	"testing"
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
