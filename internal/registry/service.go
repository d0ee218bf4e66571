package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
)

// ServiceVersion is reported by the registry's micro service.
const ServiceVersion = "0.1.0"

// saveTimeout bounds how long one request may wait for the bucket.
const saveTimeout = 30 * time.Second

// Config configures a registry Service.
type Config struct {
	Settings Settings
	// Identity is the sender of the registry's replies and events.
	Identity events.Identity
	Logger   *slog.Logger
}

// Service is the registry on the bus: a NATS micro service answering
// tool.register, tool.registry.remove and tool.registry.toggle, one request
// at a time, keeping the catalogue bucket in step and publishing a
// CatalogChanged event for every request that changed something.
type Service struct {
	reg   *Registry
	nc    *nats.Conn
	js    jetstream.JetStream
	store *store
	svc   micro.Service
	rec   *bus.Recorder // records the requests and the changes
	id    events.Identity
	log   *slog.Logger

	stop    chan struct{} // closed by Stop: the executors' watch ends
	watched chan struct{} // closed when it has

	watchMu sync.Mutex
	misses  map[string]int // executors watched, by id: pings missed since their last answer
	// lost are the executors taken off their tools' hosts that have not
	// registered since, with the changes that made: each that answers
	// again is told once more (LostCause), as it may not have heard it.
	lost map[string][]events.Change
	// rounds counts the ping rounds, judged or not.
	rounds int
}

// withDefaults is cfg with its logger set.
func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// Validate reports what is missing or wrong in cfg.
func (cfg Config) Validate() error {
	if cfg.Identity.ID == "" {
		return fmt.Errorf("registry: no identity given")
	}
	if err := cfg.Settings.Validate(); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}

// Start loads the catalogue an earlier registry left on the bus, applies the
// settings to it and starts answering requests. Stop it with Stop. On
// failure, what it started is stopped, in one place.
func Start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cfg Config) (_ *Service, err error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	st, err := openStore(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	tools, state, err := st.load(ctx, log)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	s := &Service{reg: New(cfg.Settings, log), nc: nc, js: js, store: st, id: cfg.Identity, log: log,
		stop: make(chan struct{}), watched: make(chan struct{}), misses: map[string]int{}, lost: map[string][]events.Change{}}
	if s.rec, err = bus.NewRecorder(nc, log); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	defer func() {
		switch {
		case err == nil:
		case s.svc != nil:
			s.Stop()
		default:
			s.closeRecorder()
		}
	}()
	changes := s.reg.Restore(tools, state)
	if err := s.reg.flush(ctx, st); err != nil {
		return nil, fmt.Errorf("registry: save restored catalogue: %w", err)
	}
	s.publishChanges("restore", changes)
	log.Info("registry loaded catalogue", "tools", len(tools), "changed_by_settings", len(changes))
	for _, w := range cfg.Settings.Ignored {
		log.Warn("settings: " + w)
	}
	if err := s.serve(); err != nil {
		return nil, err
	}
	return s, nil
}

// serve registers the registry service and its endpoints, and starts
// watching the executors.
func (s *Service) serve() (err error) {
	if s.svc, err = micro.AddService(s.nc, micro.Config{
		Name:        events.RegistryService,
		Version:     ServiceVersion,
		Description: "toolbus tool registry",
	}); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	go s.watchExecutors()
	endpoints := []struct {
		name, subject string
		handle        micro.HandlerFunc
	}{
		{"register", events.Request(events.SubjectRegister), s.handleRegister},
		{"remove", events.Request(events.SubjectRegistryRemove), s.handleRemove},
		{"toggle", events.Request(events.SubjectRegistryToggle), s.handleToggle},
	}
	for _, e := range endpoints {
		if err := s.svc.AddEndpoint(e.name, e.handle, micro.WithEndpointSubject(e.subject)); err != nil {
			return fmt.Errorf("registry: endpoint %s: %w", e.subject, err)
		}
	}
	return nil
}

// Registry is the service's registry, for in-process readers.
func (s *Service) Registry() *Registry { return s.reg }

// Stop stops answering requests, letting requests being handled finish,
// and stops watching the executors.
func (s *Service) Stop() error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.watched
	err := s.svc.Stop()
	s.closeRecorder()
	return err
}

