// Package registry is the ToolRegistry of the seeds: it turns providers'
// declarations into catalogue entries (naming rules, conflicts, schema
// sanitising, aliases, kinds and categories, active and excluded tools) and
// keeps the catalogue in a KV bucket on the bus, publishing every change.
//
// Registry holds the rules and the state in memory; Service puts it on the
// bus; Client is what providers and the CLI use to talk to the Service.
package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
)

// emptyParameters is the schema of a tool that declares none.
var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// State is what the registry persists besides the entries: the sequence
// counter and the run-time enable/disable toggles.
type State struct {
	Seq        uint64               `json:"seq"`
	Tools      map[string]bool      `json:"tools,omitempty"`
	Kinds      map[events.Kind]bool `json:"kinds,omitempty"`
	Categories map[string]bool      `json:"categories,omitempty"`
}

// Registry applies the catalogue rules. Its methods are safe for concurrent
// use; Catalog snapshots are cheap to take and never change.
type Registry struct {
	settings Settings
	exclude  map[string]bool
	core     map[string]bool
	log      *slog.Logger
	now      func() time.Time

	mu         sync.Mutex
	tools      map[string]*catalog.Entry // by catalogue name
	byIdentity map[string]string         // identity key -> catalogue name
	byExport   map[string]string         // export name -> catalogue name
	state      State
	batches    map[string]*batch
	dirty      map[string]bool   // names whose shard in the bucket is stale
	lines      map[string][]byte // encoded entries, by name, as the bucket holds them
	shardOf    map[string]string // name -> the key of the shard the tool belongs in now
	savedIn    map[string]string // name -> the key of the shard the bucket holds it in
	stateDirty bool

	snaps catalog.Snapshots
}

// batch remembers the tools named so far by a chunked Replace request.
type batch struct {
	next    int
	seen    map[string]bool
	started time.Time
}

// New returns an empty registry applying settings.
func New(settings Settings, log *slog.Logger) *Registry {
	if log == nil {
		log = slog.Default()
	}
	r := &Registry{
		settings:   settings,
		exclude:    make(map[string]bool),
		core:       make(map[string]bool),
		log:        log,
		now:        func() time.Time { return time.Now().UTC() },
		tools:      make(map[string]*catalog.Entry),
		byIdentity: make(map[string]string),
		byExport:   make(map[string]string),
		batches:    make(map[string]*batch),
		dirty:      make(map[string]bool),
		lines:      make(map[string][]byte),
		shardOf:    make(map[string]string),
		savedIn:    make(map[string]string),
	}
	for _, e := range settings.Exclude {
		r.exclude[strings.TrimSpace(e)] = true
	}
	for _, c := range settings.Core {
		r.core[toolNameOf(c)] = true
	}
	return r
}

// Catalog is a snapshot of the catalogue as it is now.
func (r *Registry) Catalog() *catalog.Catalog { return r.snaps.Get(&r.mu, r.tools) }

// Restore loads a persisted catalogue and state, then applies the current
// settings to it, which may activate or deactivate tools.
func (r *Registry) Restore(tools []*events.Tool, st State) []events.Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = st
	for _, t := range tools {
		r.put(t)
		if t.Seq > r.state.Seq {
			r.state.Seq = t.Seq
		}
	}
	// What was loaded is saved where it was read.
	clear(r.dirty)
	maps.Copy(r.savedIn, r.shardOf)
	return r.reactivate()
}

// RegisterResult is what Register did.
type RegisterResult struct {
	Outcomes []events.ToolOutcome
	Removed  []string
	Changes  []events.Change
	// Err refuses the whole request (a chunk out of order).
	Err error
}

// Register applies a RegisterRequest: each ToolSpec is added, updated,
// renamed or overwrites an older tool as seed 000 registerTool does, or is
// rejected with a reason; the rest of the request still goes through.
func (r *Registry) Register(req *events.RegisterRequest) RegisterResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	var res RegisterResult
	seen, last, err := r.batchFor(req)
	if err != nil {
		res.Err = err
		return res
	}
	for i := range req.Tools {
		out, id := r.registerOne(req, &req.Tools[i], &res.Changes)
		res.Outcomes = append(res.Outcomes, out)
		if seen != nil && id != "" {
			seen[id] = true
		}
	}
	if req.Replace && last {
		res.Removed = r.dropUnseen(req, seen, &res.Changes)
	}
	r.logRenames(req, res.Changes)
	return res
}

