// Package mcp connects toolbus to MCP servers, both ways. This side is the
// client: a Manager, run by an executor, connects to the servers of its
// configuration (config.go), stdio, SSE or streamable HTTP through mcp-go,
// and hosts their tools on the executor (tool.go), so that routing,
// validation, policy, confirmation, deadlines, output caps and audit
// apply to them as to any tool. Each server has a runner (server.go) that
// connects, re-connects with backoff, and keeps the server's state in the
// bus, where every process reads it.
package mcp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/proctree"
	"github.com/toolbus/toolbus/internal/tool"
)

// HostFunc hosts tools as the whole set of one server's tools (and its
// prompts and resources, features.go) on the executor, replacing what it
// hosted for the server before (none: the server's tools are dropped). It
// returns the catalogue name each hosted entry got, by the entry's own
// name (its Spec().Name), and warnings about entries that were not hosted.
// The executor's Host is one; cmd wires it.
type HostFunc func(ctx context.Context, server string, trust bool, tools []tool.Tool) (names map[string]string, warnings []string, err error)

// Options configure a Manager.
type Options struct {
	// Identity is the hosting executor's: the status entries and the
	// discovery subject are its.
	Identity events.Identity
	Conn     *nats.Conn
	JS       jetstream.JetStream
	Host     HostFunc
	Logger   *slog.Logger
	// Starter starts the stdio servers: the node's one starter, whose
	// sandbox keeps a server (often the project's own code, or a package
	// fetched at its start) from toolbus's secrets and ports. It stays
	// the caller's to close; nil starts no stdio server
	// (proctree.ErrNoConfinement).
	Starter *proctree.Starter
	// MinBackoff is the first wait before connecting again to a server
	// that failed (default one second); it doubles up to 30 seconds.
	MinBackoff time.Duration
}

// Manager runs the servers of one configuration for one executor. Stop it
// with Stop.
type Manager struct {
	id      events.Identity
	nc      *nats.Conn
	kv      jetstream.KeyValue
	host    HostFunc
	log     *slog.Logger
	starter *proctree.Starter
	backoff time.Duration

	mu      sync.Mutex
	servers map[string]*server
	stopped bool

	sub     *nats.Subscription
	refresh chan struct{} // closed by Stop
	wg      sync.WaitGroup
}

// Start starts a runner for every server of cfg and returns at once:
// servers connect concurrently, in the background, so a slow or failing
// one holds up no other and nothing else of the executor.
func Start(ctx context.Context, cfg *Config, opts Options) (*Manager, error) {
	if opts.Host == nil || opts.Conn == nil || opts.JS == nil {
		return nil, errors.New("mcp: Options needs Host, Conn and JS")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	kv, err := bus.EnsureKeyValue(ctx, opts.JS, jetstream.KeyValueConfig{
		Bucket:      events.MCPStatusBucket,
		Description: "toolbus: the state of every MCP server on the executor that hosts it",
		TTL:         events.MCPStatusTTL,
		History:     1,
		Storage:     jetstream.MemoryStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("mcp: status bucket: %w", err)
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = minBackoff
	}
	m := &Manager{id: opts.Identity, nc: opts.Conn, kv: kv, host: opts.Host, log: log, starter: cmp.Or(opts.Starter, new(proctree.Starter)), backoff: opts.MinBackoff,
		servers: make(map[string]*server), refresh: make(chan struct{})}
	m.sub, err = m.nc.Subscribe(events.MCPDiscoverSubject(m.id.ID), m.handleDiscover)
	if err != nil {
		return nil, fmt.Errorf("mcp: %w", err)
	}
	m.Apply(cfg)
	m.wg.Add(1)
	go m.keepStatus()
	return m, nil
}

// Apply makes cfg the configuration: servers that left it are stopped and
// their tools dropped, servers whose entry changed are started again, new
// ones started; servers whose entry did not change keep their session.
func (m *Manager) Apply(cfg *Config) {
	want := make(map[string]ServerConfig)
	if cfg != nil {
		for _, sc := range cfg.Servers {
			want[sc.Name] = sc
		}
	}
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	var gone []*server
	for name, s := range m.servers {
		if sc, ok := want[name]; !ok || !sc.Equal(s.cfg) {
			gone = append(gone, s)
			delete(m.servers, name)
		}
	}
	var started []*server
	for name, sc := range want {
		if _, ok := m.servers[name]; !ok {
			s := newServer(m, sc)
			m.servers[name] = s
			started = append(started, s)
		}
	}
	m.mu.Unlock()
	// Stopped before the new ones start: a changed server's old tools
	// and status go before its new ones come.
	m.stopServers(gone, true)
	for _, s := range started {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			s.run()
		}()
	}
}

// stopServers stops servers concurrently; with drop, their tools and
// status entries are removed too.
func (m *Manager) stopServers(servers []*server, drop bool) {
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.close()
			if !drop {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, _, err := m.host(ctx, s.cfg.Name, s.cfg.Trust, nil); err != nil {
				m.log.Warn("the tools of a removed MCP server were not dropped", "server", s.cfg.Name, "err", err)
			}
			_ = m.kv.Delete(ctx, events.MCPStatusKey(m.id.ID, s.cfg.Name))
			m.log.Info("MCP server removed", "server", s.cfg.Name)
		}()
	}
	wg.Wait()
}

// Discover lists the tools of server again and hosts them in place of
// the old list.
func (m *Manager) Discover(ctx context.Context, server string) (names, warnings []string, err error) {
	m.mu.Lock()
	s := m.servers[server]
	m.mu.Unlock()
	if s == nil {
		return nil, nil, fmt.Errorf("no MCP server %q is configured on executor %s", server, m.id.ID)
	}
	found := s.rediscover(ctx)
	return found.tools, found.warnings, found.err
}

