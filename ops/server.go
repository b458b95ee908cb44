// Package ops is the operator's HTTP listener of a node: Prometheus metrics
// (/metrics), liveness (/healthz), readiness (/readyz) and a server-rendered
// status page of the cluster and its groups (/, /groups/{id}).
package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cohort-coord/cohort/actors"
	clusterpb "github.com/cohort-coord/cohort/proto/cohort/cluster/v1"
)

// Check is one readiness condition and whether it holds.
type Check struct {
	Name string
	OK   bool
	// Detail says why it does not hold (or what holds).
	Detail string
}

// Readiness is the outcome of every readiness condition, in order.
type Readiness []Check

// Ready reports whether every condition holds.
func (r Readiness) Ready() bool {
	for _, c := range r {
		if !c.OK {
			return false
		}
	}
	return true
}

// Failing lists the conditions that do not hold, as "name: detail".
func (r Readiness) Failing() []string {
	var out []string
	for _, c := range r {
		if !c.OK {
			out = append(out, c.Name+": "+c.Detail)
		}
	}
	return out
}

// Source is what the listener shows; the node implements it.
type Source interface {
	// Readiness evaluates the readiness conditions now.
	Readiness() Readiness
	// ClusterStatus is this node's view of the cluster.
	ClusterStatus() *clusterpb.StatusResponse
	// Groups lists the groups this node coordinates (none on a follower).
	Groups() []actors.GroupView
	// Group returns one of them.
	Group(id string) (actors.GroupView, bool)
}

// Server is a running listener.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

// Start binds addr (host:port, port 0 picks a free port) and serves.
func Start(addr string, gatherer prometheus.Gatherer, src Source, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http listener on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{ErrorLog: slogPrinter{log}}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { serveReady(w, src.Readiness()) })
	p := &pages{src: src}
	mux.HandleFunc("GET /{$}", p.overview)
	mux.HandleFunc("GET /groups/{id...}", p.group)
	s := &Server{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:   ln,
		done: make(chan error, 1),
	}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the listener, letting requests in progress finish for a
// moment.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// serveReady answers 200 when ready and 503 otherwise, one line per
// condition ("ok name" or "fail name: detail").
func serveReady(w http.ResponseWriter, r Readiness) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !r.Ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	var b strings.Builder
	for _, c := range r {
		if c.OK {
			fmt.Fprintf(&b, "ok %s\n", c.Name)
		} else {
			fmt.Fprintf(&b, "fail %s: %s\n", c.Name, c.Detail)
		}
	}
	fmt.Fprint(w, b.String())
}

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.log.Warn("metrics", "err", fmt.Sprint(v...)) }