// logRenames says in one line which tools of a request were registered
// with a warning: under another name than they asked for, because another
// source had theirs, or trimmed; the provider's reply lists each.
func (r *Registry) logRenames(req *events.RegisterRequest, changes []events.Change) {
	var renamed []string
	for _, c := range changes {
		if c.Warning != "" && c.Op != events.OpDeactivated {
			renamed = append(renamed, c.Warning)
		}
	}
	if len(renamed) == 0 {
		return
	}
	examples := renamed
	more := ""
	if len(examples) > 3 {
		examples, more = examples[:3], fmt.Sprintf(" | and %d more", len(renamed)-3)
	}
	r.log.Warn("tools registered with warnings", "provider", req.Provider, "server", req.Server, "count", len(renamed),
		"examples", strings.Join(examples, " | ")+more)
}

// batchFor returns the set of identities a Replace request has named so
// far, and whether this request completes it.
func (r *Registry) batchFor(req *events.RegisterRequest) (seen map[string]bool, last bool, err error) {
	for id, b := range r.batches {
		if time.Since(b.started) > 10*time.Minute {
			delete(r.batches, id)
		}
	}
	if req.Batch == nil {
		if req.Replace {
			return make(map[string]bool), true, nil
		}
		return nil, true, nil
	}
	b := r.batches[req.Batch.ID]
	switch {
	case req.Batch.Seq == 0:
		b = &batch{seen: make(map[string]bool), started: time.Now()}
		r.batches[req.Batch.ID] = b
	case b == nil || b.next != req.Batch.Seq:
		delete(r.batches, req.Batch.ID)
		return nil, false, fmt.Errorf("batch %s: chunk %d arrived out of order (the registry restarted or a chunk was lost); send the whole batch again", req.Batch.ID, req.Batch.Seq)
	}
	b.next++
	if req.Batch.Last {
		delete(r.batches, req.Batch.ID)
	}
	if !req.Replace {
		return nil, req.Batch.Last, nil
	}
	return b.seen, req.Batch.Last, nil
}

func identityKey(source events.Source, server, ownName string) string {
	return string(source) + "\x00" + server + "\x00" + ownName
}

func identityOf(t *events.Tool) string {
	if t.Source == events.SourceMCP {
		return identityKey(t.Source, t.Server, t.ServerToolName)
	}
	return identityKey(t.Source, "", t.Name)
}

func describe(t *events.Tool) string {
	if t.Source == events.SourceMCP {
		return fmt.Sprintf("an MCP tool of server %q", t.Server)
	}
	return "a " + string(t.Source) + " tool"
}

// registration is one tool of a register request on its way into the
// catalogue: the declaration as checked, the name it goes under, and the
// entry it updates or overwrites there.
type registration struct {
	req    *events.RegisterRequest
	spec   *events.ToolSpec
	kind   events.Kind     // spec.Kind, KindOther when it names none
	params json.RawMessage // spec.Parameters, compacted
	name   string          // the catalogue name
	prev   *events.Tool    // the entry updated or overwritten; nil for a new one
	op     events.ChangeOp // OpAdded, OpUpdated or OpOverwritten
	// decl is spec.MCPDeclaration, compacted, within its bound; left says
	// what of it was left out, and why.
	decl events.MCPDeclaration
	left []string
}

