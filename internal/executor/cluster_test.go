package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus/bustest"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/registry/registrytest"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
)

// TestCallsGoOnWhenANodeGoes: a fleet on a three-node cluster, the
// registry, the executor and the caller each given every node's URL. The
// node the executor is connected to goes; calls resume once the executor
// has moved to another node, and the audit stream, kept in three copies,
// holds every invocation with exactly one terminal result.
func TestCallsGoOnWhenANodeGoes(t *testing.T) {
	nodes := bustest.StartCluster(t, 3, 0)
	urls := bustest.URLs(nodes)
	registrytest.Start(t, bustest.ConnectURL(t, urls))
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "README.md"), []byte("# hello\n"), 0o644)
	ws, err := builtin.NewWorkspace(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	shells := builtin.NewShells(ws)
	defer shells.Close()
	execConn := bustest.ConnectURL(t, urls)
	ex, err := Start(context.Background(), execConn.Conn(), execConn.JetStream(), Config{Identity: events.Identity{ID: "executor@cluster"},
		Tools: builtin.Tools(ws, shells), Policy: defaultPol(t), Workspace: ws.Root(), Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ex.Stop(ctx)
	}()
	callerConn := bustest.ConnectURL(t, urls)
	client := NewClient(callerConn.Conn(), events.Identity{ID: "agent:cluster"})
	defer client.Close()

	var (
		mu  sync.Mutex
		ids []string
	)
	call := func() (*events.Result, time.Time) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		inv := &events.Invocation{Tool: "read_file", Args: json.RawMessage(`{"file_path":"README.md"}`)}
		res, err := client.Invoke(ctx, inv, nil)
		mu.Lock()
		ids = append(ids, inv.ID)
		mu.Unlock()
		if err != nil {
			return &events.Result{Error: &events.ToolError{Type: "CLIENT", Message: err.Error()}}, start
		}
		return res, start
	}
	for i := range 10 {
		if res, _ := call(); res.Error != nil {
			t.Fatalf("call %d: %s %s", i, res.Error.Type, res.Error.Message)
		}
	}
	// Four callers keep calling while the node the executor is
	// connected to goes.
	var gone int
	for i, n := range nodes {
		if n.URL() == execConn.Conn().ConnectedUrl() {
			gone = i
		}
	}
	var went time.Time
	resumed := make(chan time.Duration, 1)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, start := call()
				mu.Lock()
				after := !went.IsZero() && start.After(went)
				w := went
				mu.Unlock()
				switch {
				case res.Error != nil:
					failed.Add(1)
				case after:
					select {
					case resumed <- time.Since(w):
					default:
					}
				}
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	went = time.Now()
	mu.Unlock()
	bustest.Stop(t, nodes[gone])
	// A bound on the wait, not a measurement: the time is logged.
	select {
	case d := <-resumed:
		t.Logf("a call started after the node went succeeded %s after it went; %d calls failed", d.Round(time.Millisecond), failed.Load())
	case <-time.After(time.Minute):
		t.Fatal("no call started after a node went succeeded within a minute")
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	for i := range 10 {
		if res, _ := call(); res.Error != nil {
			t.Fatalf("call %d after the node went: %s %s", i, res.Error.Type, res.Error.Message)
		}
	}
	// Read from a node that stayed.
	// TODO(fleet): a reader on a client connection that moved from the
	// node that went sometimes gets "no responders" or "maximum consumers
	// limit reached" for a while after (see the notes).
	live := nodes[(gone+1)%len(nodes)]
	counts := audittest.ResultsOf(t, live.JetStream(), ids)
	for _, id := range ids {
		if c := counts[id]; c == nil || c.Terminal != 1 {
			t.Errorf("invocation %s: %+v terminal results", id, c)
		}
	}
}
