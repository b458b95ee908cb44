// Package ratelog keeps logs that a busy cluster could repeat without end
// (group lifecycle events, refused authentications, authorization denials)
// to a bounded rate: a token bucket per kind of line. A line that finds the
// bucket empty is dropped and counted; the next line logged says how many
// were dropped since the previous one ("suppressed").
package ratelog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Limiter is one token bucket. Its zero value is not usable; see New.
type Limiter struct {
	mu         sync.Mutex
	perSecond  float64
	burst      float64
	tokens     float64
	last       time.Time
	suppressed int64
}

// New returns a limiter that lets burst lines through at once and
// perSecond lines a second after that.
func New(perSecond, burst int) *Limiter {
	return &Limiter{perSecond: float64(perSecond), burst: float64(burst), tokens: float64(burst)}
}

// Allow reports whether a line may be logged at now, and when it may, how
// many lines were refused since the last one allowed.
func (l *Limiter) Allow(now time.Time) (ok bool, suppressed int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.After(l.last) {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.perSecond)
	}
	if l.last.IsZero() || now.After(l.last) {
		l.last = now
	}
	if l.tokens < 1 {
		l.suppressed++
		return false, 0
	}
	l.tokens--
	suppressed, l.suppressed = l.suppressed, 0
	return true, suppressed
}

// Log logs msg with attrs at level through log unless the limiter refuses
// it at now; a line logged after refused ones carries their count as
// "suppressed".
func (l *Limiter) Log(log *slog.Logger, now time.Time, level slog.Level, msg string, attrs ...slog.Attr) {
	ctx := context.Background()
	if !log.Enabled(ctx, level) {
		return
	}
	ok, n := l.Allow(now)
	if !ok {
		return
	}
	if n > 0 {
		attrs = append(attrs, slog.Int64("suppressed", n))
	}
	log.LogAttrs(ctx, level, msg, attrs...)
}
