package executor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/tool"
)

// hosting is the tools an executor hosts, by scope, and the table calls
// look them up in. hostMu orders changes to them and their registration.
type hosting struct {
	hostMu    sync.Mutex
	sets      map[string]*toolSet
	table     atomic.Pointer[toolTable]
	registrar bool // the goroutine registering pending sets runs
	// tableChanged is closed, and replaced, each time table is: a call
	// for a tool whose registration is in flight waits for it (awaitHosted).
	tableChanged atomic.Pointer[chan struct{}]
}

// The tools an executor hosts come in sets, one per scope: the built-ins
// it starts with, and, at run time, each MCP server's tools (later each
// discovery command's). Host replaces a scope's set as a whole, on the
// executor and in the catalogue, so a server that is re-discovered, dies
// or leaves the configuration changes its own tools and no other.
//
// Calls find their tool through a table from catalogue name to hosted
// tool, replaced (never changed) on every Host, so the invoke path reads
// it without a lock. An MCP tool enters the table under the name the
// registry gave it, taken from the registry's reply: the catalogue maps
// the name to the tool, but only this executor's own registration says
// which of its tools a name is.

// Scope names one set of hosted tools.
type Scope struct {
	Source events.Source
	// Server is the MCP server's name, for source mcp.
	Server string
	// Trust is the MCP server's trust setting, registered with its tools.
	Trust bool
}

func (s Scope) key() string { return string(s.Source) + "\x00" + s.Server }

func (s Scope) String() string {
	if s.Source == events.SourceMCP {
		return "MCP server " + s.Server
	}
	return string(s.Source) + " tools"
}

// toolSet is one scope's tools, as declared, and what the registry made of
// them.
type toolSet struct {
	scope Scope
	tools []*hosted
	// names maps catalogue names to the set's tools, from the registry's
	// reply (built-ins: their own names, from the start).
	names map[string]*hosted
	// registered: the registry has answered for the set as it is.
	registered bool
}

// toolTable is what the invoke path looks tools up in.
type toolTable map[string]*hosted

// hostedFor is the tool this executor runs for catalogue entry t, or nil:
// the entry must be the one this executor's registration made, from the
// same source and server, or the call goes to another executor.
func (e *Executor) hostedFor(t *events.Tool) *hosted {
	if t == nil {
		return nil
	}
	h := (*e.table.Load())[t.Name]
	if h == nil || h.judged.Source != t.Source {
		return nil
	}
	if t.Source == events.SourceMCP && (h.judged.Server != t.Server || h.spec.Name != t.ServerToolName) {
		return nil
	}
	return h
}

// Host makes tools the set of scope on this executor, in place of the set
// it hosted before (none: the scope's tools are dropped), and registers
// them with the registry, replacing what the executor registered for the
// scope. The tools are callable once the registry has listed them. With
// no registry up it returns registry.ErrNoRegistry after taking the set:
// the executor registers it when a registry comes up.
//
// A tool the executor cannot host (its schema does not compile, it is of
// another source or server than the scope) is left out, and the reply
// says why among the registry's outcomes, as for a tool the registry
// refuses: a server with one broken tool still has the others.
func (e *Executor) Host(ctx context.Context, scope Scope, tools []tool.Tool) (*events.RegisterReply, error) {
	set := &toolSet{scope: scope}
	var before map[string]*hosted
	e.hostMu.Lock()
	if prev := e.sets[scope.key()]; prev != nil { // its tools never change
		before = make(map[string]*hosted, len(prev.tools))
		for _, h := range prev.tools {
			before[h.spec.Name] = h
		}
	}
	e.hostMu.Unlock()
	var refused []events.ToolOutcome
	for _, t := range tools {
		h, err := newHosted(t, before[t.Spec().Name])
		if err == nil && (h.judged.Source != scope.Source || h.judged.Server != scope.Server) {
			err = fmt.Errorf("tool %s is of %s %q, not of %s", h.spec.Name, h.judged.Source, h.judged.Server, scope)
		}
		if err != nil {
			refused = append(refused, events.ToolOutcome{Requested: t.Spec().Name, Error: err.Error()})
			e.log.Warn("tool not hosted", "scope", scope.String(), "tool", t.Spec().Name, "err", err)
			continue
		}
		set.tools = append(set.tools, h)
	}
	e.hostMu.Lock()
	select {
	case <-e.stopping:
		e.hostMu.Unlock()
		return nil, errShutdown
	default:
	}
	e.sets[scope.key()] = set
	reply, err := e.registerSet(ctx, set)
	if errors.Is(err, registry.ErrNoRegistry) {
		e.wakeRegistrar()
	}
	e.hostMu.Unlock()
	if err == nil {
		e.awaitListed(ctx, reply)
	}
	if reply != nil {
		reply.Tools = append(reply.Tools, refused...)
	}
	return reply, err
}

