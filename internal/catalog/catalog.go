// Package catalog answers questions about the tool catalogue: look a tool up
// by name or alias, list tools in the orders Gemini CLI uses, and produce
// declarations for model APIs. A Catalog is an immutable snapshot; the
// registry builds one from its own state, and any other process builds one
// from the catalogue bucket on the bus (see Load and Follow).
package catalog

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/toolbus/toolbus/internal/events"
)

// Entry is one catalogue tool together with its declarations, each built
// the first time it is asked for. An Entry never changes after NewEntry, so
// snapshots share entries and a declaration is built once per tool version.
type Entry struct {
	tool *events.Tool
	decl [numFormats]atomic.Pointer[[]byte]
	// The sortTools key, computed once: source priority, then the MCP
	// server name folded to lower case, then the registration order.
	prio      int
	serverKey string
	// displayKey is the display name folded to lower case, for getAllTools.
	displayKey string
}

// NewEntry wraps t, which the caller must not change afterwards.
func NewEntry(t *events.Tool) *Entry {
	e := &Entry{tool: t, prio: priority(t.Source), displayKey: strings.ToLower(t.DisplayName)}
	if t.Source == events.SourceMCP {
		e.serverKey = strings.ToLower(t.Server)
	}
	return e
}

// Tool is the entry's catalogue record. Callers must not change it.
func (e *Entry) Tool() *events.Tool { return e.tool }

// Declaration is the entry's declaration in format f, as JSON.
func (e *Entry) Declaration(f Format) []byte {
	if p := e.decl[f].Load(); p != nil {
		return *p
	}
	t := e.tool
	// Sized once: escaping rarely adds more than the slack.
	size := 96 + len(t.Name) + len(t.ExportName) + len(t.DisplayName) + len(t.Description) +
		max(len(t.Parameters), len(t.GeminiParameters)) + len(t.Annotations) +
		len(t.Title) + len(t.OutputSchema) + len(t.Icons) + len(t.Meta)
	d := appendDeclaration(make([]byte, 0, size), t, f)
	e.decl[f].Store(&d)
	return d
}

// Catalog is an immutable, indexed snapshot of the catalogue. It is safe for
// concurrent use; declaration arrays are built once per snapshot and format.
type Catalog struct {
	byName   map[string]*Entry
	byAlias  map[string]*Entry
	byExport map[string]*Entry
	// sorted is the sortTools order: built-in, then discovered, then MCP
	// by server name; registration order within each.
	sorted []*Entry

	declOnce [numFormats]sync.Once
	decls    [numFormats][]byte
}

// New builds a snapshot of entries (in any order).
func New(entries []*Entry) *Catalog {
	c := &Catalog{
		byName:   make(map[string]*Entry, len(entries)),
		byAlias:  make(map[string]*Entry),
		byExport: make(map[string]*Entry, len(entries)),
		sorted:   slices.Clone(entries),
	}
	slices.SortFunc(c.sorted, compareSortOrder)
	for _, e := range c.sorted {
		c.byName[e.tool.Name] = e
		c.byExport[e.tool.ExportName] = e
	}
	// Aliases never shadow a real name; between two tools claiming one
	// alias, the earlier in sort order keeps it.
	for _, e := range c.sorted {
		for _, a := range e.tool.Aliases {
			if _, real := c.byName[a]; real {
				continue
			}
			if _, taken := c.byAlias[a]; !taken {
				c.byAlias[a] = e
			}
		}
	}
	return c
}

func priority(s events.Source) int {
	switch s {
	case events.SourceBuiltin:
		return 0
	case events.SourceDiscovered:
		return 1
	case events.SourceComposite:
		return 2
	}
	return 3
}

// compareSortOrder is a total order (names are unique), so an unstable
// sort gives the same result every time.
func compareSortOrder(a, b *Entry) int {
	if a.prio != b.prio {
		return a.prio - b.prio
	}
	if a.serverKey != b.serverKey {
		return strings.Compare(a.serverKey, b.serverKey)
	}
	ta, tb := a.tool, b.tool
	if ta.Server != tb.Server {
		return strings.Compare(ta.Server, tb.Server)
	}
	switch {
	case ta.Seq < tb.Seq:
		return -1
	case ta.Seq > tb.Seq:
		return 1
	}
	return strings.Compare(ta.Name, tb.Name)
}

