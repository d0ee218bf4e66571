package mcp

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/settings"
)

// env is a getenv over a fixed set of variables.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func mustParse(t *testing.T, data string, getenv func(string) string) *Config {
	t.Helper()
	c, err := Parse([]byte(data), getenv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	checkInvariants(t, c)
	return c
}

// checkInvariants holds what every parsed Config promises: servers sorted
// by unique name, and each one either valid or disabled with a reason.
func checkInvariants(t testing.TB, c *Config) {
	t.Helper()
	for i, s := range c.Servers {
		if i > 0 && c.Servers[i-1].Name >= s.Name {
			t.Fatalf("servers not sorted by unique name: %q then %q", c.Servers[i-1].Name, s.Name)
		}
		if s.Disabled == "" {
			if err := s.Validate(); err != nil {
				t.Fatalf("server %q is enabled but invalid: %v", s.Name, err)
			}
		}
	}
}

func configured(t *testing.T, c *Config, name string) ServerConfig {
	t.Helper()
	s, ok := c.Server(name)
	if !ok {
		t.Fatalf("no server %q; have %v", name, names(c))
	}
	return s
}

func names(c *Config) []string {
	var l []string
	for _, s := range c.Servers {
		l = append(l, s.Name)
	}
	return l
}

func wantServer(t *testing.T, got, want ServerConfig) {
	t.Helper()
	if !got.Equal(want) {
		t.Errorf("server %q:\n got %+v\nwant %+v", want.Name, got, want)
	}
}

// geminiSettings is a settings.json as Gemini CLI's documentation shows
// them, with the other keys such a file carries and comments.
const geminiSettings = `{
  // Gemini CLI's own settings, which are not ours to read.
  "theme": "GitHub",
  "general": {"vimMode": true},
  "tools": {"core": ["read_file", "run_shell_command(git)"]},
  /* Only these may connect; experimental-server is kept out. */
  "mcp": {
    "allowed": ["pythonTools", "dockerizedServer", "httpServerWithAuth", "sseServer", "filteredServer", "experimental-server"],
    "excluded": ["experimental-server"]
  },
  "mcpServers": {
    "pythonTools": {
      "command": "python",
      "args": ["-m", "my_mcp_server", "--port", "8080"],
      "cwd": "./mcp-servers/python",
      "env": {
        "DATABASE_URL": "$DB_CONNECTION_STRING",
        "API_KEY": "${EXTERNAL_API_KEY}"
      },
      "timeout": 15000
    },
    "dockerizedServer": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "API_KEY", "-v", "${PWD}:/workspace", "my-mcp-server:latest"],
      "env": {"API_KEY": "$EXTERNAL_SERVICE_TOKEN"},
      "trust": true,
      "description": "runs in a container"
    },
    "httpServerWithAuth": {
      "httpUrl": "http://localhost:3000/mcp",
      "headers": {
        "Authorization": "Bearer your-api-token",
        "X-Custom-Header": "custom-value"
      },
      "timeout": 5000
    },
    "sseServer": {
      "url": "https://api.example.com/sse",
      "authProviderType": "google_credentials",
      "oauth": {"scopes": ["https://www.googleapis.com/auth/userinfo.email"]}
    },
    "filteredServer": {
      "command": "python",
      "args": ["-m", "my_mcp_server"],
      "includeTools": ["safe_tool", "file_reader", "data_processor"],
      // "excludeTools": ["dangerous_tool", "file_deleter"],
      "timeout": 30000
    },
    "experimental-server": {"command": "node", "args": ["exp.js"]},
    "notAllowed": {"command": "node"}
  }
}`