// awaitListed waits until this executor's catalogue holds every tool the
// registry took in reply, so that they are callable through it once Host
// (or Start) returns: the registry answers once the catalogue bucket has
// them, and the executor's replica gets them a moment later. It waits at
// most listedWait, or until ctx ends; then a call may still find a tool
// missing for that moment, which it reports as not found.
func (e *Executor) awaitListed(ctx context.Context, reply *events.RegisterReply) {
	if e.catalog == nil || reply == nil {
		return
	}
	timeout := time.NewTimer(listedWait)
	defer timeout.Stop()
	for {
		changed := e.catalog.Changed()
		if holdsAll(e.catalog.Catalog(), reply.Tools, e.id.ID) {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		case <-timeout.C:
			e.log.Warn("the catalogue does not list every tool the registry took yet", "after", listedWait)
			return
		case <-e.stopping:
			return
		}
	}
}

// listedWait bounds awaitListed.
const listedWait = 10 * time.Second

// holdsAll reports whether c lists every tool outcomes name, with host
// among its hosts: a tool other executors host already is listed before
// this executor's registration of it reaches the replica, and a call
// taken meanwhile would be judged on the entry without this executor
// (its workspace unknown there).
func holdsAll(c *catalog.Catalog, outcomes []events.ToolOutcome, host string) bool {
	for _, o := range outcomes {
		if o.Name != "" && o.Error == "" {
			if t, ok := c.Lookup(o.Name); !ok || !slices.Contains(t.Hosts, host) {
				return false
			}
		}
	}
	return true
}

// registerSet sends set to the registry and, once it answers, puts the
// set's tools under their catalogue names. Called with hostMu held.
func (e *Executor) registerSet(ctx context.Context, set *toolSet) (*events.RegisterReply, error) {
	req := &events.RegisterRequest{Provider: e.id.ID, Source: set.scope.Source, Replace: true}
	if (&events.Tool{Source: set.scope.Source}).WorkspaceBound() {
		req.Workspace = e.workspaceName()
	}
	if set.scope.Source == events.SourceMCP {
		req.Server, req.Trust = set.scope.Server, set.scope.Trust
	}
	for _, h := range set.tools {
		req.Tools = append(req.Tools, h.spec)
	}
	reply, err := registry.NewClient(e.nc, e.id).Register(ctx, req)
	if err != nil {
		return reply, err
	}
	byName := make(map[string]*hosted, len(set.tools))
	for _, h := range set.tools {
		byName[h.spec.Name] = h
	}
	set.names, set.registered = make(map[string]*hosted, len(reply.Tools)), true
	for _, o := range reply.Tools {
		if h := byName[o.Requested]; h != nil && o.Name != "" {
			set.names[o.Name] = h
		}
		if o.Error != "" {
			e.log.Warn("the registry refused a tool", "scope", set.scope.String(), "tool", o.Requested, "reason", o.Error)
		}
	}
	e.rebuildTable()
	return reply, nil
}

// rebuildTable makes the lookup table anew from every registered set.
// Called with hostMu held.
func (e *Executor) rebuildTable() {
	table := make(toolTable)
	for _, set := range e.sets {
		maps.Copy(table, set.names)
	}
	e.table.Store(&table)
	next := make(chan struct{})
	if old := e.tableChanged.Swap(&next); old != nil {
		close(*old)
	}
}

// awaitHosted is hostedFor(t) once this executor's table has it, for a
// tool the catalogue says this executor hosts: the registry's reply, after
// which the executor adds a tool to its table, may come after the
// catalogue's change reached this executor's replica, and a caller may
// call the tool in between. It waits at most hostedWait.
func (e *Executor) awaitHosted(t *events.Tool) *hosted {
	deadline := time.NewTimer(hostedWait)
	defer deadline.Stop()
	for {
		changed := e.tableChanged.Load()
		if h := e.hostedFor(t); h != nil || changed == nil {
			return h
		}
		select {
		case <-*changed:
		case <-deadline.C:
			return e.hostedFor(t)
		}
	}
}