// localeCompare orders strings roughly as JavaScript's localeCompare does
// for tool and server names: case-insensitively first, then by case.
func localeCompare(a, b string) int {
	if c := strings.Compare(strings.ToLower(a), strings.ToLower(b)); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

// Snapshots caches the Catalog of a map of entries that changes: the
// snapshot is built on the first read after a change and shared until the
// next. The owner of the map guards it with a mutex and calls Invalidate,
// holding it, after every change.
type Snapshots struct {
	cur atomic.Pointer[Catalog]
}

// Get returns the current snapshot, building it from entries under mu when
// a change made it stale. It must not be called with mu held.
func (s *Snapshots) Get(mu sync.Locker, entries map[string]*Entry) *Catalog {
	if c := s.cur.Load(); c != nil {
		return c
	}
	mu.Lock()
	defer mu.Unlock()
	if c := s.cur.Load(); c != nil {
		return c
	}
	list := make([]*Entry, 0, len(entries))
	for _, e := range entries {
		list = append(list, e)
	}
	c := New(list)
	s.cur.Store(c)
	return c
}

// Invalidate marks the snapshot stale.
func (s *Snapshots) Invalidate() { s.cur.Store(nil) }

// Len is the number of tools, active or not.
func (c *Catalog) Len() int { return len(c.sorted) }

// Lookup finds a tool by catalogue name or alias, active or not.
func (c *Catalog) Lookup(name string) (*events.Tool, bool) {
	e := c.entry(name)
	if e == nil {
		return nil, false
	}
	return e.tool, true
}

func (c *Catalog) entry(name string) *Entry {
	if e, ok := c.byName[name]; ok {
		return e
	}
	return c.byAlias[name]
}

// GetTool finds an active tool by name or alias (seed 002: a tool that
// exists but is excluded is not returned).
func (c *Catalog) GetTool(name string) (*events.Tool, bool) {
	e := c.entry(name)
	if e == nil || !e.tool.Active {
		return nil, false
	}
	return e.tool, true
}

// Resolve maps a name as a model returned it in format f back to the
// catalogue name.
func (c *Catalog) Resolve(f Format, exported string) (string, bool) {
	if f == OpenAI || f == Anthropic {
		if e, ok := c.byExport[exported]; ok {
			return e.tool.Name, true
		}
		return "", false
	}
	if e := c.entry(exported); e != nil {
		return e.tool.Name, true
	}
	return "", false
}

// All is every tool, active or not, in sortTools order.
func (c *Catalog) All() []*events.Tool {
	out := make([]*events.Tool, len(c.sorted))
	for i, e := range c.sorted {
		out[i] = e.tool
	}
	return out
}

// AllTools is every active tool sorted by display name (getAllTools).
// Prompts and resources are not tools (Features).
func (c *Catalog) AllTools() []*events.Tool {
	entries := make([]*Entry, 0, len(c.sorted))
	for _, e := range c.sorted {
		if e.tool.Active && e.tool.IsTool() {
			entries = append(entries, e)
		}
	}
	slices.SortStableFunc(entries, func(a, b *Entry) int {
		if c := strings.Compare(a.displayKey, b.displayKey); c != 0 {
			return c
		}
		return strings.Compare(a.tool.DisplayName, b.tool.DisplayName)
	})
	out := make([]*events.Tool, len(entries))
	for i, e := range entries {
		out[i] = e.tool
	}
	return out
}

// AllToolNames is the names of the active tools in sortTools order
// (getAllToolNames).
func (c *Catalog) AllToolNames() []string {
	out := make([]string, 0, len(c.sorted))
	for _, e := range c.sorted {
		if e.tool.Active && e.tool.IsTool() {
			out = append(out, e.tool.Name)
		}
	}
	return out
}

// ToolsByServer is the active tools of one MCP server sorted by name
// (getToolsByServer).
func (c *Catalog) ToolsByServer(server string) []*events.Tool {
	var out []*events.Tool
	for _, e := range c.sorted {
		if e.tool.Active && e.tool.IsTool() && e.tool.Source == events.SourceMCP && e.tool.Server == server {
			out = append(out, e.tool)
		}
	}
	slices.SortFunc(out, func(a, b *events.Tool) int { return localeCompare(a.Name, b.Name) })
	return out
}

// Features is every active prompt or resource of an MCP server (kind k:
// events.KindPrompt or events.KindResource), in sortTools order.
func (c *Catalog) Features(k events.Kind) []*events.Tool {
	var out []*events.Tool
	for _, e := range c.sorted {
		if e.tool.Active && e.tool.Kind == k {
			out = append(out, e.tool)
		}
	}
	return out
}

// Declarations is a JSON array of the declarations of every active tool in
// format f, in sortTools order (getFunctionDeclarations). The result is
// shared: callers must not change it.
func (c *Catalog) Declarations(f Format) []byte {
	c.declOnce[f].Do(func() {
		size := 2
		for _, e := range c.sorted {
			if e.tool.Active && e.tool.IsTool() {
				size += len(e.Declaration(f)) + 1
			}
		}
		b := make([]byte, 0, size)
		b = append(b, '[')
		for _, e := range c.sorted {
			if e.tool.Active && e.tool.IsTool() {
				if len(b) > 1 {
					b = append(b, ',')
				}
				b = append(b, e.Declaration(f)...)
			}
		}
		c.decls[f] = append(b, ']')
	})
	return c.decls[f]
}

// DeclarationsFor is the declarations of the named active tools, in the
// order given (getFunctionDeclarationsFiltered). Names may be aliases;
// unknown and inactive names are skipped, and a tool named twice appears
// once.
func (c *Catalog) DeclarationsFor(f Format, names []string) []byte {
	b := []byte{'['}
	seen := make(map[*Entry]bool, len(names))
	for _, n := range names {
		e := c.entry(n)
		if e == nil || !e.tool.Active || !e.tool.IsTool() || seen[e] {
			continue
		}
		seen[e] = true
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, e.Declaration(f)...)
	}
	return append(b, ']')
}
