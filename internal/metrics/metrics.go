// Package metrics serves what an operator watches on every toolbus daemon:
// /metrics in Prometheus's format, /healthz (the process answers) and
// /readyz (it can do its work: its bus connection is up and its parts
// say they are ready), and logs when readiness changes.
//
// The invoke path reports through executor.Observer, which Metrics
// implements with counters and histograms made once: a call costs a few
// label lookups, no allocation of its own.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toolbus/toolbus/internal/events"
)

// Metrics is one daemon's metrics.
type Metrics struct {
	reg *prometheus.Registry

	invocations *prometheus.CounterVec
	stages      *prometheus.HistogramVec
	policy      *prometheus.GaugeVec

	mu       sync.Mutex
	revision string

	ready []ReadyCheck

	// turns are the outcomes of the readiness checks as last seen, by
	// /readyz or WatchReadiness, and where their changes are logged.
	turns struct {
		sync.Mutex
		log    *slog.Logger // nil until WatchReadiness
		seen   bool
		failed []string
		gauge  prometheus.Gauge
	}
}

// ReadyCheck says whether a part can do its work; an error says why not.
type ReadyCheck struct {
	Name  string
	Check func(context.Context) error
}

// New makes the metrics of daemon (bus, registry, executor, up,
// console), with the Go runtime's and the process's own.
func New(daemon string) *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		reg: reg,
		invocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolbus_invocations_total",
			Help: "Invocations this executor ended, by tool, the policy's verdict (none when the call ended before the policy was asked) and outcome (OK or the error type).",
		}, []string{"tool", "verdict", "outcome"}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolbus_stage_seconds",
			Help:    "Time a call spent in each stage of the executor's pipeline: admit, validate, policy, confirm (waiting for an answer), execute, record (waiting for the trail).",
			Buckets: []float64{.00001, .00005, .0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5, 30, 120, 600},
		}, []string{"stage"}),
		policy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "toolbus_policy_info",
			Help: "The policy revision in force: 1 for the active revision.",
		}, []string{"revision"}),
	}
	reg.MustRegister(m.invocations, m.stages, m.policy)
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "toolbus_build_info", Help: "Always 1; the daemon's name.", ConstLabels: prometheus.Labels{"daemon": daemon},
	}, func() float64 { return 1 }))
	return m
}

// Stage implements executor.Observer.
func (m *Metrics) Stage(stage string, d time.Duration) {
	m.stages.WithLabelValues(stage).Observe(d.Seconds())
}

// Finished implements executor.Observer.
func (m *Metrics) Finished(tool string, verdict events.Verdict, outcome string) {
	v := string(verdict)
	if v == "" {
		v = "none"
	}
	m.invocations.WithLabelValues(tool, v, outcome).Inc()
}

// PolicyRevision implements executor.Observer: revision is in force.
func (m *Metrics) PolicyRevision(revision string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revision != "" {
		m.policy.DeleteLabelValues(m.revision)
	}
	m.revision = revision
	m.policy.WithLabelValues(revision).Set(1)
}

// WatchMCP reports, at each scrape, how many of the MCP servers status
// lists are in each state.
func (m *Metrics) WatchMCP(status func() []events.MCPServerStatus) {
	m.reg.MustRegister(&mcpCollector{status: status, desc: prometheus.NewDesc("toolbus_mcp_servers",
		"MCP servers this executor hosts, by state.", []string{"state"}, nil)})
}

type mcpCollector struct {
	status func() []events.MCPServerStatus
	desc   *prometheus.Desc
}

func (c *mcpCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *mcpCollector) Collect(ch chan<- prometheus.Metric) {
	count := map[events.MCPState]int{events.MCPConnecting: 0, events.MCPConnected: 0, events.MCPDisconnected: 0, events.MCPDisabled: 0}
	for _, st := range c.status() {
		count[st.State]++
	}
	for state, n := range count {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), string(state))
	}
}

// WatchConn reports nc's state as toolbus_bus_connected, and makes
// /readyz fail while it is not connected.
func (m *Metrics) WatchConn(nc *nats.Conn) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "toolbus_bus_connected", Help: "1 while the daemon's bus connection is up, else 0.",
	}, func() float64 {
		if nc.IsConnected() {
			return 1
		}
		return 0
	}))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "toolbus_bus_reconnects_total", Help: "Times the bus connection was made again.",
	}, func() float64 { return float64(nc.Stats().Reconnects) }))
	m.Ready("bus", func(context.Context) error {
		if !nc.IsConnected() {
			return fmt.Errorf("bus connection %s", nc.Status())
		}
		return nil
	})
}