func TestGeminiSettings(t *testing.T) {
	t.Parallel()
	c := mustParse(t, geminiSettings, env(map[string]string{
		"DB_CONNECTION_STRING":   "postgres://db",
		"EXTERNAL_API_KEY":       "k1",
		"EXTERNAL_SERVICE_TOKEN": "k2",
		"PWD":                    "/home/u/proj",
	}))
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %q", c.Warnings)
	}
	wantServer(t, configured(t, c, "pythonTools"), ServerConfig{
		Name: "pythonTools", Transport: Stdio, Command: "python",
		Args: []string{"-m", "my_mcp_server", "--port", "8080"}, Cwd: "./mcp-servers/python",
		Env:     map[string]string{"DATABASE_URL": "postgres://db", "API_KEY": "k1"},
		Timeout: 15 * time.Second,
	})
	wantServer(t, configured(t, c, "dockerizedServer"), ServerConfig{
		Name: "dockerizedServer", Transport: Stdio, Command: "docker",
		Args:    []string{"run", "-i", "--rm", "-e", "API_KEY", "-v", "/home/u/proj:/workspace", "my-mcp-server:latest"},
		Env:     map[string]string{"API_KEY": "k2"},
		Timeout: DefaultTimeout, Trust: true, Description: "runs in a container",
	})
	wantServer(t, configured(t, c, "httpServerWithAuth"), ServerConfig{
		Name: "httpServerWithAuth", Transport: HTTP, URL: "http://localhost:3000/mcp",
		Headers: map[string]string{"Authorization": "Bearer your-api-token", "X-Custom-Header": "custom-value"},
		Timeout: 5 * time.Second,
	})
	wantServer(t, configured(t, c, "sseServer"), ServerConfig{
		Name: "sseServer", Transport: SSE, URL: "https://api.example.com/sse", Timeout: DefaultTimeout,
	})
	wantServer(t, configured(t, c, "filteredServer"), ServerConfig{
		Name: "filteredServer", Transport: Stdio, Command: "python", Args: []string{"-m", "my_mcp_server"},
		IncludeTools: []string{"safe_tool", "file_reader", "data_processor"}, Timeout: 30 * time.Second,
	})
	if got := configured(t, c, "experimental-server").Disabled; got != "excluded by mcp.excluded" {
		t.Errorf("experimental-server: got Disabled %q, want excluded (excluded wins over allowed)", got)
	}
	if got := configured(t, c, "notAllowed").Disabled; got != "not in mcp.allowed" {
		t.Errorf("notAllowed: got Disabled %q, want not in mcp.allowed", got)
	}
}

// claudeMCPJSON is a project .mcp.json as Claude Code's documentation shows
// them.
const claudeMCPJSON = `{
  "mcpServers": {
    "memory": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-memory"],
      "env": {"MEMORY_FILE_PATH": "${MEMORY_FILE:-/tmp/memory.json}"}
    },
    "api-server": {
      "type": "sse",
      "url": "${API_BASE_URL:-https://api.example.com}/mcp",
      "headers": {"Authorization": "Bearer ${API_KEY}"}
    },
    "github": {
      "type": "http",
      "url": "https://api.githubcopilot.com/mcp/",
      "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}
    }
  }
}`

func TestClaudeMCPJSON(t *testing.T) {
	t.Parallel()
	c := mustParse(t, claudeMCPJSON, env(map[string]string{"API_KEY": "sk-1", "GITHUB_TOKEN": "ghp_x"}))
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %q", c.Warnings)
	}
	wantServer(t, configured(t, c, "memory"), ServerConfig{
		Name: "memory", Transport: Stdio, Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-memory"},
		Env: map[string]string{"MEMORY_FILE_PATH": "/tmp/memory.json"}, Timeout: DefaultTimeout,
	})
	wantServer(t, configured(t, c, "api-server"), ServerConfig{
		Name: "api-server", Transport: SSE, URL: "https://api.example.com/mcp",
		Headers: map[string]string{"Authorization": "Bearer sk-1"}, Timeout: DefaultTimeout,
	})
	wantServer(t, configured(t, c, "github"), ServerConfig{
		Name: "github", Transport: HTTP, URL: "https://api.githubcopilot.com/mcp/",
		Headers: map[string]string{"Authorization": "Bearer ghp_x"}, Timeout: DefaultTimeout,
	})
}

