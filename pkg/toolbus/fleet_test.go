package toolbus_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/toolbus/toolbus/internal/proctree"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	mcpserver "github.com/mark3labs/mcp-go/server"

	defaultpolicy "github.com/toolbus/toolbus/policy"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/busnode"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	toolmcp "github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/tool"
)

// fleet is a whole single-machine fleet in this process — a bus with
// JetStream on a loopback port, the registry, an executor hosting the
// built-in tools over a temporary workspace under the default policy —
// started without a testing.TB so that Example functions can use it too.
type fleet struct {
	URL       string
	Workspace string
	bus       *bus.Bus
	reg       *registry.Service
	ws        *builtin.Workspace
	shells    *builtin.Shells
	starter   *proctree.Starter
	policy    *policy.Policy
	ex        *executor.Executor
	dir       string
	approvers []*autoApprover
	// stops are what serveMCP and hostElsewhere started, stopped first,
	// in reverse order.
	stops []func(context.Context) error
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// defaultPolicy is the default policy, compiled (its Rego tests run) once
// for every fleet of the process: a Policy is immutable and shared.
var defaultPolicy = sync.OnceValues(func() (*policy.Policy, error) {
	return policy.Compile(context.Background(), policy.Files(defaultpolicy.Default()))
})

// startFleet starts a fleet whose workspace holds README.md ("# hello");
// configure adjusts the executor's Config before it starts.
func startFleet(configure ...func(*executor.Config)) (f *fleet, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f = &fleet{}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if f.dir, err = os.MkdirTemp("", "toolbus-fleet-"); err != nil {
		return nil, err
	}
	ws := filepath.Join(f.dir, "ws")
	if err = os.MkdirAll(ws, 0o755); err != nil {
		return nil, err
	}
	if err = os.WriteFile(filepath.Join(ws, "README.md"), []byte("# hello\n"), 0o644); err != nil {
		return nil, err
	}
	node, err := busnode.Start(ctx, busnode.Config{Listen: "127.0.0.1:0", DataDir: filepath.Join(f.dir, "bus"), Name: "fleet", Logger: quiet()})
	if err != nil {
		return nil, err
	}
	f.bus = node.Bus
	f.URL = f.bus.URL()
	if f.reg, err = registry.Start(ctx, f.bus.Conn(), f.bus.JetStream(), registry.Config{Identity: events.Identity{ID: "registry@test"}, Logger: quiet()}); err != nil {
		return nil, err
	}
	if f.ws, err = builtin.NewWorkspace(ws); err != nil {
		return nil, err
	}
	f.Workspace = f.ws.Root()
	if f.policy, err = defaultPolicy(); err != nil {
		return nil, err
	}
	f.starter = proctree.Unconfined() // the client's behaviour: the node's tests hold the confinement
	f.shells = builtin.NewShells(f.ws, f.starter)
	cfg := executor.Config{Identity: events.Identity{ID: "executor@test", Role: "executor"}, Tools: builtin.Tools(f.ws, f.shells),
		Policy: f.policy, Workspace: f.ws.Root(), Logger: quiet()}
	for _, c := range configure {
		c(&cfg)
	}
	if f.ex, err = executor.Start(ctx, f.bus.Conn(), f.bus.JetStream(), cfg); err != nil {
		return nil, err
	}
	return f, nil
}

// startBareBus starts a bus alone: no registry, no executor.
func startBareBus() (f *fleet, err error) {
	f = &fleet{}
	if f.dir, err = os.MkdirTemp("", "toolbus-bus-"); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := busnode.Start(ctx, busnode.Config{Listen: "127.0.0.1:0", DataDir: f.dir, Name: "bare", Logger: quiet()})
	if err != nil {
		f.Close()
		return nil, err
	}
	f.bus = node.Bus
	f.URL = f.bus.URL()
	return f, nil
}

// Close stops everything startFleet started, in reverse order.
func (f *fleet) Close() error {
	var errs []error
	for _, a := range f.approvers {
		a.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, stop := range slices.Backward(f.stops) {
		errs = append(errs, stop(ctx))
	}
	if f.ex != nil {
		errs = append(errs, f.ex.Stop(ctx))
	}
	if f.shells != nil {
		f.shells.Close()
		f.starter.Close()
	}
	if f.ws != nil {
		errs = append(errs, f.ws.Close())
	}
	if f.reg != nil {
		f.reg.Stop()
	}
	if f.bus != nil {
		// A time of its own: the parts above may have used much of ctx
		// waiting for their last records to be acknowledged.
		busCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		errs = append(errs, f.bus.Close(busCtx))
	}
	if f.dir != "" {
		errs = append(errs, os.RemoveAll(f.dir))
	}
	return errors.Join(errs...)
}

// serveMCP serves tools from an mcp-go server over streamable HTTP on
// loopback, and has the fleet's executor connect to it as the trusted MCP
// server name, as an mcpServers entry with an httpUrl would. It returns
// once the catalogue lists every tool; all of it stops with the fleet.
func (f *fleet) serveMCP(name string, tools ...mcpserver.ServerTool) error {
	srv := mcpserver.NewMCPServer(name, "1.0", mcpserver.WithToolCapabilities(true))
	srv.AddTools(tools...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mcpserver.NewStreamableHTTPServer(srv), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		hs.Serve(ln)
	}()
	f.stops = append(f.stops, func(context.Context) error {
		err := hs.Close()
		<-served
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := toolmcp.Parse(fmt.Appendf(nil, `{"mcpServers": {%q: {"httpUrl": "http://%s/mcp", "trust": true}}}`, name, ln.Addr()), nil)
	if err != nil {
		return err
	}
	mgr, err := toolmcp.Start(ctx, cfg, toolmcp.Options{Identity: events.Identity{ID: "executor@test", Role: "executor"},
		Conn: f.bus.Conn(), JS: f.bus.JetStream(), Host: executornode.HostOn(f.ex), Logger: quiet()})
	if err != nil {
		return err
	}
	f.stops = append(f.stops, func(context.Context) error { mgr.Stop(); return nil })
	for _, t := range tools {
		if err := f.waitTool(ctx, t.Tool.Name); err != nil {
			return err
		}
	}
	return nil
}

// hostElsewhere starts another executor of the fleet on a connection of
// its own, as another process would be, hosting tools; it returns that
// connection (closing it is the executor's process dying) once the
// catalogue lists every tool. It stops with the fleet.
func (f *fleet) hostElsewhere(id string, tools ...tool.Tool) (*bus.Bus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := bus.Connect(ctx, bus.Config{URL: f.URL, Name: id, Logger: quiet()})
	if err != nil {
		return nil, err
	}
	ex, err := executor.Start(ctx, conn.Conn(), conn.JetStream(), executor.Config{Identity: events.Identity{ID: id, Role: "executor"},
		Tools: tools, Policy: f.policy, Logger: quiet()})
	if err != nil {
		conn.Close(ctx)
		return nil, err
	}
	f.stops = append(f.stops, func(ctx context.Context) error {
		// Its connection may be closed already: the executor stops
		// without a word to the bus.
		stopCtx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		ex.Stop(stopCtx)
		conn.Close(ctx)
		return nil
	})
	for _, t := range tools {
		if err := f.waitTool(ctx, t.Spec().Name); err != nil {
			return nil, err
		}
	}
	return conn, nil
}

// waitTool polls until the fleet's executor lists the tool name.
func (f *fleet) waitTool(ctx context.Context, name string) error {
	for {
		if _, ok := f.ex.Catalog().GetTool(name); ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s was never listed: %w", name, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// autoApprover is a real approve.Approver, on a connection of its own,
// that gives every confirmation request the same answer.
type autoApprover struct {
	a      *approve.Approver
	nc     *bus.Bus
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	// asked receives each request's invocation id as it is answered.
	asked chan string
}

// approveAll starts an approver answering every request with outcome, or
// never answering when outcome is empty; it stops with the fleet.
func (f *fleet) approveAll(outcome events.Outcome, message string) (*autoApprover, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := bus.Connect(ctx, bus.Config{URL: f.URL, Name: "approver", Logger: quiet()})
	if err != nil {
		return nil, err
	}
	a, err := approve.Start(ctx, conn.Conn(), conn.JetStream(), approve.Config{Identity: events.Identity{ID: "approver:ada", Role: "approver"}, Logger: quiet()})
	if err != nil {
		conn.Close(ctx)
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	aa := &autoApprover{a: a, nc: conn, cancel: stop, done: make(chan struct{}), asked: make(chan string, 64)}
	go aa.run(runCtx, approve.Answer{Outcome: outcome, Message: message})
	f.approvers = append(f.approvers, aa)
	return aa, nil
}

func (aa *autoApprover) run(ctx context.Context, ans approve.Answer) {
	defer close(aa.done)
	answered := map[string]bool{}
	for {
		state, changed := aa.a.Snapshot()
		for _, r := range state.Pending {
			if answered[r.InvocationID] {
				continue
			}
			answered[r.InvocationID] = true
			if ans.Outcome == "" {
				aa.asked <- r.InvocationID
				continue
			}
			if _, err := aa.a.Answer(ctx, r.AnswerTo, ans); err == nil {
				select {
				case aa.asked <- r.InvocationID:
				default:
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// stop stops the approver; it may be called again, by the fleet's Close.
func (aa *autoApprover) stop() {
	aa.once.Do(func() {
		aa.cancel()
		<-aa.done
		aa.a.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		aa.nc.Close(ctx)
	})
}