// registerOne registers one tool of req, in steps: check the declaration,
// place it under a name, refuse to change what other providers host, and
// write the entry unless it is the same as before. It returns the outcome
// and the tool's identity ("" when it is rejected), and appends to changes
// what changed. The caller holds mu.
func (r *Registry) registerOne(req *events.RegisterRequest, spec *events.ToolSpec, changes *[]events.Change) (events.ToolOutcome, string) {
	out := events.ToolOutcome{Requested: spec.Name}
	reg, err := checkDeclaration(req, spec)
	if err != nil {
		return r.rejected(out, req, err)
	}
	id := identityKey(req.Source, req.Server, spec.Name)
	out.Warning = r.place(reg, id)
	if err := reg.changesOthers(); err != nil {
		out.Warning = ""
		return r.rejected(out, req, err)
	}
	if len(reg.left) > 0 {
		r.log.Warn("tool declaration trimmed", "tool", spec.Name, "provider", req.Provider, "left out", reg.left)
		out.Warning = strings.Join(append(nonEmpty(out.Warning), reg.left...), "; ")
	}
	if r.unchanged(reg) {
		out.Name = reg.name
		return out, id
	}
	t, err := r.entryOf(reg)
	if err != nil {
		return r.rejected(out, req, err)
	}
	r.store(t, reg)
	out.Name = reg.name
	*changes = append(*changes, events.Change{Op: reg.op, Name: reg.name, Warning: out.Warning})
	return out, id
}

// rejected is out for a tool the registry refuses, and why.
func (r *Registry) rejected(out events.ToolOutcome, req *events.RegisterRequest, why error) (events.ToolOutcome, string) {
	out.Error = why.Error()
	r.log.Warn("tool rejected", "tool", out.Requested, "provider", req.Provider, "reason", out.Error)
	return out, ""
}

// checkDeclaration checks what spec declares: a name, a known kind (none
// is KindOther) and a schema that is a JSON object.
func checkDeclaration(req *events.RegisterRequest, spec *events.ToolSpec) (*registration, error) {
	if strings.TrimSpace(spec.Name) == "" {
		return nil, errors.New("tool has no name")
	}
	kind := spec.Kind
	if kind == "" {
		kind = events.KindOther
	}
	if !kind.Valid() {
		return nil, fmt.Errorf("unknown kind %q", spec.Kind)
	}
	params, err := compactSchema(spec.Parameters)
	if err != nil {
		return nil, err
	}
	decl, left := checkMCPDeclaration(spec.MCPDeclaration)
	return &registration{req: req, spec: spec, kind: kind, params: params, decl: decl, left: left}, nil
}

// checkMCPDeclaration is d compacted, without the values that are not
// JSON of the kind MCP has them (an object, icons an array) or that take
// it past its bound (events.MaxMCPDeclaration), and what it left out.
// The tool is registered all the same: these describe it, they do not
// decide how it is called.
func checkMCPDeclaration(d events.MCPDeclaration) (events.MCPDeclaration, []string) {
	var left []string
	for _, f := range []struct {
		name  string
		raw   *json.RawMessage
		array bool
	}{{"outputSchema", &d.OutputSchema, false}, {"icons", &d.Icons, true}, {"_meta", &d.Meta, false}} {
		raw := bytes.TrimSpace(*f.raw)
		if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
			*f.raw = nil
			continue
		}
		want, open := "object", byte('{')
		if f.array {
			want, open = "array", '['
		}
		compact, err := compactJSON(raw)
		if err != nil || raw[0] != open {
			left = append(left, fmt.Sprintf("its %s is left out: it is not a JSON %s", f.name, want))
			*f.raw = nil
			continue
		}
		*f.raw = compact
	}
	return d, append(left, d.TrimMCPDeclaration()...)
}

// nonEmpty is s as a list of one, or none when it is empty.
func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// place chooses the name reg goes under and the entry it updates or
// overwrites: the same tool (identity id) keeps the name it has; an MCP
// tool whose name is taken goes under its qualified name; any other tool
// overwrites the one of its name. It returns the warning a rename or an
// overwrite gives.
func (r *Registry) place(reg *registration, id string) (warning string) {
	req, spec := reg.req, reg.spec
	reg.name, reg.op = spec.Name, events.OpAdded
	if req.Source == events.SourceMCP {
		reg.name = GenerateValidName(spec.Name)
	}
	if n, ok := r.byIdentity[id]; ok {
		// The same tool again, from the same or another host: update it
		// under the name it already has.
		reg.name, reg.prev, reg.op = n, r.tools[n].Tool(), events.OpUpdated
		return ""
	}
	taken, ok := r.tools[reg.name]
	if !ok {
		return ""
	}
	if req.Source != events.SourceMCP {
		reg.prev, reg.op = taken.Tool(), events.OpOverwritten
		return fmt.Sprintf("tool %q already registered as %s; overwriting", reg.name, describe(taken.Tool()))
	}
	q := QualifiedName(req.Server, spec.Name)
	warning = fmt.Sprintf("name %q is taken by %s; registered as %q", reg.name, describe(taken.Tool()), q)
	reg.name = q
	if taken, ok := r.tools[reg.name]; ok {
		warning += fmt.Sprintf(", overwriting %s of that name", describe(taken.Tool()))
		reg.prev, reg.op = taken.Tool(), events.OpOverwritten
	}
	return warning
}

