package proctree

import (
	"os/exec"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/sandbox"
)

// BenchmarkConfinedSpawn starts `bash -c true` four ways in turn, as
// many times each: directly with exec.Command, as an unconfined tree, as
// a tree confined without network rules (the file system and the scopes:
// Policy.AnyPort), and as a tree confined with them (the default ports
// allowed, toolbus's reserved), each policy hiding a directory beside the
// workspace (so the ruleset lists the directories on the way to it). It
// reports the ratios: what confinement adds per spawn against a direct
// exec and against the tree it confines, and what the network rules add.
//
//	go test ./internal/proctree -run '^$' -bench ConfinedSpawn -benchtime 300x
func BenchmarkConfinedSpawn(b *testing.B) {
	s := Unconfined()
	defer s.Close()
	ws, hidden := b.TempDir(), b.TempDir()
	newSandbox := func(p sandbox.Policy) *sandbox.Sandbox {
		p.Writable, p.Hidden = []string{ws}, []string{hidden}
		sb, err := sandbox.New(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sb.Close() })
		return sb
	}
	fsOnly := newSandbox(sandbox.Policy{AnyPort: true})
	withNet := newSandbox(sandbox.Policy{Connect: []uint16{22, 53, 80, 443, 9418}, Reserved: []uint16{4222, 7879, 8080}})
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
	var direct, free, confined, netted time.Duration
	for b.Loop() { // in turn, so that the machine's other work weighs on all alike
		t0 := time.Now()
		if err := exec.Command("bash", "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		tree(nil)
		t2 := time.Now()
		tree(fsOnly)
		t3 := time.Now()
		tree(withNet)
		t4 := time.Now()
		direct, free, confined, netted = direct+t1.Sub(t0), free+t2.Sub(t1), confined+t3.Sub(t2), netted+t4.Sub(t3)
	}
	n := float64(b.N)
	b.ReportMetric(float64(direct.Nanoseconds())/n, "direct-ns/op")
	b.ReportMetric(float64(free.Nanoseconds())/n, "tree-ns/op")
	b.ReportMetric(float64(confined.Nanoseconds())/n, "confined-ns/op")
	b.ReportMetric(float64(netted.Nanoseconds())/n, "confined+net-ns/op")
	b.ReportMetric(float64(confined)/float64(direct), "confined/direct")
	b.ReportMetric(float64(confined)/float64(free), "confined/tree")
	b.ReportMetric(float64(netted)/float64(confined), "net/confined")
}
