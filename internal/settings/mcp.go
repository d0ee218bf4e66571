package settings

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// MCP are the keys of a settings file that let MCP servers connect or keep
// them out. A list under mcp that is empty gives way to the older top-level
// key Gemini CLI migrates to it.
type MCP struct {
	// Allowed (mcp.allowed; older allowMCPServers), when not empty, names
	// the only servers that may connect.
	Allowed []string
	// Excluded (mcp.excluded; older excludeMCPServers) names servers kept
	// out, whatever Allowed says.
	Excluded []string
	// AllowedKey and ExcludedKey name the key each list was read from, for
	// the reason given to a server a list keeps out.
	AllowedKey, ExcludedKey string
	// Warnings are what was read under mcp but is not used: unknown keys,
	// and serverCommand, which toolbus does not support.
	Warnings []string
}

// Server is one mcpServers entry as written, its variables not yet
// expanded (see Expand). An entry's mistakes do not make the file an error:
// they are the entry's Problems.
type Server struct {
	// Name is the entry's key in mcpServers.
	Name string `json:"-"`
	// Type is the transport the entry names (Claude Code's type); empty
	// when it names none.
	Type string `json:"type"`

	// Command, Args, Env and Cwd start a stdio server.
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	Cwd     string            `json:"cwd"`

	// URL (url: SSE, or Claude Code's type "http") and HTTPURL (Gemini
	// CLI's httpUrl: streamable HTTP) reach a remote server, with Headers.
	URL     string            `json:"url"`
	HTTPURL string            `json:"httpUrl"`
	Headers map[string]string `json:"headers"`

	// Timeout bounds each request (timeout, in milliseconds in the file);
	// zero when not given.
	Timeout time.Duration `json:"-"`
	// Trust asks for no confirmation of the server's tools (Gemini CLI).
	Trust bool `json:"trust"`
	// IncludeTools and ExcludeTools choose which of its tools are kept.
	IncludeTools []string `json:"includeTools"`
	ExcludeTools []string `json:"excludeTools"`
	Description  string   `json:"description"`

	// TCP is set when the entry gives tcp, a WebSocket server.
	TCP bool `json:"-"`
	// NotObject is set when the entry is not a JSON object: then Problems
	// says so and nothing else of it is read.
	NotObject bool `json:"-"`
	// Problems are the entry's mistakes, sorted: a value of the wrong type
	// ("args is not a list of strings"), a timeout that is not a positive
	// number. A key with a mistake reads as not given.
	Problems []string `json:"-"`
	// Warnings are what was read but is not used, sorted: unknown keys.
	Warnings []string `json:"-"`
}

// mcpListsJSON is the mcp key of a Gemini CLI settings.json.
type mcpListsJSON struct {
	Allowed  names                     `json:"allowed"`
	Excluded names                     `json:"excluded"`
	Others   map[string]jsontext.Value `json:",embed"`
}

func (m mcpJSON) lists() MCP {
	var l mcpListsJSON
	if m.MCP != nil {
		l = *m.MCP
	}
	out := MCP{}
	out.Allowed, out.AllowedKey = orOlder(l.Allowed, "mcp.allowed", m.AllowMCPServers, "allowMCPServers")
	out.Excluded, out.ExcludedKey = orOlder(l.Excluded, "mcp.excluded", m.ExcludeMCPServers, "excludeMCPServers")
	for _, k := range sortedKeys(l.Others) {
		if k == "serverCommand" {
			out.Warnings = append(out.Warnings, "mcp.serverCommand: not supported by toolbus; it is ignored")
		} else {
			out.Warnings = append(out.Warnings, fmt.Sprintf("mcp: unknown key %q is ignored", k))
		}
	}
	return out
}

func (m mcpJSON) servers() []Server {
	var out []Server
	for _, name := range sortedKeys(m.MCPServers) {
		out = append(out, m.MCPServers[name])
	}
	return out
}

// names is a list of server names. A null in it is not a name, though it
// would read as "" into a []string.
type names []string

func (n *names) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	if v.Kind() == 'n' {
		*n = nil
		return nil
	}
	l, ok := stringList(v)
	if !ok {
		return &json.SemanticError{JSONKind: v.Kind()}
	}
	*n = l
	return nil
}

// servers are the mcpServers entries by name. Each is read on its own
// (readServer), so that its mistakes are its own.
type servers map[string]Server