func TestTransportFromKeysAndType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		entry string
		want  Transport
	}{
		{`{"command": "x"}`, Stdio},
		{`{"url": "http://h/sse"}`, SSE},
		{`{"httpUrl": "http://h/mcp"}`, HTTP},
		{`{"type": "stdio", "command": "x"}`, Stdio},
		{`{"type": "sse", "url": "http://h/sse"}`, SSE},
		{`{"type": "http", "url": "http://h/mcp"}`, HTTP},
		{`{"type": "http", "httpUrl": "http://h/mcp"}`, HTTP},
		{`{"type": "streamable-http", "url": "http://h/mcp"}`, HTTP},
		{`{"command": "x", "url": ""}`, Stdio}, // an empty string is not given
	} {
		t.Run(tc.entry, func(t *testing.T) {
			s := configured(t, mustParse(t, `{"mcpServers": {"s": `+tc.entry+`}}`, env(nil)), "s")
			if s.Disabled != "" || s.Transport != tc.want {
				t.Errorf("got transport %q, disabled %q; want %q, enabled", s.Transport, s.Disabled, tc.want)
			}
		})
	}
}

// TestBadEntries: each kind of mistake disables its server with a message
// that says what is wrong, and leaves the good server beside it alone.
func TestBadEntries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, entry, want string
	}{
		{"not an object", `"npx"`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"nothing to connect", `{"args": ["a"]}`, "none of command, url and httpUrl"},
		{"empty command", `{"command": ""}`, "none of command, url and httpUrl"},
		{"tcp only", `{"tcp": "ws://h:1"}`, "tcp (WebSocket) servers are not supported"},
		{"command and url", `{"command": "x", "url": "http://h/sse"}`, "both command and a URL"},
		{"command and httpUrl", `{"command": "x", "httpUrl": "http://h/mcp"}`, "both command and a URL"},
		{"url and httpUrl", `{"url": "http://h/sse", "httpUrl": "http://h/mcp"}`, "both url and httpUrl"},
		{"stdio with only a url", `{"type": "stdio", "url": "http://h/sse"}`, `type "stdio" needs a command`},
		{"sse with only a command", `{"type": "sse", "command": "x"}`, `type "sse" needs a url`},
		{"sse with httpUrl", `{"type": "sse", "httpUrl": "http://h/mcp"}`, `type "sse" disagrees with httpUrl`},
		{"http with only a command", `{"type": "http", "command": "x"}`, `type "http" needs a url`},
		{"unknown type", `{"type": "ws", "url": "ws://h"}`, `type "ws" is none of stdio, sse and http`},
		{"type not a string", `{"type": 1, "command": "x"}`, "type is not a string"},
		{"url does not parse", `{"url": "http://a b/sse"}`, "the URL does not parse"},
		{"url not http", `{"url": "ftp://h/sse"}`, `the URL's scheme is "ftp"`},
		{"url without host", `{"httpUrl": "https:///mcp"}`, "the URL has no host"},
		{"url relative", `{"url": "/sse"}`, `the URL's scheme is ""`},
		{"url not a string", `{"url": ["http://h"]}`, "url is not a string"},
		{"timeout zero", `{"command": "x", "timeout": 0}`, "timeout must be a positive number"},
		{"timeout negative", `{"command": "x", "timeout": -5}`, "timeout must be a positive number"},
		{"timeout huge", `{"command": "x", "timeout": 1e300}`, "timeout must be a positive number"},
		{"timeout a string", `{"command": "x", "timeout": "5000"}`, "timeout is not a number of milliseconds"},
		{"args a string", `{"command": "x", "args": "-y pkg"}`, "args is not a list of strings"},
		{"args with a number", `{"command": "x", "args": ["-p", 8080]}`, "args is not a list of strings"},
		{"args with null", `{"command": "x", "args": ["a", null]}`, "args is not a list of strings"},
		{"env value a number", `{"command": "x", "env": {"PORT": 8080}}`, "env is not an object of strings"},
		{"env value null", `{"command": "x", "env": {"PORT": null}}`, "env is not an object of strings"},
		{"env a list", `{"command": "x", "env": ["A=1"]}`, "env is not an object of strings"},
		{"env name with =", `{"command": "x", "env": {"A=B": "1"}}`, `env "A=B"`},
		{"headers value not a string", `{"url": "http://h", "headers": {"X": true}}`, "headers is not an object of strings"},
		{"header name with a space", `{"url": "http://h", "headers": {"X Y": "1"}}`, `"X Y" is not a header name`},
		{"header value with a newline", `{"url": "http://h", "headers": {"X": "a\r\nEvil: 1"}}`, "cannot hold CR, LF or NUL"},
		{"trust a string", `{"command": "x", "trust": "yes"}`, "trust is not true or false"},
		{"includeTools a string", `{"command": "x", "includeTools": "a"}`, "includeTools is not a list of strings"},
		{"command not a string", `{"command": ["npx"]}`, "command is not a string"},
		{"command with NUL", `{"command": "x\u0000y"}`, "cannot hold a NUL byte"},
		{"command empty after expansion", `{"command": "${NO_SUCH_CMD}"}`, "a stdio server needs a command"},
		{"url empty after expansion", `{"url": "${NO_SUCH_URL}"}`, "the URL is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, `{"mcpServers": {"bad": `+tc.entry+`, "good": {"command": "x"}}}`, env(nil))
			if got := configured(t, c, "bad").Disabled; !strings.Contains(got, tc.want) {
				t.Errorf("got Disabled %q, want it to contain %q", got, tc.want)
			}
			if got := configured(t, c, "good").Disabled; got != "" {
				t.Errorf("the good server is disabled: %q", got)
			}
		})
	}
}

