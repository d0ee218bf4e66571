// Package mcp connects toolbus to the MCP servers the agents' own files
// name, so an existing file works unchanged: Gemini CLI's settings.json
// (mcpServers, mcp.allowed, mcp.excluded) and Claude Code's .mcp.json
// (mcpServers, whose entries may carry a type), as internal/settings reads
// them. ConfigFrom makes the servers of a file's entries.
//
// A mistake in one server's entry disables that server, with the reason in
// ServerConfig.Disabled; the other servers are unaffected. Only a file that
// cannot be read as such a file at all is an error.
package mcp

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/settings"
)

// Transport is how toolbus talks to an MCP server.
type Transport string

// The transports an entry can name, in its type key or by the keys it gives.
const (
	// Stdio starts Command and talks over its standard input and output.
	Stdio Transport = "stdio"
	// SSE connects to URL with the HTTP+SSE transport (Gemini's url;
	// Claude's type "sse").
	SSE Transport = "sse"
	// HTTP connects to URL with the streamable HTTP transport (Gemini's
	// httpUrl; Claude's type "http").
	HTTP Transport = "http"
)

// DefaultTimeout is a server's request timeout when its entry gives none,
// Gemini CLI's default.
const DefaultTimeout = 600 * time.Second

// ServerConfig is one MCP server as its entry describes it, with environment
// variables expanded. A ServerConfig with an empty Disabled passes Validate.
type ServerConfig struct {
	// Name is the entry's key in mcpServers.
	Name      string
	Transport Transport

	// Command, Args, Env and Cwd start a stdio server. Env is added to the
	// environment the server inherits.
	Command string
	Args    []string
	Env     map[string]string
	Cwd     string

	// URL and Headers reach an SSE or streamable HTTP server.
	URL     string
	Headers map[string]string

	// Timeout bounds each request to the server (entry key timeout, in
	// milliseconds); DefaultTimeout when the entry gives none.
	Timeout time.Duration
	// Trust, when true, asks for no confirmation of this server's tools
	// (Gemini CLI's trust).
	Trust bool
	// IncludeTools and ExcludeTools choose which of the server's tools are
	// kept; see Keeps.
	IncludeTools, ExcludeTools []string
	Description                string

	// Disabled, when not empty, says why the server is not to be connected:
	// a name that mcp.excluded or mcp.allowed keeps out (that reason wins
	// over any other), or else what is wrong with the entry.
	Disabled string

	// Source is the file the entry was read from (set by Load; empty from
	// Parse). It names the file in messages and is not part of Equal.
	Source string
}

// Keeps reports whether the server's tool named toolName is to be used, by
// Gemini CLI's rule: a tool is kept when it is not in ExcludeTools and
// IncludeTools is empty or names it. An IncludeTools entry may carry an
// argument restriction, "tool(args)", which names "tool"; ExcludeTools
// entries are matched whole, as Gemini CLI matches them. Exclusion wins.
//
// Unlike Gemini CLI, an includeTools of [] keeps every tool: an empty list
// and no list read the same here.
func (s *ServerConfig) Keeps(toolName string) bool {
	if slices.Contains(s.ExcludeTools, toolName) {
		return false
	}
	if len(s.IncludeTools) == 0 {
		return true
	}
	for _, entry := range s.IncludeTools {
		if name, _, _ := strings.Cut(entry, "("); name == toolName {
			return true
		}
	}
	return false
}

// Equal reports whether s and o describe the same server the same way, so
// that a caller re-reading the files can tell which servers changed and
// reconnect only those. Source is not compared: an entry moved unchanged to
// another file is the same server. A nil and an empty list or map are equal.
func (s ServerConfig) Equal(o ServerConfig) bool {
	return s.Name == o.Name && s.Transport == o.Transport &&
		s.Command == o.Command && slices.Equal(s.Args, o.Args) && maps.Equal(s.Env, o.Env) && s.Cwd == o.Cwd &&
		s.URL == o.URL && maps.Equal(s.Headers, o.Headers) &&
		s.Timeout == o.Timeout && s.Trust == o.Trust &&
		slices.Equal(s.IncludeTools, o.IncludeTools) && slices.Equal(s.ExcludeTools, o.ExcludeTools) &&
		s.Description == o.Description && s.Disabled == o.Disabled
}

