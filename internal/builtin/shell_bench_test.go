package builtin

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/tool"
)

// BenchmarkShellTrue runs `true` through run_shell_command and, in the same
// run and as many times, directly with exec.Command("bash", "-c", "true"),
// and reports the ratio: what the tool adds to the cheapest command (its
// process tree's supervisor, the output capture, the formatting).
//
//	go test ./internal/builtin -run '^$' -bench ShellTrue -benchtime 200x
func BenchmarkShellTrue(b *testing.B) {
	dir := b.TempDir()
	ws, err := NewWorkspace(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer ws.Close()
	shells := NewShells(ws, unconfined(b))
	defer shells.Close()
	sh := &runShell{shells: shells}
	call := &tool.Call{ID: "bench", Args: json.RawMessage(`{"command":"true"}`)}
	viaTool := func() {
		if out, err := sh.Run(context.Background(), call); err != nil || out.Err != nil {
			b.Fatal(err, out)
		}
	}
	direct := func() {
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	}
	var toolTime, directTime time.Duration
	b.ResetTimer()
	for b.Loop() { // in turn, so that the machine's other work weighs on both alike
		start := time.Now()
		viaTool()
		mid := time.Now()
		direct()
		toolTime += mid.Sub(start)
		directTime += time.Since(mid)
	}
	b.ReportMetric(float64(toolTime.Nanoseconds())/float64(b.N), "tool-ns/op")
	b.ReportMetric(float64(directTime.Nanoseconds())/float64(b.N), "direct-ns/op")
	b.ReportMetric(float64(toolTime)/float64(directTime), "tool/direct")
}
