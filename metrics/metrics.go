// Package metrics exposes the daemon's and the collector's counters to
// Prometheus (`--metrics-listen ADDR` on `mcpwarden daemon` and
// `mcpwarden collect`).
//
// The components keep their own counters (atomic values behind a Stats
// method) and know nothing of Prometheus; this package turns a snapshot of
// them into series at each scrape. Every label value comes from a closed
// set (event kinds, finding types, severities, drop stages): no host name,
// run id, scope or path ever becomes a label, so a scrape tells nothing an
// event would hide and the series count stays fixed.
//
// docs/metrics.md lists every series.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Namespace prefixes every series of ours.
const Namespace = "mcpwarden"

// Path is where the series are served.
const Path = "/metrics"

// NewRegistry returns a registry with the Go runtime's and the process's
// series and mcpwarden_build_info{component, version}.
func NewRegistry(component, version string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace:   Namespace,
			Name:        "build_info",
			Help:        "Always 1; the labels say which component and version this is.",
			ConstLabels: prometheus.Labels{"component": component, "version": version},
		}, func() float64 { return 1 }),
	)
	return reg
}

// CheckAddr checks a --metrics-listen value: HOST:PORT with a numeric
// port (0 picks a free one). An empty host would listen on every address;
// it must be written out (0.0.0.0:PORT or [::]:PORT), so that exposing the
// endpoint beyond this host is always a visible choice.
func CheckAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-listen %q: want HOST:PORT such as 127.0.0.1:9474: %w", addr, err)
	}
	if host == "" {
		return fmt.Errorf("--metrics-listen %q: name the address (127.0.0.1:%s for this host only, 0.0.0.0:%s for every interface)", addr, port, port)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("--metrics-listen %q: the port must be a number 0-65535", addr)
	}
	return nil
}

// Server serves one registry over HTTP.
type Server struct {
	ln  net.Listener
	srv *http.Server
	log *slog.Logger
}

// Listen checks addr and listens on it. The endpoint has no
// authentication: it carries counts only, but bind it to loopback or a
// network the scrapers alone reach.
func Listen(addr string, reg *prometheus.Registry, log *slog.Logger) (*Server, error) {
	if err := CheckAddr(addr); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
	return &Server{
		ln:  ln,
		log: log,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      15 * time.Second,
			IdleTimeout:       time.Minute,
			MaxHeaderBytes:    16 << 10,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		},
	}, nil
}

// Addr is the address the server listens on (the port chosen for :0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	})
	defer stop()
	s.log.Info("metrics listening", "addr", s.ln.Addr().String(), "path", Path)
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server: %w", err)
	}
	return nil
}

// desc is a shorthand for one of our series' descriptions.
func desc(subsystem, name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, subsystem, name), help, labels, nil)
}

func counter(d *prometheus.Desc, v uint64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
