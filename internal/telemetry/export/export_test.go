package export

import (
	"context"
	"os"
	"strings"
	"testing"
)

// Traces are off unless the environment asks for an exporter.
func TestTracesAreOffUnlessAskedFor(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false},
	} {
		if got := Enabled(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("%v: enabled %v, want %v", c.env, got, c.want)
		}
	}
}

// An exporter toolbus does not have, or a protocol it does not speak,
// is said, not taken for "off" in silence.
func TestAnUnknownExporterIsSaid(t *testing.T) {
	for _, c := range []struct{ key, value, want string }{
		{"OTEL_TRACES_EXPORTER", "zipkin", `OTEL_TRACES_EXPORTER "zipkin"`},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", `OTEL_EXPORTER_OTLP_PROTOCOL "http/json"`},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
		t.Setenv(c.key, c.value)
		shutdown, err := Setup(context.Background(), "test")
		if err == nil {
			shutdown(context.Background())
			t.Errorf("%s=%s: set up without a word", c.key, c.value)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: %v; want it named", c.key, c.value, err)
		}
		os.Unsetenv(c.key)
	}
}
