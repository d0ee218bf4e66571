package hooks

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/sandbox"
)

// BenchmarkHookStart runs a hook that is bash alone (`exit 0`) four ways
// in turn, as many times each: `bash -c` directly with exec.Command (no
// runner), through a runner whose starter is unconfined (how hooks ran
// before), confined without network rules (Policy.AnyPort), and confined
// with them (the default ports allowed, toolbus's reserved). It reports
// each per hook and the ratios: what the confinement adds to a hook, and
// what the network rules add to it.
//
//	go test ./internal/hooks -run '^$' -bench HookStart -benchtime 300x
func BenchmarkHookStart(b *testing.B) {
	ws, hidden := b.TempDir(), b.TempDir()
	runner := func(p *sandbox.Policy) *Runner {
		s := proctree.Unconfined()
		if p != nil {
			p.Writable, p.Hidden = []string{ws}, []string{hidden}
			sb, err := sandbox.New(*p)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { sb.Close() })
			s = proctree.NewStarter(sb)
		}
		b.Cleanup(s.Close)
		r, err := NewRunner(ws, s)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	free, fsOnly := runner(nil), runner(&sandbox.Policy{AnyPort: true})
	withNet := runner(&sandbox.Policy{Connect: []uint16{22, 53, 80, 443, 9418}, Reserved: []uint16{4222, 7879, 8080}})
	h := &Hook{Command: "exit 0", Dialect: ClaudeCode}
	in := &Input{Event: Pre, Tool: Tool{Name: "run_shell_command"}, Workspace: ws}
	run := func(r *Runner) time.Duration {
		t0 := time.Now()
		if o := r.Run(context.Background(), h, in); o.Failure != "" || o.ExitCode != 0 {
			b.Fatalf("%+v", o)
		}
		return time.Since(t0)
	}
	var direct, unconfined, confined, netted time.Duration
	for b.Loop() { // in turn, so that the machine's other work weighs on all alike
		t0 := time.Now()
		if err := exec.Command("bash", "-c", "exit 0").Run(); err != nil {
			b.Fatal(err)
		}
		direct += time.Since(t0)
		unconfined += run(free)
		confined += run(fsOnly)
		netted += run(withNet)
	}
	n := float64(b.N)
	b.ReportMetric(float64(direct.Nanoseconds())/n, "direct-ns/op")
	b.ReportMetric(float64(unconfined.Nanoseconds())/n, "unconfined-ns/op")
	b.ReportMetric(float64(confined.Nanoseconds())/n, "confined-ns/op")
	b.ReportMetric(float64(netted.Nanoseconds())/n, "confined+net-ns/op")
	b.ReportMetric(float64(netted)/float64(unconfined), "confined+net/unconfined")
	b.ReportMetric(float64(netted)/float64(confined), "net/confined")
}
