package raftfsm

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
	"strconv"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter lets hashicorp/raft log through slog.
type hclogAdapter struct {
	l    *slog.Logger
	name string
	args []any
}

func newHclog(l *slog.Logger, name string) hclog.Logger {
	return &hclogAdapter{l: l.With("component", name), name: name}
}

func toSlog(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace, hclog.Debug:
		return slog.LevelDebug
	case hclog.Info, hclog.NoLevel, hclog.DefaultLevel:
		return slog.LevelInfo
	case hclog.Warn:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	h.l.Log(context.Background(), toSlog(level), msg, formatArgs(args)...)
}

// formatArgs renders the values hclog formats itself (hclog.Fmt and its
// Hex, Octal, Binary and Quote), which slog would print as they are: raft
// logs its configuration as hclog.Fmt("%+v", servers), which came out as
// servers="[%+v [...]]".
func formatArgs(args []any) []any {
	var out []any
	for i, a := range args {
		var s string
		switch v := a.(type) {
		case hclog.Format:
			if len(v) == 0 {
				continue
			}
			f, ok := v[0].(string)
			if !ok {
				continue
			}
			s = fmt.Sprintf(f, v[1:]...)
		case hclog.Hex:
			s = fmt.Sprintf("0x%x", int(v))
		case hclog.Octal:
			s = fmt.Sprintf("0%o", int(v))
		case hclog.Binary:
			s = fmt.Sprintf("0b%b", int(v))
		case hclog.Quote:
			s = strconv.Quote(string(v))
		default:
			continue
		}
		if out == nil {
			out = slices.Clone(args)
		}
		out[i] = s
	}
	if out == nil {
		return args
	}
	return out
}
func (h *hclogAdapter) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogAdapter) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogAdapter) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogAdapter) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogAdapter) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }
func (h *hclogAdapter) enabled(l slog.Level) bool {
	return h.l.Enabled(context.Background(), l)
}
func (h *hclogAdapter) IsTrace() bool         { return h.enabled(slog.LevelDebug) }
func (h *hclogAdapter) IsDebug() bool         { return h.enabled(slog.LevelDebug) }
func (h *hclogAdapter) IsInfo() bool          { return h.enabled(slog.LevelInfo) }
func (h *hclogAdapter) IsWarn() bool          { return h.enabled(slog.LevelWarn) }
func (h *hclogAdapter) IsError() bool         { return h.enabled(slog.LevelError) }
func (h *hclogAdapter) ImpliedArgs() []any    { return h.args }
func (h *hclogAdapter) Name() string          { return h.name }
func (h *hclogAdapter) SetLevel(hclog.Level)  {}
func (h *hclogAdapter) GetLevel() hclog.Level { return hclog.Info }
func (h *hclogAdapter) ResetNamed(n string) hclog.Logger {
	return &hclogAdapter{l: h.l, name: n, args: h.args}
}
func (h *hclogAdapter) Named(n string) hclog.Logger {
	if h.name != "" {
		n = h.name + "." + n
	}
	return &hclogAdapter{l: h.l, name: n, args: h.args}
}
func (h *hclogAdapter) With(args ...any) hclog.Logger {
	return &hclogAdapter{l: h.l.With(formatArgs(args)...), name: h.name, args: append(append([]any{}, h.args...), args...)}
}
func (h *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo)
}
func (h *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return slog.NewLogLogger(h.l.Handler(), slog.LevelInfo).Writer()
}