func TestBadEntryCollectsEveryMistake(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"mcpServers": {"s": {"command": "x", "args": 1, "timeout": -1}}}`, env(nil))
	got := configured(t, c, "s").Disabled
	for _, want := range []string{"args is not a list of strings", "timeout must be a positive number"} {
		if !strings.Contains(got, want) {
			t.Errorf("got Disabled %q, want it to contain %q", got, want)
		}
	}
}

func TestServerNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"github", true}, {"my_server-2.v1", true}, {"A", true},
		{"", false}, {"my server", false}, {"a/b", false}, {"a:b", false}, {"é", false}, {"a*", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, `{"mcpServers": {`+jsonString(tc.name)+`: {"command": "x"}}}`, env(nil))
			s := configured(t, c, tc.name)
			if ok := s.Disabled == ""; ok != tc.ok {
				t.Errorf("got enabled %v (Disabled %q), want %v", ok, s.Disabled, tc.ok)
			}
			if !tc.ok && !strings.Contains(s.Disabled, "server name") {
				t.Errorf("got Disabled %q, want it to be about the name", s.Disabled)
			}
		})
	}
}

func jsonString(s string) string { return strconv.Quote(s) }

func TestFileErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, data, want string }{
		{"empty", ``, "not a JSON object"},
		{"not JSON", `mcpServers: {}`, "not a JSON object"},
		{"a list", `[{"mcpServers": {}}]`, "not a JSON object"},
		{"null", `null`, "not a JSON object"},
		{"trailing garbage", `{"mcpServers": {}} x`, "not a JSON object"},
		{"unterminated comment hides the end", `{"mcpServers": {} /* }`, "not a JSON object"},
		{"mcpServers a list", `{"mcpServers": [{"command": "x"}]}`, "mcpServers is not an object"},
		{"mcpServers a string", `{"mcpServers": "x"}`, "mcpServers is not an object"},
		{"mcp a list", `{"mcp": ["a"]}`, "mcp is not an object"},
		{"mcp.allowed a string", `{"mcp": {"allowed": "a"}}`, "mcp.allowed is not a list"},
		{"mcp.excluded with a number", `{"mcp": {"excluded": ["a", 1]}}`, "mcp.excluded is not a list"},
		{"legacy excludeMCPServers a string", `{"excludeMCPServers": "a"}`, "excludeMCPServers is not a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.data), env(nil))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, %v; want an error containing %q", c, err, tc.want)
			}
		})
	}
}

func TestNoServers(t *testing.T) {
	t.Parallel()
	for _, data := range []string{`{}`, `{"theme": "x"}`, `{"mcpServers": null}`, `{"mcpServers": {}}`, `{"mcp": null}`} {
		c := mustParse(t, data, env(nil))
		if len(c.Servers) != 0 || len(c.Warnings) != 0 {
			t.Errorf("%s: got %+v, want nothing", data, c)
		}
	}
}

func TestWarnings(t *testing.T) {
	t.Parallel()
	data := `{
	  "someOtherSetting": true,
	  "mcp": {"allowed": [], "serverCommand": "bin/server", "allowList": ["x"]},
	  "mcpServers": {
	    "s": {
	      "command": "npx",
	      "args": ["${HOME}/x", "$UNSET_ARG", "${HOME-x}", "cost: $5", "end$"],
	      "env": {"TOKEN": "${UNSET_TOKEN}", "D": "${UNSET_D:-fallback}"},
	      "headers": {"X": "1"},
	      "autoApprove": ["t"],
	      "tcp": "ws://h", "oauth": {}, "authProviderType": "x", "targetAudience": "x",
	      "targetServiceAccount": "x", "extensionName": "x"
	    },
	    "r": {"httpUrl": "http://h/mcp", "cwd": "/tmp", "env": {"A": "1"}}
	  }
	}`
	c := mustParse(t, data, env(map[string]string{"HOME": "/home/u"}))
	s := configured(t, c, "s")
	if want := []string{"/home/u/x", "", "${HOME-x}", "cost: $5", "end$"}; !slices.Equal(s.Args, want) {
		t.Errorf("args: got %q, want %q", s.Args, want)
	}
	if s.Env["TOKEN"] != "" || s.Env["D"] != "fallback" {
		t.Errorf("env: got %q", s.Env)
	}
	if s.Disabled != "" {
		t.Errorf("warnings disabled the server: %q", s.Disabled)
	}
	want := []string{
		`mcp: unknown key "allowList" is ignored`,
		`mcp.serverCommand: not supported by toolbus; it is ignored`,
		`server "r": cwd: only a stdio server uses it; it is ignored`,
		`server "r": env: only a stdio server uses it; it is ignored`,
		`server "s": args[1]: variable UNSET_ARG is not set; it expands to ""`,
		`server "s": args[2]: "${HOME-x}" is not $VAR, ${VAR} or ${VAR:-default}; it is left as it is`,
		`server "s": env.TOKEN: variable UNSET_TOKEN is not set; it expands to ""`,
		`server "s": headers: a stdio server sends no headers; it is ignored`,
		`server "s": unknown key "autoApprove" is ignored`,
	}
	if !slices.Equal(c.Warnings, want) {
		t.Errorf("warnings:\n got %q\nwant %q", c.Warnings, want)
	}
}

func TestAllowedAndExcluded(t *testing.T) {
	t.Parallel()
	servers := `"mcpServers": {"a": {"command": "x"}, "b": {"command": "x"}, "c": {"command": "x"}}`
	for _, tc := range []struct {
		name, lists string
		want        map[string]string
	}{
		{"no lists", ``, map[string]string{"a": "", "b": "", "c": ""}},
		{"allowed", `"mcp": {"allowed": ["a", "b"]},`, map[string]string{"a": "", "b": "", "c": "not in mcp.allowed"}},
		{"empty allowed allows all", `"mcp": {"allowed": []},`, map[string]string{"a": "", "b": "", "c": ""}},
		{"excluded", `"mcp": {"excluded": ["b"]},`, map[string]string{"a": "", "b": "excluded by mcp.excluded", "c": ""}},
		{"excluded wins", `"mcp": {"allowed": ["a", "b"], "excluded": ["a"]},`,
			map[string]string{"a": "excluded by mcp.excluded", "b": "", "c": "not in mcp.allowed"}},
		{"legacy keys", `"allowMCPServers": ["a", "b"], "excludeMCPServers": ["b"],`,
			map[string]string{"a": "", "b": "excluded by excludeMCPServers", "c": "not in allowMCPServers"}},
		{"new keys take precedence", `"allowMCPServers": ["a"], "mcp": {"allowed": ["b"]},`,
			map[string]string{"a": "not in mcp.allowed", "b": "", "c": "not in mcp.allowed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, `{`+tc.lists+servers+`}`, env(nil))
			for name, want := range tc.want {
				if got := configured(t, c, name).Disabled; got != want {
					t.Errorf("%s: got Disabled %q, want %q", name, got, want)
				}
			}
		})
	}
}

// TestExcludedEntryIsSetAside: a server the user keeps out is disabled for
// that reason, and its entry's mistakes and warnings are not reported.
func TestExcludedEntryIsSetAside(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"mcp": {"excluded": ["gh"]},
	  "mcpServers": {"gh": {"url": "${GITHUB_URL}", "args": 3, "bogus": 1}}}`, env(nil))
	if got := configured(t, c, "gh").Disabled; got != "excluded by mcp.excluded" {
		t.Errorf("got Disabled %q", got)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings: %q", c.Warnings)
	}
}

func TestKeeps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		include, exclude []string
		kept, dropped    []string
	}{
		{"no lists", nil, nil, []string{"a", "b"}, nil},
		{"include", []string{"a", "b"}, nil, []string{"a", "b"}, []string{"c", "ab", ""}},
		{"exclude", nil, []string{"a"}, []string{"b"}, []string{"a"}},
		{"exclude wins", []string{"a", "b"}, []string{"a"}, []string{"b"}, []string{"a", "c"}},
		{"include with arguments", []string{"run(git status)", "read"}, nil, []string{"run", "read"}, []string{"run(git status)", "ru"}},
		{"exclude matches whole", nil, []string{"run(git)"}, []string{"run"}, []string{"run(git)"}},
		{"empty include keeps all", []string{}, []string{"x"}, []string{"a"}, []string{"x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ServerConfig{IncludeTools: tc.include, ExcludeTools: tc.exclude}
			for _, n := range tc.kept {
				if !s.Keeps(n) {
					t.Errorf("Keeps(%q) = false, want true", n)
				}
			}
			for _, n := range tc.dropped {
				if s.Keeps(n) {
					t.Errorf("Keeps(%q) = true, want false", n)
				}
			}
		})
	}
}

func TestEqual(t *testing.T) {
	t.Parallel()
	base := ServerConfig{Name: "s", Transport: Stdio, Command: "x", Args: []string{"a"},
		Env: map[string]string{"K": "v"}, Timeout: DefaultTimeout, IncludeTools: []string{"t"}}
	same := base.clone()
	same.Source = "elsewhere.json"
	if !base.Equal(same) {
		t.Error("a copy from another file is not Equal")
	}
	if a, b := (ServerConfig{Name: "s"}), (ServerConfig{Name: "s", Args: []string{}, Env: map[string]string{}}); !a.Equal(b) {
		t.Error("nil and empty lists and maps are not Equal")
	}
	for name, change := range map[string]func(*ServerConfig){
		"name":         func(s *ServerConfig) { s.Name = "t" },
		"transport":    func(s *ServerConfig) { s.Transport = SSE },
		"command":      func(s *ServerConfig) { s.Command = "y" },
		"args":         func(s *ServerConfig) { s.Args = []string{"b"} },
		"env":          func(s *ServerConfig) { s.Env = map[string]string{"K": "w"} },
		"cwd":          func(s *ServerConfig) { s.Cwd = "/" },
		"url":          func(s *ServerConfig) { s.URL = "http://h" },
		"headers":      func(s *ServerConfig) { s.Headers = map[string]string{"X": "1"} },
		"timeout":      func(s *ServerConfig) { s.Timeout = time.Second },
		"trust":        func(s *ServerConfig) { s.Trust = true },
		"includeTools": func(s *ServerConfig) { s.IncludeTools = nil },
		"excludeTools": func(s *ServerConfig) { s.ExcludeTools = []string{"t"} },
		"description":  func(s *ServerConfig) { s.Description = "d" },
		"disabled":     func(s *ServerConfig) { s.Disabled = "no" },
	} {
		changed := base.clone()
		change(&changed)
		if base.Equal(changed) {
			t.Errorf("a change of %s is Equal", name)
		}
	}
}

// TestReread: re-reading a changed file, Equal tells the changed servers
// from the unchanged ones, including a change of an environment variable.
func TestReread(t *testing.T) {
	t.Parallel()
	data := `{"mcpServers": {"a": {"command": "x", "env": {"T": "$TOKEN"}}, "b": {"command": "y"}}}`
	before := mustParse(t, data, env(map[string]string{"TOKEN": "1"}))
	after := mustParse(t, data, env(map[string]string{"TOKEN": "2"}))
	if configured(t, before, "a").Equal(configured(t, after, "a")) {
		t.Error("a: a new token is not a change")
	}
	if !configured(t, before, "b").Equal(configured(t, after, "b")) {
		t.Error("b: changed though its entry did not")
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	settings := filepath.Join(dir, "settings.json")
	mcpJSON := filepath.Join(dir, ".mcp.json")
	writeFile(t, settings, `{"mcp": {"allowed": ["shared", "gemini-only"], "excluded": ["claude-excluded"]},
	  "mcpServers": {"shared": {"command": "old"}, "gemini-only": {"command": "g"}, "bad": {"bogus": 1, "command": "b"}}}`)
	writeFile(t, mcpJSON, `{"mcpServers": {"shared": {"type": "stdio", "command": "new"},
	  "claude-only": {"command": "c"}, "claude-excluded": {"command": "e"}}}`)
	first, err := load(settings, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	second, err := load(mcpJSON, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	firstBefore := configured(t, first, "shared").clone()

	m := first.Merge(second)
	checkInvariants(t, m)
	if want := []string{"bad", "claude-excluded", "claude-only", "gemini-only", "shared"}; !slices.Equal(names(m), want) {
		t.Fatalf("servers: got %q, want %q", names(m), want)
	}
	if s := configured(t, m, "shared"); s.Command != "new" || s.Source != mcpJSON {
		t.Errorf("shared: got command %q from %q, want the later file's", s.Command, s.Source)
	}
	// Excluding reaches across files; allowing does not.
	if got := configured(t, m, "claude-excluded").Disabled; got != "excluded by mcp.excluded" {
		t.Errorf("claude-excluded: got Disabled %q", got)
	}
	if got := configured(t, m, "claude-only").Disabled; got != "" {
		t.Errorf("claude-only: got Disabled %q, want enabled", got)
	}
	if got := configured(t, m, "bad").Disabled; got != "not in mcp.allowed" {
		t.Errorf("bad: got Disabled %q", got)
	}
	wantWarning := `server "shared" in ` + mcpJSON + ` overrides the one in ` + settings
	if !slices.Contains(m.Warnings, wantWarning) {
		t.Errorf("warnings %q lack %q", m.Warnings, wantWarning)
	}
	if !configured(t, first, "shared").Equal(firstBefore) || configured(t, second, "claude-excluded").Disabled != "" {
		t.Error("Merge changed its inputs")
	}
	m.Servers[0].Args = append(m.Servers[0].Args, "x")
	if got := configured(t, first, "bad").Args; len(got) != 0 {
		t.Errorf("the result shares a list with its input: %q", got)
	}

	if got := (*Config)(nil).Merge(second); len(got.Servers) != len(second.Servers) {
		t.Errorf("nil.Merge: got %d servers, want %d", len(got.Servers), len(second.Servers))
	}
	if got := first.Merge(nil); len(got.Servers) != len(first.Servers) {
		t.Errorf("Merge(nil): got %d servers, want %d", len(got.Servers), len(first.Servers))
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "settings.json")
	writeFile(t, path, `{"mcpServers": {"s": {"command": "x", "bogus": 1}}}`)
	c, err := load(path, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s := configured(t, c, "s"); s.Source != path {
		t.Errorf("source: got %q, want %q", s.Source, path)
	}
	if want := path + `: server "s": unknown key "bogus" is ignored`; !slices.Equal(c.Warnings, []string{want}) {
		t.Errorf("warnings: got %q, want [%q]", c.Warnings, want)
	}

	if _, err := load(filepath.Join(dir, "missing.json"), nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want fs.ErrNotExist", err)
	}
	writeFile(t, path, `{"mcpServers": [`)
	if _, err := load(path, nil); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("bad file: got %v, want an error naming %s", err, path)
	}
}

func TestNilGetenvIsTheProcessEnvironment(t *testing.T) {
	t.Setenv("TOOLBUS_MCP_TEST_TOKEN", "from-env")
	c := mustParse(t, `{"mcpServers": {"s": {"command": "x", "env": {"T": "$TOOLBUS_MCP_TEST_TOKEN"}}}}`, nil)
	if got := configured(t, c, "s").Env["T"]; got != "from-env" {
		t.Errorf("got %q", got)
	}
}

func TestMessagesKeepSecrets(t *testing.T) {
	t.Parallel()
	c := mustParse(t, `{"mcpServers": {"s": {"url": "ftp://h/sse?key=SECRET1", "headers": {"X": "SECRET2\n"}},
	  "t": {"url": "http://h h/?key=SECRET3"}}}`, env(nil))
	for _, s := range c.Servers {
		if strings.Contains(s.Disabled, "SECRET") {
			t.Errorf("%s: Disabled shows a secret: %q", s.Name, s.Disabled)
		}
	}
}

// load reads the MCP servers of the file at path, as toolbus up does.
func load(path string, getenv func(string) string) (*Config, error) {
	f, err := settings.Read(path, settings.MCPConfig)
	if err != nil {
		return nil, err
	}
	return ConfigFrom(f, getenv), nil
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// FuzzParse: no input panics, an error comes without a Config, and every
// server returned is valid or says why it is disabled.
func FuzzParse(f *testing.F) {
	for _, s := range []string{geminiSettings, claudeMCPJSON, `{}`, `null`, `[]`, `{"mcpServers": 1}`,
		`{"mcpServers": {"": {"command": "x"}, "a b": {"url": "http://h"}}}`,
		`{"mcpServers": {"s": {"url": "${U:-http://h}/x", "headers": {"A": "$B"}, "timeout": 0.5}}}`,
		`{"mcpServers": {"s": {"type": "sse", "httpUrl": "http://h", "command": "", "args": [null]}}}`,
		`{"mcp": {"allowed": ["s"], "excluded": null}, "mcpServers": {"s": {"command": "${X", "env": {"": "1"}}}}`,
		"{\"mcpServers\": {/* c */ \"s\": {\"command\": \"x\" // c\n}}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, env(map[string]string{"U": "http://u", "B": "b\nc", "X": "x"}))
		if err != nil {
			if c != nil {
				t.Fatal("an error came with a Config")
			}
			return
		}
		checkInvariants(t, c)
		for _, s := range c.Servers {
			if s.Disabled == "" && s.Timeout <= 0 {
				t.Fatalf("server %q enabled with timeout %v", s.Name, s.Timeout)
			}
		}
		checkInvariants(t, c.Merge(c))
	})
}

func TestFileErrorMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ data, want string }{
		{"{\n  // comment\n  \"mcpServers\": {,}\n}", "not a JSON object: line 3, column 18: invalid character ','"},
		{`["x"]`, "not a JSON object but an array"},
		{`"x"`, "not a JSON object but a string"},
		{``, "unexpected end of JSON input"},
	} {
		_, err := Parse([]byte(tc.data), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.data, err, tc.want)
		}
	}
}
