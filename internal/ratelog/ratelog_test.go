package ratelog

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	l := New(2, 3)
	t0 := time.Unix(1000, 0)
	var got []bool
	for range 5 {
		ok, _ := l.Allow(t0)
		got = append(got, ok)
	}
	if want := []bool{true, true, true, false, false}; !slices.Equal(got, want) {
		t.Fatalf("burst of 3: %v, want %v", got, want)
	}
	// Half a second refills one token; the line says two were dropped.
	if ok, n := l.Allow(t0.Add(500 * time.Millisecond)); !ok || n != 2 {
		t.Fatalf("after 0.5s: ok %v suppressed %d, want true 2", ok, n)
	}
	if ok, _ := l.Allow(t0.Add(500 * time.Millisecond)); ok {
		t.Fatal("a second line in the same instant passed")
	}
	// A long pause refills to the burst, not beyond.
	t1 := t0.Add(time.Hour)
	n := 0
	for range 10 {
		if ok, _ := l.Allow(t1); ok {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("after an hour %d lines passed, want the burst of 3", n)
	}
}

func TestLog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := New(1, 1)
	t0 := time.Unix(1000, 0)
	for range 4 {
		l.Log(log, t0, slog.LevelInfo, "event", slog.String("k", "v"))
	}
	l.Log(log, t0.Add(time.Second), slog.LevelInfo, "event")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || strings.Contains(lines[0], "suppressed") || !strings.Contains(lines[1], "suppressed=3") {
		t.Fatalf("lines:\n%s", buf.String())
	}
	// A level the handler drops takes no token.
	l.Log(log, t0.Add(2*time.Second), slog.LevelDebug, "hidden")
	if ok, _ := l.Allow(t0.Add(2 * time.Second)); !ok {
		t.Fatal("a dropped debug line used the token")
	}
}
