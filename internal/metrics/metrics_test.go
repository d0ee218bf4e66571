package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/metrics"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// scrape reads /metrics with Prometheus's own parser: what a Prometheus
// server would read.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return families
}

// counter is the value of family's series whose labels are labels.
func counter(f *dto.MetricFamily, labels map[string]string) (float64, bool) {
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		match := len(m.Label) == len(labels)
		for _, l := range m.Label {
			if labels[l.GetName()] != l.GetValue() {
				match = false
			}
		}
		if match {
			if m.Counter != nil {
				return m.Counter.GetValue(), true
			}
			if m.Gauge != nil {
				return m.Gauge.GetValue(), true
			}
		}
	}
	return 0, false
}

// An executor's calls show in its metrics: by tool, verdict and outcome,
// with the time of each stage; the policy revision in force; the bus
// connection. /readyz fails once the connection is gone.
func TestAnExecutorsCallsShowInItsMetrics(t *testing.T) {
	m := metrics.New("executor")
	f := executortest.Start(t, func(c *executor.Config) { c.Observer = m })
	conn := bustest.Connect(t, f.Bus)
	m.WatchConn(conn.Conn())
	srv, err := m.Serve("127.0.0.1:0", bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	base := "http://" + srv.Addr()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 3 {
		if res, err := f.Client.Invoke(ctx, &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}, nil); err != nil || res.Error != nil {
			t.Fatalf("read_file: %+v %v", res, err)
		}
	}
	if res, _ := f.Client.Invoke(ctx, &events.Invocation{Tool: "run_shell_command", Args: json.RawMessage(`{"command":"rm -rf /"}`)}, nil); res == nil || res.Error == nil {
		t.Fatal("rm -rf / was not denied")
	}
	// What a caller names does not become a label: a flood of made-up
	// tool names is one series.
	for i := range 50 {
		f.Client.Invoke(ctx, &events.Invocation{Tool: fmt.Sprintf("no_such_tool_%d", i), Args: json.RawMessage(`{}`)}, nil)
	}

	families := scrape(t, base)
	calls := families["toolbus_invocations_total"]
	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"tool": "read_file", "verdict": "ALLOW", "outcome": "OK"}, 3},
		{map[string]string{"tool": "run_shell_command", "verdict": "DENY", "outcome": string(events.ErrPolicyDenied)}, 1},
		{map[string]string{"tool": "(unknown)", "verdict": "none", "outcome": string(events.ErrToolNotFound)}, 50},
	} {
		if got, ok := counter(calls, c.labels); !ok || got != c.want {
			t.Errorf("invocations %v: %v (%v), want %v", c.labels, got, ok, c.want)
		}
	}
	if n := len(calls.GetMetric()); n != 3 {
		t.Errorf("%d series of invocations, want 3", n)
	}
	stages := map[string]uint64{}
	for _, s := range families["toolbus_stage_seconds"].GetMetric() {
		stages[s.Label[0].GetValue()] = s.Histogram.GetSampleCount()
	}
	if stages["validate"] != 4 || stages["policy"] != 4 || stages["execute"] != 3 {
		t.Errorf("stage counts %v, want validate 4, policy 4, execute 3", stages)
	}
	if v, ok := counter(families["toolbus_policy_info"], map[string]string{"revision": f.Executor.Policy().Revision()}); !ok || v != 1 {
		t.Errorf("the policy revision in force: %v %v", v, ok)
	}
	if v, _ := counter(families["toolbus_bus_connected"], map[string]string{}); v != 1 {
		t.Errorf("bus connected: %v", v)
	}

	if code, body := get(t, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	conn.Conn().Close()
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "bus") {
		t.Errorf("/readyz with the connection closed: %d %s", code, body)
	}
	if v, _ := counter(scrape(t, base)["toolbus_bus_connected"], map[string]string{}); v != 0 {
		t.Errorf("bus connected after close: %v", v)
	}
}

// A bad listen address is an error at start, not a log line later; a
// daemon not yet on the bus is alive and not ready.
func TestStartingUp(t *testing.T) {
	if _, err := metrics.New("bus").Serve("127.0.0.1:99999", bustest.Quiet()); err == nil {
		t.Fatal("no error for port 99999")
	}
	srv, err := metrics.New("bus").Serve("127.0.0.1:0", bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if code, _ := get(t, "http://"+srv.Addr()+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if code, body := get(t, "http://"+srv.Addr()+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Errorf("/readyz before the bus: %d %s", code, body)
	}
}

// /readyz and the log tell the same story: a check that fails makes the
// daemon unready with its reason, each line of it, and the log says so
// once however long it lasts, and once more when it is ready again.
func TestReadinessIsLoggedWhenItTurns(t *testing.T) {
	defer func(d time.Duration) { metrics.ReadyEvery = d }(metrics.ReadyEvery)
	metrics.ReadyEvery = 5 * time.Millisecond
	m := metrics.New("executor")
	var (
		broken atomic.Bool
		checks atomic.Int64
	)
	m.Ready("catalogue", func(context.Context) error {
		checks.Add(1)
		if broken.Load() {
			return errors.Join(errors.New("behind bucket X"), errors.New("bucket X not read"))
		}
		return nil
	})
	var log testkit.Buffer
	stop := m.WatchReadiness(slog.New(slog.NewTextHandler(&log, nil)))
	defer stop()
	srv, err := m.Serve("127.0.0.1:0", bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	readyz := "http://" + srv.Addr() + "/readyz"

	testkit.Eventually(t, "the log says ready", func() bool { return strings.Contains(log.String(), "msg=ready") })
	broken.Store(true)
	if code, body := get(t, readyz); code != http.StatusServiceUnavailable || body != "catalogue: behind bucket X\ncatalogue: bucket X not read\n" {
		t.Errorf("/readyz with the check failing: %d %q", code, body)
	}
	testkit.Eventually(t, "the log says not ready", func() bool { return strings.Contains(log.String(), `msg="not ready"`) })
	more := checks.Load() + 3
	testkit.Eventually(t, "a few more rounds, still unready", func() bool { return checks.Load() >= more })
	if n := strings.Count(log.String(), `msg="not ready"`); n != 1 {
		t.Errorf("not ready logged %d times, want once:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), `why="catalogue: behind bucket X; catalogue: bucket X not read"`) {
		t.Errorf("the log does not say why:\n%s", log.String())
	}
	broken.Store(false)
	testkit.Eventually(t, "the log says ready again", func() bool { return strings.Count(log.String(), "msg=ready") == 2 })
	if code, body := get(t, readyz); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz once the check passes: %d %q", code, body)
	}
}
