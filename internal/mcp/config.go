// Package mcp reads which MCP servers toolbus connects to, from the files the
// agents themselves write, so an existing file works unchanged: Gemini CLI's
// settings.json (mcpServers, mcp.allowed, mcp.excluded; comments allowed)
// and Claude Code's .mcp.json (mcpServers, whose entries may carry a type).
//
// One reader takes both formats: their mcpServers entries share their keys,
// and a key one agent does not know is absent from the other's files.
//
// A mistake in one server's entry disables that server, with the reason in
// ServerConfig.Disabled; the other servers are unaffected. Only a file that
// cannot be read as such a file at all is an error.
package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/internal/jsonc"
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

// Load reads the MCP servers of a Gemini CLI settings.json or a Claude Code
// .mcp.json; see Parse. getenv looks variables up; nil means os.Getenv. A
// file that cannot be read is an error that wraps the os error. Warnings
// and servers name path.
func Load(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mcp config: %w", err)
	}
	c, err := parse(data, path, getenv)
	if err != nil {
		return nil, fmt.Errorf("mcp config %s: %w", path, err)
	}
	return c, nil
}

// Parse reads the MCP servers of a Gemini CLI settings.json or a Claude Code
// .mcp.json, with // and /* */ comments allowed, as Gemini CLI allows them.
// getenv looks variables up; nil means os.Getenv.
//
// It is an error when data is not a JSON object, when mcpServers is there
// and not an object, and when mcp (or mcp.allowed, mcp.excluded, or the
// older allowMCPServers, excludeMCPServers) is not what Gemini CLI reads:
// those lists keep servers out, and a misread one could connect a server the
// user meant to keep out. Everything else wrong is confined to one server,
// which is returned disabled, or is a warning. Other top-level keys are
// ignored, as settings.json has many. A key whose value is null counts as
// absent.
func Parse(data []byte, getenv func(string) string) (*Config, error) {
	return parse(data, "", getenv)
}

func parse(data []byte, source string, getenv func(string) string) (*Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(jsonc.StripComments(data), &top); err != nil {
		return nil, notAnObject(data, err)
	}
	if top == nil {
		return nil, errors.New("not a JSON object: null")
	}
	var entries map[string]json.RawMessage
	if raw := top["mcpServers"]; !isNull(raw) {
		if err := json.Unmarshal(raw, &entries); err != nil {
			return nil, errors.New("mcpServers is not an object of server entries")
		}
	}
	prefix := ""
	if source != "" {
		prefix = source + ": "
	}
	c := &Config{}
	lists, err := readLists(top, func(msg string) { c.Warnings = append(c.Warnings, prefix+msg) })
	if err != nil {
		return nil, err
	}
	c.Excluded = lists.excluded

	for _, name := range slices.Sorted(maps.Keys(entries)) {
		s, warnings := parseEntry(name, entries[name], getenv)
		s.Source = source
		// A server the user keeps out is disabled for that reason alone,
		// without the warnings and mistakes of an entry they have set
		// aside (an unset token is often why they did).
		switch {
		case slices.Contains(lists.excluded, name):
			s.Disabled, warnings = "excluded by "+lists.excludedKey, nil
		case len(lists.allowed) > 0 && !slices.Contains(lists.allowed, name):
			s.Disabled, warnings = "not in "+lists.allowedKey, nil
		}
		for _, w := range warnings {
			c.Warnings = append(c.Warnings, prefix+w)
		}
		c.Servers = append(c.Servers, s)
	}
	c.Warnings = dedupe(c.Warnings)
	return c, nil
}

// notAnObject describes why data did not decode as a JSON object: where the
// syntax breaks (comments were blanked, not removed, so offsets hold), or
// what the value is instead.
func notAnObject(data []byte, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		before := data[:min(int(syntax.Offset), len(data))]
		line := 1 + bytes.Count(before, []byte("\n"))
		// Offset is just past the offending byte, so the bytes of its line
		// up to Offset count its column.
		col := max(1, len(before)-(bytes.LastIndexByte(before, '\n')+1))
		return fmt.Errorf("not a JSON object: line %d, column %d: %w", line, col, err)
	case errors.As(err, &typ):
		return fmt.Errorf("not a JSON object but %s %s", article(typ.Value), typ.Value)
	}
	return fmt.Errorf("not a JSON object: %w", err)
}

