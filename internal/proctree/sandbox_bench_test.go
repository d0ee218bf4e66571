package proctree

import (
	"os/exec"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/sandbox"
)

// BenchmarkConfinedSpawn starts `bash -c true` three ways in turn, as
// many times each: directly with exec.Command, as an unconfined tree, and
// as a tree confined by a policy that hides a directory beside the
// workspace (so the ruleset lists the directories on the way to it). It
// reports the ratios: what confinement adds per spawn, against a direct
// exec and against the tree it confines.
//
//	go test ./internal/proctree -run '^$' -bench ConfinedSpawn -benchtime 300x
func BenchmarkConfinedSpawn(b *testing.B) {
	s := Unconfined()
	defer s.Close()
	ws, hidden := b.TempDir(), b.TempDir()
	sb, err := sandbox.New(sandbox.Policy{Writable: []string{ws}, Hidden: []string{hidden}})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close()
	b.Logf("this kernel: %s", sandbox.Describe())
	tree := func(p *sandbox.Sandbox) {
		c := bashCommand(ws, "true", nil)
		c.Sandbox = p
		tr, err := s.Start(c)
		if err != nil {
			b.Fatal(err)
		}
		if ws, err := tr.Wait(); err != nil || ws.ExitStatus() != 0 {
			b.Fatal(ws, err)
		}
	}
	var direct, free, confined time.Duration
	for b.Loop() { // in turn, so that the machine's other work weighs on all alike
		t0 := time.Now()
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		tree(nil)
		t2 := time.Now()
		tree(sb)
		direct, free, confined = direct+t1.Sub(t0), free+time.Since(t1)-time.Since(t2), confined+time.Since(t2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(direct.Nanoseconds())/n, "direct-ns/op")
	b.ReportMetric(float64(free.Nanoseconds())/n, "tree-ns/op")
	b.ReportMetric(float64(confined.Nanoseconds())/n, "confined-ns/op")
	b.ReportMetric(float64(confined)/float64(direct), "confined/direct")
	b.ReportMetric(float64(confined)/float64(free), "confined/tree")
}