// Validate reports why s cannot be connected as it stands, or nil. It checks
// the server itself (name, transport, command or URL, timeout, the names and
// values the transport will pass on), not Disabled. Its message never quotes
// a URL or a header value, which may hold a secret.
//
// A name is one or more of [A-Za-z0-9_.-], the characters Gemini CLI keeps
// in the tool names it makes from it ("server__tool").
func (s ServerConfig) Validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if err := checkName(s.Name); err != nil {
		add("%v", err)
	}
	switch s.Transport {
	case Stdio:
		if s.Command == "" {
			add("a stdio server needs a command")
		}
		if s.URL != "" {
			add("a stdio server has no URL")
		}
		if strings.ContainsRune(s.Command, 0) || strings.ContainsRune(s.Cwd, 0) || slices.ContainsFunc(s.Args, hasNUL) {
			add("command, args and cwd cannot hold a NUL byte")
		}
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			if k == "" || strings.ContainsAny(k, "=\x00") || hasNUL(s.Env[k]) {
				add("env %q: a name is not empty and has no \"=\", and neither name nor value has a NUL byte", k)
			}
		}
	case SSE, HTTP:
		if s.Command != "" {
			add("a %s server has no command", s.Transport)
		}
		if err := checkURL(s.URL); err != nil {
			add("%v", err)
		}
		for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
			if !validHeaderName(k) {
				add("headers: %q is not a header name", k)
			} else if strings.ContainsAny(s.Headers[k], "\r\n\x00") {
				add("headers.%s: a value cannot hold CR, LF or NUL", k)
			}
		}
	default:
		add("transport %q is none of stdio, sse and http", s.Transport)
	}
	if s.Timeout <= 0 {
		add("the timeout is not positive")
	}
	if problems != nil {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Config is the MCP servers read from one file, or merged from several.
// Nothing changes it after it is returned, so it may be read concurrently.
type Config struct {
	// Servers, sorted by name, one per name, disabled ones included.
	Servers []ServerConfig
	// Warnings are what was read but not used: unknown keys, unset
	// variables, keys the transport ignores, servers overridden by a later
	// file. Each names the file (when known), the server and the key.
	Warnings []string
	// Excluded is the names mcp.excluded kept out, of this file or of any
	// merged into it; Merge applies them to every file's servers.
	Excluded []string
}

// Server returns the server named name. It relies on Servers being sorted,
// as Parse, Load and Merge leave them.
func (c *Config) Server(name string) (ServerConfig, bool) {
	i, ok := slices.BinarySearchFunc(c.Servers, name, func(s ServerConfig, n string) int { return strings.Compare(s.Name, n) })
	if !ok {
		return ServerConfig{}, false
	}
	return c.Servers[i], true
}

// Parse reads the MCP servers of the contents of a Gemini CLI settings.json
// or a Claude Code .mcp.json, as settings.Parse reads them (format
// settings.MCPConfig), and makes their servers (ConfigFrom). getenv looks
// variables up; nil means os.Getenv.
//
// It is an error when data is not a JSON object, when mcpServers is there
// and not an object, and when mcp (or mcp.allowed, mcp.excluded, or the
// older allowMCPServers, excludeMCPServers) is not what Gemini CLI reads:
// those lists keep servers out, and a misread one could connect a server the
// user meant to keep out. Everything else wrong is confined to one server,
// which is returned disabled, or is a warning.
func Parse(data []byte, getenv func(string) string) (*Config, error) {
	f, err := settings.Parse(data, "", settings.MCPConfig)
	if errors.Is(err, settings.ErrSyntax) {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if err != nil {
		return nil, err
	}
	return ConfigFrom(f, getenv), nil
}

// ConfigFrom makes the MCP servers of the mcpServers entries of f, with
// their variables expanded (getenv looks them up; nil means os.Getenv), and
// keeps out those f's mcp.excluded or mcp.allowed keep out. Warnings and
// servers name f.Path when it has one. f is not changed.
func ConfigFrom(f *settings.File, getenv func(string) string) *Config {
	prefix := ""
	if f.Path != "" {
		prefix = f.Path + ": "
	}
	c := &Config{Excluded: slices.Clone(f.MCP.Excluded)}
	for _, w := range f.MCP.Warnings {
		c.Warnings = append(c.Warnings, prefix+w)
	}
	for _, e := range f.MCPServers {
		s, warnings := serverFrom(e, getenv)
		s.Source = f.Path
		// A server the user keeps out is disabled for that reason alone,
		// without the warnings and mistakes of an entry they have set
		// aside (an unset token is often why they did).
		switch {
		case slices.Contains(f.MCP.Excluded, e.Name):
			s.Disabled, warnings = "excluded by "+f.MCP.ExcludedKey, nil
		case len(f.MCP.Allowed) > 0 && !slices.Contains(f.MCP.Allowed, e.Name):
			s.Disabled, warnings = "not in "+f.MCP.AllowedKey, nil
		}
		for _, w := range warnings {
			c.Warnings = append(c.Warnings, prefix+w)
		}
		c.Servers = append(c.Servers, s)
	}
	c.Warnings = dedupe(c.Warnings)
	return c
}

// serverFrom makes the server of one entry. What is wrong with the entry
// goes into Disabled; what is read but not used goes into the warnings,
// each naming the server and the key.
func serverFrom(e settings.Server, getenv func(string) string) (ServerConfig, []string) {
	s := ServerConfig{Name: e.Name, Timeout: DefaultTimeout}
	if e.NotObject {
		s.Disabled = strings.Join(e.Problems, "; ")
		return s, nil
	}
	var problems []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if err := checkName(e.Name); err != nil {
		problem("%v", err)
	}
	problems = append(problems, e.Problems...)
	s.Transport = transport(e.Type, e.Command != "", e.URL != "", e.HTTPURL != "", e.TCP, problem)

	// Expand after reading, so a URL is checked as it will be used:
	// "${BASE:-https://api.example.com}/mcp" is not a URL before.
	x, expandWarnings := e.Expand(getenv)
	s.Command, s.Args, s.Env, s.Cwd, s.URL, s.Headers = x.Command, x.Args, x.Env, x.Cwd, x.URL, x.Headers
	if e.HTTPURL != "" {
		s.URL = x.HTTPURL
	}
	if e.Timeout > 0 {
		s.Timeout = e.Timeout
	}
	s.Trust, s.Description = e.Trust, e.Description
	s.IncludeTools, s.ExcludeTools = slices.Clone(e.IncludeTools), slices.Clone(e.ExcludeTools)

	warnings := append(slices.Clone(e.Warnings), expandWarnings...)
	switch s.Transport {
	case Stdio:
		if len(s.Headers) > 0 {
			warnings = append(warnings, "headers: a stdio server sends no headers; it is ignored")
		}
	case SSE, HTTP:
		for key, given := range map[string]bool{"args": len(s.Args) > 0, "env": len(s.Env) > 0, "cwd": s.Cwd != ""} {
			if given {
				warnings = append(warnings, key+": only a stdio server uses it; it is ignored")
			}
		}
	}
	slices.Sort(warnings)
	for i, w := range warnings {
		warnings[i] = fmt.Sprintf("server %q: %s", e.Name, w)
	}

	if problems == nil {
		if err := s.Validate(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	s.Disabled = strings.Join(problems, "; ")
	return s, warnings
}

// transport is the transport an entry names: by its type key when given
// (Claude Code), which must agree with the keys given, or else by the key
// that is given (Gemini CLI: command, url for SSE, httpUrl for streamable
// HTTP). Exactly one of command, url and httpUrl must be given; an empty
// string counts as not given, as it does for Gemini CLI.
func transport(typ string, hasCommand, hasURL, hasHTTPURL, hasTCP bool, problem func(string, ...any)) Transport {
	switch {
	case !hasCommand && !hasURL && !hasHTTPURL && hasTCP:
		problem("tcp (WebSocket) servers are not supported; give command, url or httpUrl")
	case !hasCommand && !hasURL && !hasHTTPURL:
		problem("the entry gives none of command, url and httpUrl")
	case hasURL && hasHTTPURL:
		problem("the entry gives both url and httpUrl; give one")
	case hasCommand && (hasURL || hasHTTPURL):
		problem("the entry gives both command and a URL; give one")
	}
	given := Stdio
	switch {
	case hasHTTPURL:
		given = HTTP
	case hasURL:
		given = SSE
	}
	switch typ {
	case "":
		return given
	case "stdio":
		if !hasCommand {
			problem("type \"stdio\" needs a command")
		}
		return Stdio
	case "sse":
		if hasHTTPURL {
			problem("type \"sse\" disagrees with httpUrl, which is streamable HTTP; use url")
		} else if !hasURL {
			problem("type \"sse\" needs a url")
		}
		return SSE
	case "http", "streamable-http":
		// "streamable-http" is newer Gemini CLI's name for it.
		if !hasURL && !hasHTTPURL {
			problem("type %q needs a url", typ)
		}
		return HTTP
	default:
		problem("type %q is none of stdio, sse and http", typ)
		return given
	}
}

// Merge returns the servers of c and other together, as read from c's file
// and then other's: a server named in both is other's, with a warning. The
// names either file's mcp.excluded keeps out are disabled in both, since
// excluding is how a user keeps a server away whichever file it is in;
// mcp.allowed stays with its own file, since a Gemini CLI allow-list was not
// written with Claude Code's servers in mind. c and other are not changed,
// and the result shares nothing with them. Either may be nil.
func (c *Config) Merge(other *Config) *Config {
	out := &Config{}
	byName := map[string]ServerConfig{}
	for _, from := range []*Config{c, other} {
		if from == nil {
			continue
		}
		out.Warnings = append(out.Warnings, from.Warnings...)
		for _, n := range from.Excluded {
			if !slices.Contains(out.Excluded, n) {
				out.Excluded = append(out.Excluded, n)
			}
		}
		for _, s := range from.Servers {
			if prev, ok := byName[s.Name]; ok {
				out.Warnings = append(out.Warnings, fmt.Sprintf("server %q in %s overrides the one in %s",
					s.Name, fileName(s.Source, "a later file"), fileName(prev.Source, "an earlier file")))
			}
			byName[s.Name] = s.clone()
		}
	}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		s := byName[name]
		if slices.Contains(out.Excluded, name) {
			s.Disabled = "excluded by mcp.excluded"
		}
		out.Servers = append(out.Servers, s)
	}
	return out
}

func (s ServerConfig) clone() ServerConfig {
	s.Args = slices.Clone(s.Args)
	s.Env = maps.Clone(s.Env)
	s.Headers = maps.Clone(s.Headers)
	s.IncludeTools = slices.Clone(s.IncludeTools)
	s.ExcludeTools = slices.Clone(s.ExcludeTools)
	return s
}

func fileName(source, otherwise string) string {
	if source == "" {
		return otherwise
	}
	return source
}

// checkURL reports why u cannot be an SSE or streamable HTTP endpoint. It
// does not quote u, which may carry a key in its query.
func checkURL(u string) error {
	if u == "" {
		return errors.New("the URL is empty")
	}
	p, err := url.Parse(u)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("the URL does not parse: %v", err)
	}
	if s := strings.ToLower(p.Scheme); s != "http" && s != "https" {
		return fmt.Errorf("the URL's scheme is %q; want http or https", p.Scheme)
	}
	if p.Host == "" {
		return errors.New("the URL has no host")
	}
	return nil
}

// checkName reports why name cannot name a server.
func checkName(name string) error {
	if name == "" {
		return errors.New("the server name is empty")
	}
	if i := strings.IndexFunc(name, func(r rune) bool { return !validNameRune(r) }); i >= 0 {
		return fmt.Errorf("the server name has %q; a name is made of A-Z, a-z, 0-9, _, . and -", []rune(name[i:])[0])
	}
	return nil
}

func validNameRune(r rune) bool {
	return r == '_' || r == '.' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// validHeaderName reports whether k is an HTTP token (RFC 9110), the only
// header names net/http sends.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(validNameRune(rune(c)) || strings.IndexByte("!#$%&'*+-.^`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func hasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

func dedupe(l []string) []string {
	seen := map[string]bool{}
	out := l[:0]
	for _, s := range l {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
