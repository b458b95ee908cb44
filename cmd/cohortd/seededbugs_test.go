//go:build seededbugs

package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cohort-coord/cohort/internal/seededbug"
)

func TestSeededBugsFlag(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"--seeded-bugs", "no-such-bug"}, env(nil), &out); code != 2 || !strings.Contains(out.String(), "unknown seeded bug") {
		t.Errorf("unknown bug: exit %d, output %q", code, out.String())
	}
	if _, _, err := parseConfig([]string{"--seeded-bugs", "stale-leader"}, env(nil), &out); err != nil {
		t.Fatal(err)
	}
	if !seededbug.On("stale-leader") || seededbug.On("early-handout") {
		t.Error("--seeded-bugs stale-leader switched on the wrong bugs")
	}
}