// closeRecorder gives what was recorded a few seconds to be stored.
func (s *Service) closeRecorder() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.rec.Close(ctx); err != nil {
		s.log.Error("stopping with records the audit stream did not acknowledge", "err", err)
	}
}

// record records a request the registry took, on the subject of the
// audit stream it was sent for (events.Request).
func (s *Service) record(req micro.Request) {
	subject, _ := events.Recorded(req.Subject())
	if err := s.rec.Record(subject, req.Data()); err != nil {
		s.log.Error("request not recorded", "subject", subject, "err", err)
	}
}

// Executors are pinged every PingEvery; one that answered before and
// misses LostAfter pings in a row is taken off its tools' hosts.
const (
	PingEvery = 2 * time.Second
	LostAfter = 3
)

// watchExecutors takes an executor that stops answering off the hosts of
// its tools: a tool only it hosted leaves the catalogue, and calls are
// no longer sent to it. An executor that comes back registers its tools
// again (at its start, or when it hears LostCause about itself, which it
// is told again each time it answers until it has). Only providers seen
// answering as executors are judged: other registrants' tools are never
// touched.
//
// A round during which the registry's own connection was away judges no
// one: its pings went nowhere (nats.go keeps a publish for after the
// reconnection, and no answer comes), and a bus that restarts would
// otherwise take every executor for lost, and, its save failing, tell
// none of them.
func (s *Service) watchExecutors() {
	defer close(s.watched)
	tick := time.NewTicker(PingEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		reconnects := s.nc.Stats().Reconnects
		alive, err := s.pingExecutors()
		away := !s.nc.IsConnected() || s.nc.Stats().Reconnects != reconnects
		s.watchMu.Lock()
		s.rounds++
		s.watchMu.Unlock()
		if err != nil || away {
			continue // the bus is away: nobody is judged by it
		}
		var lost []string
		tell := map[string][]events.Change{}
		s.watchMu.Lock()
		for id := range alive {
			if _, seen := s.misses[id]; !seen {
				s.log.Info("an executor answers; it is taken off its tools' hosts if it stops", "executor", id)
			}
			s.misses[id] = 0
			if changes, ok := s.lost[id]; ok {
				tell[id] = changes
			}
		}
		for id := range s.misses {
			if alive[id] {
				continue
			}
			if s.misses[id]++; s.misses[id] >= LostAfter {
				delete(s.misses, id)
				lost = append(lost, id)
			}
		}
		s.watchMu.Unlock()
		for id, changes := range tell {
			s.log.Warn("an executor taken for lost answers again and has not registered since; telling it again", "executor", id)
			s.publishChanges(events.LostCause(id), changes)
		}
		for _, id := range lost {
			changes, _ := s.reg.Remove(&events.RemoveRequest{Provider: id})
			if len(changes) == 0 {
				continue
			}
			s.watchMu.Lock()
			s.lost[id] = changes
			s.watchMu.Unlock()
			s.log.Warn("an executor stopped answering; taken off its tools' hosts", "executor", id, "changes", len(changes))
			if err := s.save(); err == nil {
				s.publishChanges(events.LostCause(id), changes)
			}
		}
	}
}

// watchRegistrant watches an executor from its registration on, as
// well as from its first answer: one whose answers come late while it
// starts (a loaded machine), or that was taken for lost, registered again
// and died before it answered, would otherwise keep its tools hosted for
// good. The role is the sender's claim: one that is no executor, or does
// not answer as one, loses only its own tools.
func (s *Service) watchRegistrant(in *events.RegisterRequest) {
	if in.Sender.Role != "executor" || in.Provider != in.Sender.ID {
		return
	}
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	s.misses[in.Provider] = 0
	delete(s.lost, in.Provider)
}

// Watching says whether the registry has seen executor id answer, and
// would take it off its tools' hosts were it to stop.
func (s *Service) Watching(id string) bool {
	s.watchMu.Lock()
	defer s.watchMu.Unlock()
	_, ok := s.misses[id]
	return ok
}

// pingWait is how long a ping round gathers answers: long enough for an
// executor on a loaded machine, short of PingEvery.
const pingWait = time.Second