func (s *servers) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	switch k := dec.PeekKind(); k {
	case 'n':
		_, err := dec.ReadToken()
		*s = nil
		return err
	case '{':
	default:
		return &json.SemanticError{JSONKind: k}
	}
	var entries map[string]jsontext.Value
	if err := json.UnmarshalDecode(dec, &entries); err != nil {
		return err
	}
	*s = make(servers, len(entries))
	for name, v := range entries {
		(*s)[name] = readServer(name, v)
	}
	return nil
}

// silentKeys are entry keys Gemini CLI knows that toolbus has no use for
// (OAuth, Google service accounts, WebSocket, extensions): reading one is
// not worth a warning.
var silentKeys = map[string]bool{
	"tcp": true, "oauth": true, "authProviderType": true, "targetAudience": true,
	"targetServiceAccount": true, "extensionName": true,
}

// readServer reads one mcpServers entry. A value of the wrong type is a
// problem of the entry, not the end of its reading, so that every mistake
// of the entry is reported; a null value is a key not given.
func readServer(name string, v jsontext.Value) Server {
	if v.Kind() != '{' {
		return Server{Name: name, NotObject: true, Problems: []string{"the entry is not a JSON object"}}
	}
	var e struct {
		Server
		Timeout *float64                  `json:"timeout"`
		Others  map[string]jsontext.Value `json:",embed"`
	}
	var problems []string
	if err := json.Unmarshal(v, &e, decodeOptions, lenient(&problems)); err != nil {
		// Every value reads leniently, so this is not expected; say so
		// rather than lose it.
		problems = append(problems, err.Error())
	}
	s := e.Server
	s.Name = name
	if e.Timeout != nil {
		// The bound keeps the conversion from overflowing a Duration
		// (about 292 years).
		if ms := *e.Timeout; ms <= 0 || ms > math.MaxInt64/float64(time.Millisecond) {
			problems = append(problems, "timeout must be a positive number of milliseconds")
		} else {
			s.Timeout = time.Duration(ms * float64(time.Millisecond))
		}
	}
	_, s.TCP = e.Others["tcp"]
	for _, k := range sortedKeys(e.Others) {
		if !silentKeys[k] && e.Others[k].Kind() != 'n' {
			s.Warnings = append(s.Warnings, fmt.Sprintf("unknown key %q is ignored", k))
		}
	}
	slices.Sort(problems)
	s.Problems = problems
	return s
}

// lenient reads the values of an entry's keys: a value of the wrong type
// is noted in problems ("args is not a list of strings") and the key reads
// as not given, and null reads as not given.
func lenient(problems *[]string) json.Options {
	return json.WithUnmarshalers(json.JoinUnmarshalers(
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *string) error {
			return readAs(dec, v, `"`, "a string", problems, nil)
		}),
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *bool) error {
			return readAs(dec, v, "tf", "true or false", problems, nil)
		}),
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v **float64) error {
			return readAs(dec, v, "0", "a number of milliseconds", problems, nil)
		}),
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *[]string) error {
			return readAs(dec, v, "[", "a list of strings", problems, stringList)
		}),
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *map[string]string) error {
			return readAs(dec, v, "{", "an object of strings", problems, stringMap)
		}),
	))
}

// readAs reads the next value into v when it is of one of kinds and read
// (or, when nil, the JSON decoder) reads it; null is nothing, and anything
// else is noted in problems as not what is wanted.
func readAs[T any](dec *jsontext.Decoder, v *T, kinds, want string, problems *[]string, read func(jsontext.Value) (T, bool)) error {
	key, k := dec.StackPointer().LastToken(), dec.PeekKind()
	val, err := dec.ReadValue()
	if err != nil || k == 'n' {
		return err
	}
	if read == nil {
		read = unmarshal[T]
	}
	if strings.ContainsRune(kinds, rune(k)) {
		if x, ok := read(val); ok {
			*v = x
			return nil
		}
	}
	*problems = append(*problems, key+" is not "+want)
	return nil
}

func unmarshal[T any](v jsontext.Value) (T, bool) {
	var x T
	err := json.Unmarshal(v, &x, decodeOptions)
	return x, err == nil
}

// stringList reads an array of strings; a null element is not a string.
func stringList(v jsontext.Value) ([]string, bool) {
	var ps []*string
	if json.Unmarshal(v, &ps, decodeOptions) != nil || ps == nil || slices.Contains(ps, nil) {
		return nil, false
	}
	l := make([]string, len(ps))
	for i, p := range ps {
		l[i] = *p
	}
	return l, true
}

// stringMap reads an object of strings; a null value is not a string.
func stringMap(v jsontext.Value) (map[string]string, bool) {
	var ps map[string]*string
	if json.Unmarshal(v, &ps, decodeOptions) != nil || ps == nil {
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