func article(noun string) string {
	if strings.ContainsAny(noun[:min(1, len(noun))], "aeiou") {
		return "an"
	}
	return "a"
}

// serverLists are the names settings.json lets connect or keeps out, with
// the keys they came from, for the reasons given to disabled servers.
type serverLists struct {
	allowed, excluded       []string
	allowedKey, excludedKey string
}

// readLists reads mcp.allowed and mcp.excluded, or, when those are empty,
// the top-level allowMCPServers and excludeMCPServers that older Gemini CLI
// settings files carry and Gemini CLI migrates to them.
func readLists(top map[string]json.RawMessage, warn func(string)) (serverLists, error) {
	l := serverLists{allowedKey: "mcp.allowed", excludedKey: "mcp.excluded"}
	var mcp map[string]json.RawMessage
	if raw := top["mcp"]; !isNull(raw) {
		if err := json.Unmarshal(raw, &mcp); err != nil {
			return l, errors.New("mcp is not an object")
		}
	}
	for _, key := range slices.Sorted(maps.Keys(mcp)) {
		var err error
		switch key {
		case "allowed":
			l.allowed, err = stringList(mcp[key])
		case "excluded":
			l.excluded, err = stringList(mcp[key])
		case "serverCommand":
			warn("mcp.serverCommand: not supported by toolbus; it is ignored")
		default:
			warn(fmt.Sprintf("mcp: unknown key %q is ignored", key))
		}
		if err != nil {
			return l, fmt.Errorf("mcp.%s is not a list of server names", key)
		}
	}
	for _, legacy := range []struct {
		key  string
		list *[]string
		name *string
	}{{"allowMCPServers", &l.allowed, &l.allowedKey}, {"excludeMCPServers", &l.excluded, &l.excludedKey}} {
		if len(*legacy.list) > 0 {
			continue
		}
		list, err := stringList(top[legacy.key])
		if err != nil {
			return l, fmt.Errorf("%s is not a list of server names", legacy.key)
		}
		if len(list) > 0 {
			*legacy.list, *legacy.name = list, legacy.key
		}
	}
	return l, nil
}

// silentKeys are entry keys Gemini CLI knows that toolbus has no use for
// (OAuth, Google service accounts, WebSocket, extensions): reading one is
// not worth a warning.
var silentKeys = map[string]bool{
	"tcp": true, "oauth": true, "authProviderType": true, "targetAudience": true,
	"targetServiceAccount": true, "extensionName": true,
}

