// Package jaeger runs Jaeger, a real trace store, for the tests that
// follow a call's trace from an MCP client through toolbus to the tool:
// its OTLP receiver takes what toolbus's parts export, and its query API
// gives the trace back. scripts/test.sh builds Jaeger v2 (the
// all-in-one, on OpenTelemetry's collector) from the Go module proxy
// into $TOOLBUS_JAEGER (default ~/.cache/toolbus/jaeger/VERSION/jaeger).
// A test that finds it missing skips, or fails under CI=true.
//
// Only tests import this package.
package jaeger

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
)

// Version is the Jaeger scripts/test.sh builds.
const Version = "v1.76.0"

// Binary is the path of the jaeger binary.
func Binary(t testing.TB) string {
	t.Helper()
	path := os.Getenv("TOOLBUS_JAEGER")
	if path == "" {
		home, _ := os.UserHomeDir()
		path = filepath.Join(home, ".cache", "toolbus", "jaeger", Version, "jaeger")
	}
	if _, err := os.Stat(path); err != nil {
		testkit.Missing(t, "jaeger is not at %s: ./scripts/test.sh builds it there", path)
	}
	return path
}

// Jaeger is a Jaeger the test started, keeping traces in memory.
type Jaeger struct {
	// OTLP is the base URL of its OTLP/HTTP receiver: what
	// OTEL_EXPORTER_OTLP_ENDPOINT names.
	OTLP string
	// Query is the base URL of its query API and UI.
	Query string
}

// config is a Jaeger v2 configuration: OTLP over HTTP in, memory
// storage, the query API out, every port the test's own, and no
// telemetry of Jaeger's own on fixed ports.
const config = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memory_store:
        memory:
          max_traces: 10000
  jaeger_query:
    storage:
      traces: memory_store
    http:
      endpoint: %s
    grpc:
      endpoint: %s
receivers:
  otlp:
    protocols:
      http:
        endpoint: %s
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memory_store
`

// Start runs Jaeger on free loopback ports until the test ends, and
// returns once its query API answers.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin := Binary(t)
	query, grpc, otlp := testkit.UnusedAddr(t), testkit.UnusedAddr(t), testkit.UnusedAddr(t)
	path := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, config, query, grpc, otlp), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config", path)
	var log strings.Builder
	var mu sync.Mutex
	cmd.Stdout, cmd.Stderr = lockedWriter{&mu, &log}, lockedWriter{&mu, &log}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start jaeger: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-exited
	})
	j := &Jaeger{OTLP: "http://" + otlp, Query: "http://" + query}
	var exitErr error
	if !testkit.Poll(time.Minute, func() bool {
		select {
		case exitErr = <-exited:
			exited <- exitErr // for the cleanup
			return true
		default:
		}
		resp, err := http.Get(j.Query + "/api/services")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) || exitErr != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("jaeger did not answer (exit: %v); its log:\n%s", exitErr, log.String())
	}
	return j
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Span is a span as Jaeger's query API gives it.
type Span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
	// Service is the name of the service that sent the span.
	Service string `json:"-"`
}

// Parent is the span's parent's id, "" for a root.
func (s *Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Tag is the value of the span's attribute key as text, "" when it has
// none.
func (s *Span) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			if str, ok := t.Value.(string); ok {
				return str
			}
			data, _ := json.Marshal(t.Value)
			return string(data)
		}
	}
	return ""
}

// Trace is what Jaeger holds of the trace id, once has says it holds
// enough: the spans of toolbus's parts come in batches, from each
// process on its own.
func (j *Jaeger) Trace(t testing.TB, id string, has func([]Span) bool) []Span {
	t.Helper()
	var spans []Span
	var last string
	if !testkit.Poll(time.Minute, func() bool {
		spans, last = j.read(id)
		return spans != nil && has(spans)
	}) {
		t.Fatalf("jaeger never held the trace %s as the test wants it; it held %d spans (%s)", id, len(spans), last)
	}
	return spans
}

func (j *Jaeger) read(id string) ([]Span, string) {
	resp, err := http.Get(j.Query + "/api/traces/" + id)
	if err != nil {
		return nil, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, resp.Status
	}
	var body struct {
		Data []struct {
			Spans     []Span `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err.Error()
	}
	var spans []Span
	for _, d := range body.Data {
		for _, s := range d.Spans {
			s.Service = d.Processes[s.ProcessID].ServiceName
			spans = append(spans, s)
		}
	}
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Service + ": " + s.OperationName
	}
	return spans, strings.Join(names, ", ")
}