// Health reports the servers that are down past their retries (each
// not connected after UnreadyAfter failed connections in a row), nil
// when there are none. Disabled servers are not down: they are
// configured so.
func (m *Manager) Health() error {
	m.mu.Lock()
	servers := make([]*server, 0, len(m.servers))
	for _, s := range m.servers {
		servers = append(servers, s)
	}
	m.mu.Unlock()
	sort.Slice(servers, func(i, j int) bool { return servers[i].cfg.Name < servers[j].cfg.Name })
	var errs []error
	for _, s := range servers {
		if why := s.down(); why != "" {
			errs = append(errs, errors.New(why))
		}
	}
	return errors.Join(errs...)
}

// Status is the state of every server, by name.
func (m *Manager) Status() []events.MCPServerStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []events.MCPServerStatus
	for _, s := range m.servers {
		out = append(out, s.snapshot())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Server < out[j].Server })
	return out
}

// Stop stops every server: their sessions end, stdio servers' processes
// are ended and reaped. Their tools stay in the catalogue, hosted by this
// executor's id, as its built-ins do; their status entries go.
func (m *Manager) Stop() {
	m.mu.Lock()
	if m.stopped {
		m.mu.Unlock()
		return
	}
	m.stopped = true
	servers := make([]*server, 0, len(m.servers))
	for _, s := range m.servers {
		servers = append(servers, s)
	}
	m.mu.Unlock()
	m.sub.Unsubscribe()
	close(m.refresh)
	m.stopServers(servers, false)
	m.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = m.kv.Delete(ctx, events.MCPStatusKey(m.id.ID, s.cfg.Name))
	}
}

// publish records a server's status in the bucket and as an event.
func (m *Manager) publish(st *events.MCPServerStatus) {
	if data := m.store(st); data != nil {
		if err := m.nc.Publish(events.SubjectMCPStatus, data); err != nil {
			m.log.Warn("MCP status not published", "server", st.Server, "err", err)
		}
	}
}

// store writes a server's status, newly stamped, to the bucket, and
// returns it encoded (nil when it does not encode).
func (m *Manager) store(st *events.MCPServerStatus) []byte {
	st.Sender = m.id
	st.ID, st.Time = "", time.Time{}
	data, err := events.Encode(st)
	if err != nil {
		m.log.Error("MCP status does not encode", "server", st.Server, "err", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := m.kv.Put(ctx, events.MCPStatusKey(m.id.ID, st.Server), data); err != nil {
		m.log.Warn("MCP status not stored", "server", st.Server, "err", err)
	}
	return data
}

// keepStatus writes every server's status again before its entry
// expires, so entries stay while this executor lives.
func (m *Manager) keepStatus() {
	defer m.wg.Done()
	t := time.NewTicker(events.MCPStatusRefresh)
	defer t.Stop()
	for {
		select {
		case <-m.refresh:
			return
		case <-t.C:
		}
		for _, st := range m.Status() {
			m.store(&st)
		}
	}
}

// ReadStatus reads the state of every MCP server, on every executor, from
// the status bucket, by server then executor; entries that do not decode
// are left out and said in malformed. With no bucket yet (no executor has
// had a server) there are none.
func ReadStatus(ctx context.Context, js jetstream.JetStream) (states []*events.MCPServerStatus, malformed []error, err error) {
	kv, err := js.KeyValue(ctx, events.MCPStatusBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, nil, err
	}
	for key := range keys.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue // expired since it was listed
		}
		st, err := events.Decode[events.MCPServerStatus](e.Value())
		if err != nil {
			malformed = append(malformed, fmt.Errorf("status entry %s: %w", key, err))
			continue
		}
		states = append(states, st)
	}
	sort.Slice(states, func(i, j int) bool {
		if states[i].Server != states[j].Server {
			return states[i].Server < states[j].Server
		}
		return states[i].Executor < states[j].Executor
	})
	return states, malformed, nil
}

// handleDiscover answers a discovery request for one of the servers.
func (m *Manager) handleDiscover(msg *nats.Msg) {
	reply := &events.MCPDiscoverReply{Header: events.Header{Sender: m.id}}
	req, err := events.Decode[events.MCPDiscoverRequest](msg.Data)
	if err != nil {
		reply.RequestID, reply.Error = "unknown", "malformed discovery request: "+err.Error()
	} else {
		reply.RequestID, reply.Server = req.ID, req.Server
		// Off the subscription's goroutine: listing takes a while, and
		// other servers' requests need not wait for it.
		m.mu.Lock()
		stopped := m.stopped
		if !stopped {
			m.wg.Add(1)
		}
		m.mu.Unlock()
		if stopped {
			reply.Error = "the executor is stopping"
			m.respond(msg, reply)
			return
		}
		go func() {
			defer m.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
			defer cancel()
			// Every request an executor acts on is in the audit trail:
			// one that cannot be recorded is refused.
			if err := bus.RecordRequestOnce(ctx, m.nc, msg); err != nil {
				reply.Error = "the request cannot be recorded in the audit stream: " + err.Error()
				m.respond(msg, reply)
				return
			}
			names, warnings, err := m.Discover(ctx, req.Server)
			reply.Tools, reply.Warnings = names, warnings
			if err != nil {
				reply.Error = err.Error()
			}
			m.respond(msg, reply)
		}()
		return
	}
	m.respond(msg, reply)
}

func (m *Manager) respond(msg *nats.Msg, reply *events.MCPDiscoverReply) {
	data, err := events.Encode(reply)
	if err == nil {
		err = msg.Respond(data)
	}
	if err != nil {
		m.log.Warn("discovery reply not sent", "err", err)
	}
}