// parseEntry reads one mcpServers entry. What is wrong with the entry goes
// into Disabled; what is read but not used goes into the warnings, each
// naming the server and the key.
func parseEntry(name string, raw json.RawMessage, getenv func(string) string) (ServerConfig, []string) {
	s := ServerConfig{Name: name, Timeout: DefaultTimeout}
	var warnings, problems []string
	warn := func(key, msg string) {
		warnings = append(warnings, fmt.Sprintf("server %q: %s: %s", name, key, msg))
	}
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		s.Disabled = "the entry is not a JSON object"
		return s, nil
	}
	if err := checkName(name); err != nil {
		problem("%v", err)
	}

	var typ, rawURL, httpURL string
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		v := fields[key]
		if isNull(v) {
			continue
		}
		ok := true
		switch key {
		case "command":
			ok = json.Unmarshal(v, &s.Command) == nil
		case "args":
			s.Args, ok = decodeStrings(v)
		case "env":
			s.Env, ok = decodeStringMap(v)
		case "cwd":
			ok = json.Unmarshal(v, &s.Cwd) == nil
		case "url":
			ok = json.Unmarshal(v, &rawURL) == nil
		case "httpUrl":
			ok = json.Unmarshal(v, &httpURL) == nil
		case "headers":
			s.Headers, ok = decodeStringMap(v)
		case "timeout":
			var ms float64
			if ok = json.Unmarshal(v, &ms) == nil; ok {
				// The bound keeps the conversion from overflowing a
				// Duration (about 292 years).
				if ms <= 0 || ms > math.MaxInt64/float64(time.Millisecond) {
					problem("timeout must be a positive number of milliseconds")
				} else {
					s.Timeout = time.Duration(ms * float64(time.Millisecond))
				}
			}
		case "trust":
			ok = json.Unmarshal(v, &s.Trust) == nil
		case "includeTools":
			s.IncludeTools, ok = decodeStrings(v)
		case "excludeTools":
			s.ExcludeTools, ok = decodeStrings(v)
		case "type":
			ok = json.Unmarshal(v, &typ) == nil
		case "description":
			ok = json.Unmarshal(v, &s.Description) == nil
		default:
			if !silentKeys[key] {
				warnings = append(warnings, fmt.Sprintf("server %q: unknown key %q is ignored", name, key))
			}
		}
		if !ok {
			problem("%s is not %s", key, keyKinds[key])
		}
	}

	s.Transport = transport(typ, s.Command != "", rawURL != "", httpURL != "", fields["tcp"] != nil, problem)
	s.URL = rawURL
	if httpURL != "" {
		s.URL = httpURL
	}

	// Expand after reading, so a URL is checked as it will be used:
	// "${BASE:-https://api.example.com}/mcp" is not a URL before.
	e := expander{getenv: getenv, warn: warn}
	s.Command = e.expand("command", s.Command)
	for i, a := range s.Args {
		s.Args[i] = e.expand("args["+strconv.Itoa(i)+"]", a)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		s.Env[k] = e.expand("env."+k, s.Env[k])
	}
	s.Cwd = e.expand("cwd", s.Cwd)
	if httpURL != "" {
		s.URL = e.expand("httpUrl", s.URL)
	} else {
		s.URL = e.expand("url", s.URL)
	}
	for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
		s.Headers[k] = e.expand("headers."+k, s.Headers[k])
	}

	switch s.Transport {
	case Stdio:
		if len(s.Headers) > 0 {
			warn("headers", "a stdio server sends no headers; it is ignored")
		}
	case SSE, HTTP:
		for key, given := range map[string]bool{"args": len(s.Args) > 0, "env": len(s.Env) > 0, "cwd": s.Cwd != ""} {
			if given {
				warn(key, "only a stdio server uses it; it is ignored")
			}
		}
	}

	if problems == nil {
		if err := s.Validate(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	s.Disabled = strings.Join(problems, "; ")
	slices.Sort(warnings)
	return s, warnings
}

// keyKinds says what each key's value must be, for the messages.
var keyKinds = map[string]string{
	"command": "a string", "args": "a list of strings", "env": "an object of strings", "cwd": "a string",
	"url": "a string", "httpUrl": "a string", "headers": "an object of strings",
	"timeout": "a number of milliseconds", "trust": "true or false",
	"includeTools": "a list of strings", "excludeTools": "a list of strings",
	"type": "a string", "description": "a string",
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
		if !(isNameChar(c) || strings.IndexByte("!#$%&'*+-.^`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func hasNUL(s string) bool { return strings.IndexByte(s, 0) >= 0 }

func isNull(raw json.RawMessage) bool {
	return raw == nil || string(raw) == "null"
}

// stringList decodes an optional list of strings; null or absent is nil.
func stringList(raw json.RawMessage) ([]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	l, ok := decodeStrings(raw)
	if !ok {
		return nil, errors.New("not a list of strings")
	}
	return l, nil
}

// decodeStrings decodes a list of strings. A null element is not a string,
// though encoding/json would read it as "".
func decodeStrings(raw json.RawMessage) ([]string, bool) {
	var ps []*string
	if err := json.Unmarshal(raw, &ps); err != nil || ps == nil {
		return nil, false
	}
	l := make([]string, len(ps))
	for i, p := range ps {
		if p == nil {
			return nil, false
		}
		l[i] = *p
	}
	return l, true
}

// decodeStringMap decodes an object of strings; a null value is not a string.
func decodeStringMap(raw json.RawMessage) (map[string]string, bool) {
	var ps map[string]*string
	if err := json.Unmarshal(raw, &ps); err != nil || ps == nil {
		return nil, false
	}
	m := make(map[string]string, len(ps))
	for k, p := range ps {
		if p == nil {
			return nil, false
		}
		m[k] = *p
	}
	return m, true
}

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

func quote(s string) string { return strconv.Quote(s) }