// WatchTrail reports the audit trail as an executor sees it: its fill
// (bytes over its cap, as last looked at) as toolbus_audit_trail_fill,
// and the calls refused because it was near its cap, or refused their
// records, as toolbus_audit_full_refusals_total. An operator alerts well
// before the fill reaches the executors' high-water mark.
func (m *Metrics) WatchTrail(fill func() float64, refusals func() uint64) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "toolbus_audit_trail_fill", Help: "The audit stream's bytes over its size cap, as this executor last saw them (every second); from the high-water mark (0.9) on, recorded calls are refused.",
	}, fill))
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "toolbus_audit_full_refusals_total", Help: "Calls this executor refused (AUDIT_FULL) because the audit stream was near its size cap or refused their records.",
	}, func() float64 { return float64(refusals()) }))
}

// Ready adds a check /readyz makes.
func (m *Metrics) Ready(name string, check func(context.Context) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ready = append(m.ready, ReadyCheck{Name: name, Check: check})
}

// Unready runs every readiness check and says why the daemon is not
// ready, a line for each thing that fails ("name: why"); none when it is
// ready. /readyz answers with it. Once WatchReadiness runs, an outcome
// that differs from the last one seen, by /readyz or by the watch, is
// logged: the log says why a daemon turned unready however its turn was
// first seen.
func (m *Metrics) Unready(ctx context.Context) []string {
	// One at a time: a turn is logged in the order the outcomes came.
	m.turns.Lock()
	defer m.turns.Unlock()
	failed := m.check(ctx)
	if m.turns.log != nil {
		switch {
		case len(failed) == 0:
			m.turns.gauge.Set(1)
			if !m.turns.seen || len(m.turns.failed) > 0 {
				m.turns.log.Info("ready")
			}
		default:
			m.turns.gauge.Set(0)
			if !slices.Equal(failed, m.turns.failed) {
				m.turns.log.Warn("not ready", "why", strings.Join(failed, "; "))
			}
		}
		m.turns.seen, m.turns.failed = true, failed
	}
	return failed
}

// check runs every readiness check.
func (m *Metrics) check(ctx context.Context) []string {
	m.mu.Lock()
	checks := append([]ReadyCheck(nil), m.ready...)
	m.mu.Unlock()
	if len(checks) == 0 {
		return []string{"starting: not connected to the bus yet"}
	}
	var failed []string
	for _, c := range checks {
		if err := c.Check(ctx); err != nil {
			// A check that says several things (errors.Join) gets a
			// line for each.
			for _, why := range strings.Split(err.Error(), "\n") {
				failed = append(failed, c.Name+": "+why)
			}
		}
	}
	return failed
}

// ReadyEvery is how often WatchReadiness runs the readiness checks.
var ReadyEvery = 5 * time.Second

// WatchReadiness runs the readiness checks every ReadyEvery, reports the
// outcome as toolbus_ready, and logs its changes (Unready): once when the
// daemon turns unready, with why, again when why changes, and once when
// it is ready again, so that a daemon that stops serving says so without
// anyone asking /readyz. The returned function stops it and waits for it
// to end.
func (m *Metrics) WatchReadiness(log *slog.Logger) (stop func()) {
	gauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "toolbus_ready", Help: "1 while every readiness check (/readyz) passes, else 0; checked every few seconds."})
	m.reg.MustRegister(gauge)
	m.turns.Lock()
	m.turns.log, m.turns.gauge = log, gauge
	m.turns.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(ReadyEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cctx, cancelCheck := context.WithTimeout(ctx, ReadyEvery)
			m.Unready(cctx)
			cancelCheck()
		}
	}()
	return func() {
		cancel()
		<-done
		// What /readyz sees from now on, the daemon stopping, is not
		// news.
		m.turns.Lock()
		m.turns.log = nil
		m.turns.Unlock()
	}
}

// Registry is where a part registers metrics of its own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves /metrics, /healthz and /readyz.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		failed := m.Unready(ctx)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			for _, f := range failed {
				fmt.Fprintln(w, f)
			}
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// Serve serves Handler on listen until Stop. It returns once the port
// is bound, so a bad address is an error at start.
func (m *Metrics) Serve(listen string, log *slog.Logger) (*Server, error) {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	s := &Server{srv: &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}, addr: l.Addr().String(), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics: server stopped", "err", err)
		}
	}()
	log.Info("metrics", "url", "http://"+s.addr+"/metrics")
	return s, nil
}

// Server is a running metrics endpoint.
type Server struct {
	srv  *http.Server
	addr string
	done chan struct{}
}

// Addr is where it listens.
func (s *Server) Addr() string { return s.addr }

// Stop stops it; in-flight scrapes get a second.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
	<-s.done
}