// changesOthers refuses reg when it would change or replace a tool other
// providers host. A provider may change or replace only what it alone
// hosts: a tool that another provider hosts keeps that provider's
// declaration, so that no client can relabel run_shell_command as a read,
// or take a built-in's name, for everyone (the seeds' overwrite rule holds
// within one provider, as it did within one agent).
func (reg *registration) changesOthers() error {
	prev := reg.prev
	if prev == nil {
		return nil
	}
	others := otherHosts(prev, reg.req.Provider)
	if len(others) == 0 || reg.op != events.OpOverwritten && sameDeclaration(prev, reg) {
		return nil
	}
	what := "with another declaration"
	if reg.op == events.OpOverwritten {
		what = "as " + describe(prev)
	}
	return fmt.Errorf("tool %q is hosted by %s %s; a provider cannot change or replace a tool that others host (register it under another name)",
		prev.Name, strings.Join(others, ", "), what)
}

// unchanged reports whether reg is the same declaration again from a host
// of it (a provider hosting its set again, a re-discovery), which changes
// nothing: no write, no event.
func (r *Registry) unchanged(reg *registration) bool {
	prev, req := reg.prev, reg.req
	return reg.op == events.OpUpdated && slices.Contains(prev.Hosts, req.Provider) && sameDeclaration(prev, reg) &&
		slices.Equal(prev.Aliases, r.aliasesFor(reg.name, reg.spec)) && prev.Workspaces[req.Provider] == req.Workspace
}

// entryOf is the catalogue entry reg declares, with the hosts and
// workspaces it has after this registration; its position, export name and
// activity are store's to set.
func (r *Registry) entryOf(reg *registration) (*events.Tool, error) {
	req, spec, name := reg.req, reg.spec, reg.name
	gemini, changed, err := SanitizeForGemini(reg.params)
	if err != nil {
		return nil, err
	}
	if !changed {
		gemini = nil
	}
	t := &events.Tool{
		V:                events.Version,
		Name:             name,
		DisplayName:      spec.DisplayName,
		Description:      spec.Description,
		Kind:             reg.kind,
		Category:         spec.Category,
		Source:           req.Source,
		Server:           req.Server,
		Trust:            req.Trust,
		ReadOnly:         spec.ReadOnly || readOnlyHint(spec.Annotations),
		OutputMarkdown:   spec.OutputMarkdown,
		CanUpdateOutput:  spec.CanUpdateOutput,
		Parameters:       reg.params,
		GeminiParameters: gemini,
		Annotations:      spec.Annotations,
		MCPDeclaration:   reg.decl,
		MCPFeature:       spec.MCPFeature,
		UpdatedAt:        r.now(),
	}
	t.ConcurrencySafe = spec.ConcurrencySafe || t.ReadOnly
	if req.Source == events.SourceMCP {
		t.ServerToolName = spec.Name
		if t.DisplayName == "" {
			t.DisplayName = fmt.Sprintf("%s (%s MCP Server)", spec.Name, req.Server)
		}
	}
	if t.DisplayName == "" {
		t.DisplayName = name
	}
	if t.Category == "" {
		t.Category = string(req.Source)
	}
	t.Aliases = r.aliasesFor(name, spec)
	if reg.op == events.OpUpdated {
		t.Hosts = addHost(reg.prev.Hosts, req.Provider)
		t.Workspaces = withWorkspace(reg.prev.Workspaces, req.Provider, req.Workspace)
	} else {
		t.Hosts = []string{req.Provider}
		t.Workspaces = withWorkspace(nil, req.Provider, req.Workspace)
	}
	return t, nil
}