// hostedWait bounds awaitHosted.
const hostedWait = 2 * time.Second

// wakeRegistrar starts, unless it runs, the goroutine that registers the
// sets the registry has not taken yet, every 2 seconds until it has taken
// them all. Called with hostMu held.
func (e *Executor) wakeRegistrar() {
	if e.registrar {
		return
	}
	e.registrar = true
	e.log.Warn("no registry yet; will register the tools when one comes up")
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			select {
			case <-e.stopping:
				return
			case <-time.After(2 * time.Second):
			}
			if e.registerPending() {
				return
			}
		}
	}()
}

// registerPending registers every set the registry has not answered for.
// It reports true when none is left, and the registrar stops.
func (e *Executor) registerPending() bool {
	e.hostMu.Lock()
	defer e.hostMu.Unlock()
	left := false
	for _, set := range e.sets {
		if set.registered {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), registry.DefaultTimeout)
		_, err := e.registerSet(ctx, set)
		cancel()
		switch {
		case err == nil:
			e.log.Info("tools registered", "scope", set.scope.String())
		case errors.Is(err, registry.ErrNoRegistry):
			left = true
		default:
			left = true
			e.log.Warn("registering tools failed; retrying", "scope", set.scope.String(), "err", err)
		}
	}
	if !left {
		e.registrar = false
	}
	return !left
}

// hostBuiltins puts the tools the executor was started with in the table.
// Built-in tools are callable under their own names at once: the registry
// never renames them, and a call forwarded here may come before the
// executor has registered them (registerBuiltins) or heard the reply.
func (e *Executor) hostBuiltins() error {
	scope := Scope{Source: events.SourceBuiltin}
	set := &toolSet{scope: scope, names: make(map[string]*hosted)}
	for _, t := range e.cfg.Tools {
		h, err := newHosted(t, nil)
		if err != nil {
			return fmt.Errorf("executor: %w", err)
		}
		if h.judged.Source != events.SourceBuiltin {
			return fmt.Errorf("executor: tool %s of Config.Tools is not built in; host it with Host", h.spec.Name)
		}
		set.tools = append(set.tools, h)
		set.names[h.spec.Name] = h
	}
	e.hostMu.Lock()
	defer e.hostMu.Unlock()
	e.sets[scope.key()] = set
	e.rebuildTable()
	return nil
}

// registerBuiltins registers the built-in set, in the background when no
// registry is up yet.
func (e *Executor) registerBuiltins(ctx context.Context) error {
	e.hostMu.Lock()
	var (
		reply *events.RegisterReply
		err   error
	)
	if set := e.sets[Scope{Source: events.SourceBuiltin}.key()]; len(set.tools) > 0 {
		reply, err = e.registerSet(ctx, set)
		if errors.Is(err, registry.ErrNoRegistry) {
			e.wakeRegistrar()
			reply, err = nil, nil
		}
	}
	e.hostMu.Unlock()
	if err != nil {
		return fmt.Errorf("executor: register tools: %w", err)
	}
	e.awaitListed(ctx, reply)
	return nil
}

// workspaceName is what callers name this executor's workspace by.
func (e *Executor) workspaceName() string {
	if e.cfg.WorkspaceName != "" {
		return e.cfg.WorkspaceName
	}
	return e.cfg.Workspace
}

// handleCatalogChanged hears the registry say it took this executor off
// its tools' hosts because it stopped answering (events.LostCause): it
// answers again, so it registers its tools again.
func (e *Executor) handleCatalogChanged(m *nats.Msg) {
	ev, err := events.Decode[events.CatalogChanged](m.Data)
	if err != nil || ev.Cause != events.LostCause(e.id.ID) {
		return
	}
	e.hostMu.Lock()
	defer e.hostMu.Unlock()
	select {
	case <-e.stopping:
		return
	default:
	}
	e.log.Warn("the registry took this executor for lost; registering its tools again")
	for _, set := range e.sets {
		set.registered = false
	}
	e.wakeRegistrar()
}