// pingExecutors asks every executor's service for its id, and gathers
// the answers that come within pingWait.
func (s *Service) pingExecutors() (map[string]bool, error) {
	subject, err := micro.ControlSubject(micro.PingVerb, events.ExecutorService, "")
	if err != nil {
		return nil, err
	}
	inbox := s.nc.NewInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := s.nc.PublishRequest(subject, inbox, nil); err != nil {
		return nil, err
	}
	alive := map[string]bool{}
	deadline := time.Now().Add(pingWait)
	for {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			return alive, nil
		}
		var ping micro.Ping
		if json.Unmarshal(m.Data, &ping) == nil && ping.Metadata["id"] != "" {
			alive[ping.Metadata["id"]] = true
		}
	}
}

func (s *Service) handleRegister(req micro.Request) {
	s.record(req)
	in, err := events.Decode[events.RegisterRequest](req.Data())
	if err != nil {
		s.refuse(req, err)
		return
	}
	s.watchRegistrant(in)
	res := s.reg.Register(in)
	reply := &events.RegisterReply{Header: events.Header{Sender: s.id}, RequestID: in.ID,
		Tools: res.Outcomes, Removed: res.Removed}
	// A set sent in chunks is saved once, with its last chunk: saved after
	// each, every chunk would rewrite the shards the whole set spans.
	if res.Err != nil {
		reply.Error = res.Err.Error()
	} else if in.Batch == nil || in.Batch.Last {
		if err := s.save(); err != nil {
			reply.Error = err.Error()
		}
	}
	s.publishChanges(in.ID, res.Changes)
	s.respond(req, reply)
}

func (s *Service) handleRemove(req micro.Request) {
	s.record(req)
	in, err := events.Decode[events.RemoveRequest](req.Data())
	if err != nil {
		s.refuse(req, err)
		return
	}
	changes, unknown := s.reg.Remove(in)
	s.finishChange(req, in.ID, changes, unknown)
}

func (s *Service) handleToggle(req micro.Request) {
	s.record(req)
	in, err := events.Decode[events.ToggleRequest](req.Data())
	if err != nil {
		s.refuse(req, err)
		return
	}
	changes, unknown := s.reg.Toggle(in)
	s.finishChange(req, in.ID, changes, unknown)
}

func (s *Service) finishChange(req micro.Request, requestID string, changes []events.Change, unknown []string) {
	reply := &events.ChangeReply{Header: events.Header{Sender: s.id}, RequestID: requestID, Changes: changes, Unknown: unknown}
	if err := s.save(); err != nil {
		reply.Error = err.Error()
	}
	s.publishChanges(requestID, changes)
	s.respond(req, reply)
}

// save writes the changes to the bucket. On failure the catalogue in memory
// stays ahead of the bucket and the next request tries again; the reply
// says so.
func (s *Service) save() error {
	ctx, cancel := context.WithTimeout(context.Background(), saveTimeout)
	defer cancel()
	if err := s.reg.flush(ctx, s.store); err != nil {
		s.log.Error("catalogue not saved to the bus; will retry with the next request", "err", err)
		return fmt.Errorf("accepted, but not yet saved to the catalogue bucket: %v", err)
	}
	return nil
}

func (s *Service) publishChanges(cause string, changes []events.Change) {
	if len(changes) == 0 {
		return
	}
	data, err := events.Encode(&events.CatalogChanged{Header: events.Header{Sender: s.id}, Cause: cause, Changes: changes})
	if err == nil {
		err = s.rec.Record(events.SubjectCatalogChanged, data)
	}
	if err != nil {
		s.log.Error("catalogue change event not published", "cause", cause, "err", err)
	}
}

func (s *Service) respond(req micro.Request, reply events.Envelope) {
	data, err := events.Encode(reply)
	if err != nil {
		s.log.Error("reply does not encode", "err", err)
		_ = req.Error("500", "registry could not encode its reply: "+err.Error(), nil)
		return
	}
	if err := req.Respond(data); err != nil {
		s.log.Warn("reply not sent", "err", err)
	}
}

// refuse answers a request that does not decode with a service error, which
// the client sees as an error naming what was wrong.
func (s *Service) refuse(req micro.Request, err error) {
	s.log.Warn("refused a malformed request", "subject", req.Subject(), "err", err)
	_ = req.Error("400", err.Error(), nil)
}