// store puts t in the catalogue in place of reg.prev, which it keeps the
// position of, or last when it is new.
func (r *Registry) store(t *events.Tool, reg *registration) {
	if prev := reg.prev; prev != nil {
		t.Seq = prev.Seq // an overwrite keeps the position, as Map.set does
		r.drop(prev)
	} else {
		r.state.Seq++
		r.stateDirty = true
		t.Seq = r.state.Seq
	}
	t.ExportName = r.exportNameFor(t.Name)
	t.Active, t.InactiveReason = r.activity(t)
	r.put(t)
}

// withWorkspace is a copy of m with host's workspace set to ws (removed
// when ws is empty); nil when nothing is left.
func withWorkspace(m map[string]string, host, ws string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for h, w := range m {
		out[h] = w
	}
	if ws == "" {
		delete(out, host)
	} else {
		out[host] = ws
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// otherHosts are t's hosts other than provider.
func otherHosts(t *events.Tool, provider string) []string {
	var out []string
	for _, h := range t.Hosts {
		if h != provider {
			out = append(out, h)
		}
	}
	return out
}

// sameDeclaration reports whether reg declares t as it is: another host
// of the same tool must declare it identically.
func sameDeclaration(t *events.Tool, reg *registration) bool {
	spec, kind, params, req := reg.spec, reg.kind, reg.params, reg.req
	displayName := spec.DisplayName
	if displayName == "" {
		displayName = t.DisplayName
	}
	category := spec.Category
	if category == "" {
		category = string(req.Source)
	}
	readOnly := spec.ReadOnly || readOnlyHint(spec.Annotations)
	return t.Kind == kind && t.Description == spec.Description && t.DisplayName == displayName && t.Category == category &&
		t.ReadOnly == readOnly && t.ConcurrencySafe == (spec.ConcurrencySafe || readOnly) && t.Trust == req.Trust &&
		t.OutputMarkdown == spec.OutputMarkdown && t.CanUpdateOutput == spec.CanUpdateOutput &&
		bytes.Equal(t.Parameters, params) && bytes.Equal(t.Annotations, spec.Annotations) &&
		t.Title == reg.decl.Title && bytes.Equal(t.OutputSchema, reg.decl.OutputSchema) &&
		bytes.Equal(t.Icons, reg.decl.Icons) && bytes.Equal(t.Meta, reg.decl.Meta) &&
		bytes.Equal(t.MCPFeature, spec.MCPFeature)
}

// compactSchema checks that raw is a JSON object and removes insignificant
// whitespace, so declarations copy the fewest bytes. No schema means none.
func compactSchema(raw json.RawMessage) (json.RawMessage, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return emptyParameters, nil
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("parameters must be a JSON Schema object, got %.20s", trimmed)
	}
	compact, err := compactJSON(trimmed)
	if err != nil {
		return nil, fmt.Errorf("parameters: %v", err)
	}
	return compact, nil
}

// compactJSON is raw without insignificant whitespace, or an error when
// it is not JSON.
func compactJSON(raw json.RawMessage) (json.RawMessage, error) {
	// Without a byte of whitespace it is compact already: kept as it is
	// when it is valid JSON (the request's decoder checked that of every
	// schema it decoded; Valid checks the rest).
	if !bytes.ContainsAny(raw, " \t\r\n") && json.Valid(raw) {
		return raw, nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// readOnlyHint reads the MCP annotation readOnlyHint.
func readOnlyHint(annotations json.RawMessage) bool {
	if len(annotations) == 0 {
		return false
	}
	var a struct {
		ReadOnlyHint bool `json:"readOnlyHint"`
	}
	return json.Unmarshal(annotations, &a) == nil && a.ReadOnlyHint
}

func (r *Registry) aliasesFor(name string, spec *events.ToolSpec) []string {
	set := make(map[string]bool)
	for _, a := range spec.Aliases {
		if a != "" && a != name {
			set[a] = true
		}
	}
	for a, target := range r.settings.Aliases {
		if (target == name || target == spec.Name) && a != name {
			set[a] = true
		}
	}
	if len(set) == 0 {
		return nil
	}
	out := make([]string, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

func addHost(hosts []string, host string) []string {
	if slices.Contains(hosts, host) {
		return slices.Clone(hosts)
	}
	out := append(slices.Clone(hosts), host)
	sort.Strings(out)
	return out
}

// exportNameFor finds name's OpenAI/Anthropic name, unique in the catalogue.
func (r *Registry) exportNameFor(name string) string {
	for salt := 0; ; salt++ {
		e := ExportName(name, salt)
		if owner, taken := r.byExport[e]; !taken || owner == name {
			return e
		}
	}
}

// put stores t and indexes it. The caller holds mu.
func (r *Registry) put(t *events.Tool) {
	r.tools[t.Name] = catalog.NewEntry(t)
	r.byIdentity[identityOf(t)] = t.Name
	r.byExport[t.ExportName] = t.Name
	r.dirty[t.Name] = true
	delete(r.lines, t.Name)
	r.shardOf[t.Name] = catalog.ShardOf(t)
	r.snaps.Invalidate()
}

// drop removes t and its indexes. The caller holds mu.
func (r *Registry) drop(t *events.Tool) {
	delete(r.tools, t.Name)
	if r.byIdentity[identityOf(t)] == t.Name {
		delete(r.byIdentity, identityOf(t))
	}
	if r.byExport[t.ExportName] == t.Name {
		delete(r.byExport, t.ExportName)
	}
	r.dirty[t.Name] = true
	delete(r.lines, t.Name)
	delete(r.shardOf, t.Name)
	r.snaps.Invalidate()
}

// dropUnseen ends a Replace request: the provider stops hosting the tools of
// the request's scope it did not name; a tool no one hosts is removed.
func (r *Registry) dropUnseen(req *events.RegisterRequest, seen map[string]bool, changes *[]events.Change) []string {
	var unseen []*events.Tool
	for _, e := range r.tools {
		t := e.Tool()
		if t.Source == req.Source && t.Server == req.Server && slices.Contains(t.Hosts, req.Provider) && !seen[identityOf(t)] {
			unseen = append(unseen, t)
		}
	}
	slices.SortFunc(unseen, func(a, b *events.Tool) int { return strings.Compare(a.Name, b.Name) })
	var removed []string
	for _, t := range unseen {
		if r.unhost(t, req.Provider, changes) {
			removed = append(removed, t.Name)
		}
	}
	return removed
}

// unhost takes host off t, removing t when no host is left; it reports
// whether t was removed.
func (r *Registry) unhost(t *events.Tool, host string, changes *[]events.Change) bool {
	hosts := slices.DeleteFunc(slices.Clone(t.Hosts), func(h string) bool { return h == host })
	if len(hosts) == 0 {
		r.drop(t)
		*changes = append(*changes, events.Change{Op: events.OpRemoved, Name: t.Name})
		return true
	}
	c := *t
	c.Hosts = hosts
	c.Workspaces = withWorkspace(t.Workspaces, host, "")
	c.UpdatedAt = r.now()
	r.put(&c)
	*changes = append(*changes, events.Change{Op: events.OpUpdated, Name: t.Name, Warning: "no longer hosted by " + host})
	return false
}

func (r *Registry) sortedNames() []string {
	names := make([]string, 0, len(r.tools))
	for n := range r.tools {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// resolve maps a name or alias to a catalogue name. The caller holds mu.
func (r *Registry) resolve(name string) (string, bool) {
	if _, ok := r.tools[name]; ok {
		return name, true
	}
	for _, n := range r.sortedNames() {
		if slices.Contains(r.tools[n].Tool().Aliases, name) {
			return n, true
		}
	}
	if target, ok := r.settings.Aliases[name]; ok {
		if _, ok := r.tools[target]; ok {
			return target, true
		}
	}
	return "", false
}

// Remove applies a RemoveRequest: every selector given narrows the set.
// With a provider, that provider stops hosting the tools, and only tools
// left with no host go; without one, the tools go.
func (r *Registry) Remove(req *events.RemoveRequest) (changes []events.Change, unknown []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names map[string]bool
	if len(req.Names) > 0 {
		names = make(map[string]bool)
		for _, n := range req.Names {
			if resolved, ok := r.resolve(n); ok {
				names[resolved] = true
			} else {
				unknown = append(unknown, n)
			}
		}
	}
	for _, name := range r.sortedNames() {
		t := r.tools[name].Tool()
		switch {
		case names != nil && !names[name]:
		case len(req.Sources) > 0 && !slices.Contains(req.Sources, t.Source):
		case req.Server != "" && (t.Source != events.SourceMCP || t.Server != req.Server):
		case req.Provider != "" && !slices.Contains(t.Hosts, req.Provider):
		case req.Provider != "":
			r.unhost(t, req.Provider, &changes)
		default:
			r.drop(t)
			changes = append(changes, events.Change{Op: events.OpRemoved, Name: name})
		}
	}
	return changes, unknown
}

// Toggle applies a ToggleRequest and returns the tools whose activity
// changed.
func (r *Registry) Toggle(req *events.ToggleRequest) (changes []events.Change, unknown []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.state
	if req.Reset {
		st.Tools, st.Kinds, st.Categories = nil, nil, nil
	}
	if st.Tools == nil {
		st.Tools = make(map[string]bool)
	}
	if st.Kinds == nil {
		st.Kinds = make(map[events.Kind]bool)
	}
	if st.Categories == nil {
		st.Categories = make(map[string]bool)
	}
	for _, k := range req.Kinds {
		st.Kinds[k] = req.Enable
	}
	for _, c := range req.Categories {
		st.Categories[c] = req.Enable
	}
	if len(req.Kinds) > 0 || len(req.Categories) > 0 {
		// A group toggle acts on the whole group.
		for name, e := range r.tools {
			t := e.Tool()
			if slices.Contains(req.Kinds, t.Kind) || slices.Contains(req.Categories, t.Category) {
				delete(st.Tools, name)
			}
		}
	}
	for _, n := range req.Names {
		resolved, ok := r.resolve(n)
		if !ok {
			unknown = append(unknown, n)
			continue
		}
		st.Tools[resolved] = req.Enable
	}
	r.stateDirty = true
	return r.reactivate(), unknown
}

// reactivate recomputes every tool's activity. The caller holds mu.
func (r *Registry) reactivate() []events.Change {
	var changes []events.Change
	for _, name := range r.sortedNames() {
		t := r.tools[name].Tool()
		active, reason := r.activity(t)
		if active == t.Active && reason == t.InactiveReason {
			continue
		}
		c := *t
		c.Active, c.InactiveReason, c.UpdatedAt = active, reason, r.now()
		r.put(&c)
		if active != t.Active {
			op := events.OpDeactivated
			if active {
				op = events.OpActivated
			}
			changes = append(changes, events.Change{Op: op, Name: name, Warning: reason})
		}
	}
	return changes
}

// activity decides whether t is active, and why not. Run-time toggles of
// the tool come first, then of its kind or category, then the settings.
func (r *Registry) activity(t *events.Tool) (bool, string) {
	st := &r.state
	if on, ok := st.Tools[t.Name]; ok {
		if on {
			return true, ""
		}
		return false, "disabled at run time (toolbus tools enable " + t.Name + ")"
	}
	kindOn, kindSet := st.Kinds[t.Kind]
	catOn, catSet := st.Categories[t.Category]
	switch {
	case kindSet && !kindOn:
		return false, fmt.Sprintf("kind %q disabled at run time (toolbus tools enable --kind %s)", t.Kind, t.Kind)
	case catSet && !catOn:
		return false, fmt.Sprintf("category %q disabled at run time (toolbus tools enable --category %s)", t.Category, t.Category)
	case kindSet || catSet:
		return true, ""
	case r.exclude[t.Name]:
		return false, "excluded by tools.exclude in settings.json (take it out, or toolbus tools enable " + t.Name + ")"
	case len(r.core) > 0 && t.Source == events.SourceBuiltin && !r.core[t.Name]:
		return false, "not listed in tools.core in settings.json (add it, or toolbus tools enable " + t.Name + ")"
	}
	return true, ""
}
