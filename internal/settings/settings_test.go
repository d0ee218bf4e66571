package settings

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustParse(t *testing.T, data string, f Format) *File {
	t.Helper()
	file, err := Parse([]byte(data), "s.json", f)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return file
}

// TestErrors: a file that does not read says where, as FILE:LINE:COLUMN,
// and what, naming the key.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format Format
		data   string
		want   string
	}{
		{"syntax, after a comment", MCPConfig, "{\n  // comment\n  \"mcpServers\": {,}\n}",
			`s.json:3:18: invalid character ',' at start of string (expecting '"')`},
		{"cut short", GeminiSettings, `{"tools": `, "s.json:1:11: unexpected end of JSON input"},
		{"empty", GeminiSettings, ``, "s.json:1:1: unexpected end of JSON input"},
		{"unterminated comment", MCPConfig, `{"mcpServers": {} /* }`, "s.json:1:23: unexpected end of JSON input"},
		{"trailing garbage", MCPConfig, `{"mcpServers": {}} x`, "s.json:1:20: invalid character 'x' after top-level value"},
		{"a list", GeminiSettings, "\n [{}]", "s.json:2:2: not a JSON object but an array"},
		{"null", ClaudeSettings, `null`, "s.json:1:1: not a JSON object but null"},
		{"a string in a list", GeminiSettings, "{\"tools\": {\n  \"callEnv\": [\"A\", 5]}}", "s.json:2:20: tools.callEnv[1] is not a string"},
		{"tools not an object", GeminiSettings, `{"tools": 5}`, "s.json:1:11: tools is not an object"},
		{"mcpServers a list", MCPConfig, `{"mcpServers": [{"command": "x"}]}`, "s.json:1:16: mcpServers is not an object of server entries"},
		{"mcp a list", GeminiSettings, `{"mcp": ["a"]}`, "s.json:1:9: mcp is not an object"},
		{"mcp.excluded with a number", MCPConfig, `{"mcp": {"excluded": ["a", 1]}}`, "s.json:1:22: mcp.excluded is not a list of server names"},
		{"mcp.allowed with null", MCPConfig, `{"mcp": {"allowed": ["a", null]}}`, "s.json:1:21: mcp.allowed is not a list of server names"},
		{"older list", GeminiSettings, `{"allowMCPServers": "a"}`, "s.json:1:21: allowMCPServers is not a list of server names"},
		{"hooks a list", ClaudeSettings, `{"hooks": []}`, "s.json:1:11: hooks is not an object"},
		{"event not a list", ClaudeSettings, `{"hooks": {"PreToolUse": {}}}`, "s.json:1:26: hooks.PreToolUse: want an array of hook groups, got an object"},
		{"group not an object", GeminiSettings, `{"hooks": {"BeforeTool": [1]}}`, "s.json:1:27: hooks.BeforeTool: group 0 is not an object"},
		{"hook's command", ClaudeSettings, `{"hooks": {"PostToolUse": [{"hooks": [{}, {"command": ["rm"]}]}]}}`,
			"s.json:1:55: hooks.PostToolUse: group 0, hook 1: command is not a string"},
		{"hook's timeout", GeminiSettings, `{"hooks": {"AfterTool": [{"hooks": [{"timeout": "60"}]}]}}`,
			"s.json:1:49: hooks.AfterTool: group 0, hook 0: timeout is not a number"},
		{"hooks.enabled", GeminiSettings, `{"hooks": {"enabled": "yes"}}`, "s.json:1:23: hooks.enabled is not true or false"},
		{"disableAllHooks", ClaudeSettings, `{"disableAllHooks": 1}`, "s.json:1:21: disableAllHooks is not true or false"},
		{"empty command", GeminiSettings, `{"tools": {"discoveryCommand": " ", "callCommand": "c"}}`,
			"s.json:1:32: tools.discoveryCommand is empty: give a command, or remove the key"},
		{"empty older command", GeminiSettings, `{"toolCallCommand": ""}`, "s.json:1:21: toolCallCommand is empty: give a command, or remove the key"},
		{"duration a number", GeminiSettings, `{"tools": {"discoveryInterval": 600}}`,
			`s.json:1:33: tools.discoveryInterval: want a duration string such as "10m" or "90s", got 600`},
		{"duration that does not parse", GeminiSettings, `{"tools": {"discoveredIdleExpiry": "a day"}}`,
			`s.json:1:36: tools.discoveredIdleExpiry: "a day" is not a duration (examples: "10m", "90s", "24h")`},
		{"aliases", GeminiSettings, `{"tools": {"aliases": {"cat": 1}}}`, "s.json:1:31: tools.aliases.cat is not a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.data), "s.json", tc.format)
			var e *Error
			if !errors.As(err, &e) || err.Error() != tc.want {
				t.Fatalf("got %v, want %s", err, tc.want)
			}
		})
	}
}

func TestErrorWithoutName(t *testing.T) {
	_, err := Parse([]byte("{\n  \"hooks\": 1}"), "", ClaudeSettings)
	if err == nil || err.Error() != "line 2, column 12: hooks is not an object" {
		t.Errorf("got %v", err)
	}
	_, err = Parse([]byte(`{"a": tru}`), "", GeminiSettings)
	if !errors.Is(err, ErrSyntax) {
		t.Errorf("a syntax error: got %v, want one that is ErrSyntax", err)
	}
	if _, err = Parse([]byte(`{"tools": 1}`), "", GeminiSettings); errors.Is(err, ErrSyntax) {
		t.Errorf("a type error is ErrSyntax: %v", err)
	}
}

// geminiSettings is a Gemini CLI settings.json with every key read, the
// older ones among them, and keys of Gemini CLI's own.
const geminiSettings = `{
  // Gemini CLI's own settings, which are not ours to read.
  "theme": "GitHub",
  "general": {"vimMode": true},
  "tools": {"exclude": ["lint"], "aliases": {"cat": "read_file"}, "callCommand": "sh call.sh",
    "discoveryInterval": "10m", "discoveryCacheTTL": null, "discoveredIdleExpiry": "24h", "callEnv": ["GOPATH"]},
  "coreTools": ["read_file", "run_shell_command(git)"],
  "excludeTools": ["ignored: tools.exclude is given"],
  "toolDiscoveryCommand": "sh discover.sh",
  "mcp": {"allowed": [], "excluded": ["old"], "serverCommand": "x", "allowList": ["a"]},
  "allowMCPServers": ["gh", "old"],
  "mcpServers": {"old": {"command": "old"}, "gh": {"httpUrl": "https://h/mcp", "timeout": 1500}},
  "hooksConfig": {"enabled": true, "disabled": ["from-config"]},
  "hooks": {
    "disabled": ["off"],
    "notifications": true,
    "BeforeTool": [{"matcher": "run_shell_command", "sequential": true,
      "hooks": [{"type": "command", "command": "./check.sh", "name": "check", "timeout": 1500, "description": "d"}]}],
    "BeforeModel": [],
    "PreToolUse": null
  }
}`

func TestGeminiSettings(t *testing.T) {
	f := mustParse(t, geminiSettings, GeminiSettings)
	if want := (Tools{Core: []string{"read_file", "run_shell_command(git)"}, Exclude: []string{"lint"},
		Aliases: map[string]string{"cat": "read_file"},
		Ignored: []string{`coreTools entry "run_shell_command(git)": the registry makes the tool active and does not hold its calls to the restriction in brackets; the policy judges each call (policy/README.md)`}}); !reflect.DeepEqual(f.Tools, want) {
		t.Errorf("tools:\n got %+v\nwant %+v", f.Tools, want)
	}
	if want := (Discovery{DiscoveryCommand: "sh discover.sh", CallCommand: "sh call.sh",
		DiscoveryKey: "toolDiscoveryCommand", CallKey: "tools.callCommand",
		Interval: 10 * time.Minute, IdleExpiry: 24 * time.Hour, CallEnv: []string{"GOPATH"}}); !reflect.DeepEqual(f.Discovery, want) {
		t.Errorf("discovery:\n got %+v\nwant %+v", f.Discovery, want)
	}
	if want := (MCP{Allowed: []string{"gh", "old"}, Excluded: []string{"old"}, AllowedKey: "allowMCPServers", ExcludedKey: "mcp.excluded",
		Warnings: []string{`mcp: unknown key "allowList" is ignored`, "mcp.serverCommand: not supported by toolbus; it is ignored"}}); !reflect.DeepEqual(f.MCP, want) {
		t.Errorf("mcp:\n got %+v\nwant %+v", f.MCP, want)
	}
	if got := serverNames(f); !slices.Equal(got, []string{"gh", "old"}) {
		t.Errorf("servers: got %q", got)
	}
	if s := f.MCPServers[0]; s.HTTPURL != "https://h/mcp" || s.Timeout != 1500*time.Millisecond || s.Problems != nil || s.Warnings != nil {
		t.Errorf("gh: %+v", s)
	}
	timeout, matcher := 1500.0, "run_shell_command"
	want := Hooks{Pre: []HookGroup{{Matcher: &matcher, Sequential: true, Hooks: []Hook{
		{Type: "command", Command: "./check.sh", Name: "check", Description: "d", Timeout: &timeout}}}},
		Others: []string{"BeforeModel", "PreToolUse"}, Disabled: []string{"off"}}
	if !reflect.DeepEqual(f.Hooks, want) {
		t.Errorf("hooks:\n got %+v\nwant %+v", f.Hooks, want)
	}
}

func serverNames(f *File) []string {
	var l []string
	for _, s := range f.MCPServers {
		l = append(l, s.Name)
	}
	return l
}

// TestFormatsReadTheirKeys: each format reads its agent's keys and no
// others, so a key another agent's file would carry cannot make a file
// not read.
func TestFormatsReadTheirKeys(t *testing.T) {
	data := `{"tools": 1, "mcp": 1, "mcpServers": {"s": {"command": "x"}}, "hooks": {"PreToolUse": [], "BeforeTool": 1},
	  "hooksConfig": {"enabled": false}, "disableAllHooks": true}`
	if _, err := Parse([]byte(data), "", GeminiSettings); err == nil {
		t.Error("Gemini CLI's settings read a tools key that is not an object")
	}
	c := mustParse(t, data, ClaudeSettings)
	if c.Hooks.Pre == nil || !c.Hooks.Off || !slices.Equal(c.Hooks.Others, []string{"BeforeTool"}) || c.MCPServers != nil {
		t.Errorf("Claude Code's settings: %+v", c)
	}
	if _, err := Parse([]byte(data), "", MCPConfig); err == nil {
		t.Error("an MCP configuration read an mcp key that is not an object")
	}
	m := mustParse(t, `{"tools": 1, "hooks": 1, "mcpServers": {"s": {"command": "x"}}}`, MCPConfig)
	if !slices.Equal(serverNames(m), []string{"s"}) || !reflect.DeepEqual(m.Hooks, Hooks{}) {
		t.Errorf("an MCP configuration: %+v", m)
	}
	if _, err := Parse([]byte(`{}`), "", Format(0)); err == nil {
		t.Error("format 0 read")
	}
}

func TestGeminiHooksTurnedOff(t *testing.T) {
	for data, off := range map[string]bool{
		`{"hooksConfig": {"enabled": false}, "hooks": {"BeforeTool": []}}`:                    true,
		`{"hooks": {"enabled": false}}`:                                                       true,
		`{"hooksConfig": {"enabled": false}, "hooks": {"enabled": true}}`:                     false,
		`{"hooksConfig": {"enabled": true, "disabled": ["a"]}, "hooks": {"disabled": ["b"]}}`: false,
		`{"hooksConfig": {"enabled": false}}`:                                                 true,
		`{"disableAllHooks": true, "hooks": {"BeforeTool": [{"hooks": [{"command": "x"}]}]}}`: false,
	} {
		if got := mustParse(t, data, GeminiSettings).Hooks.Off; got != off {
			t.Errorf("%s: got off %v, want %v", data, got, off)
		}
	}
	if got := mustParse(t, `{"hooksConfig": {"disabled": ["a"]}, "hooks": {"disabled": ["b"]}}`, GeminiSettings).Hooks.Disabled; !slices.Equal(got, []string{"b"}) {
		t.Errorf("hooks.disabled beside hooksConfig.disabled: got %q, want the one in hooks", got)
	}
}

func TestNullIsAbsent(t *testing.T) {
	f := mustParse(t, `{"tools": null, "mcp": null, "mcpServers": null, "hooks": null, "hooksConfig": null,
	  "coreTools": null, "toolDiscoveryCommand": null, "allowMCPServers": null}`, GeminiSettings)
	if !reflect.DeepEqual(f, &File{Path: "s.json", Format: GeminiSettings,
		Discovery: Discovery{DiscoveryKey: "tools.discoveryCommand", CallKey: "tools.callCommand"},
		MCP:       MCP{AllowedKey: "mcp.allowed", ExcludedKey: "mcp.excluded"}}) {
		t.Errorf("got %+v", f)
	}
}

// TestServerEntries: an entry's mistakes are its own and are all noted; a
// null value is a key not given; unknown keys are warnings.
func TestServerEntries(t *testing.T) {
	f := mustParse(t, `{"mcpServers": {
	  "bad": {"command": ["npx"], "args": ["a", null], "env": {"A": null}, "headers": [], "timeout": -1, "trust": "yes",
	    "includeTools": "a", "excludeTools": [1], "type": 1, "url": {}, "httpUrl": 2, "cwd": false, "description": 3},
	  "huge": {"command": "x", "timeout": 1e400},
	  "nulls": {"command": "x", "args": null, "env": null, "timeout": null, "trust": null, "autoApprove": null},
	  "npx": "npx",
	  "quiet": {"command": "x", "tcp": null, "oauth": {}, "authProviderType": 1, "targetAudience": "",
	    "targetServiceAccount": "", "extensionName": "", "autoApprove": ["t"], "Command": "y"}
	}}`, MCPConfig)
	byName := map[string]Server{}
	for _, s := range f.MCPServers {
		byName[s.Name] = s
	}
	want := []string{"args is not a list of strings", "command is not a string", "cwd is not a string", "description is not a string",
		"env is not an object of strings", "excludeTools is not a list of strings", "headers is not an object of strings",
		"httpUrl is not a string", "includeTools is not a list of strings", "timeout must be a positive number of milliseconds",
		"trust is not true or false", "type is not a string", "url is not a string"}
	if bad := byName["bad"]; !slices.Equal(bad.Problems, want) || bad.Command != "" || bad.Args != nil || bad.Timeout != 0 {
		t.Errorf("bad:\n got %q (%+v)\nwant %q", bad.Problems, bad, want)
	}
	if got := byName["huge"].Problems; !slices.Equal(got, []string{"timeout is not a number of milliseconds"}) {
		t.Errorf("huge: got %q", got)
	}
	if n := byName["nulls"]; n.Problems != nil || n.Warnings != nil || n.Command != "x" || n.Args != nil || n.Timeout != 0 {
		t.Errorf("nulls: %+v", n)
	}
	if n := byName["npx"]; !n.NotObject || !slices.Equal(n.Problems, []string{"the entry is not a JSON object"}) {
		t.Errorf("npx: %+v", n)
	}
	q := byName["quiet"]
	if !q.TCP || q.Problems != nil || !slices.Equal(q.Warnings, []string{`unknown key "Command" is ignored`, `unknown key "autoApprove" is ignored`}) || q.Command != "x" {
		t.Errorf("quiet: %+v", q)
	}
}

func TestServerExpand(t *testing.T) {
	s := Server{Name: "s", Command: "$BIN", Args: []string{"${HOME}/x", "$UNSET"}, Env: map[string]string{"T": "${TOKEN:-none}"},
		Cwd: "$HOME", URL: "$NOT_USED", HTTPURL: "${BASE}/mcp", Headers: map[string]string{"A": "Bearer $TOKEN"}}
	before := Server{Name: "s", Command: "$BIN", Args: slices.Clone(s.Args), Env: map[string]string{"T": "${TOKEN:-none}"},
		Cwd: "$HOME", URL: "$NOT_USED", HTTPURL: "${BASE}/mcp", Headers: map[string]string{"A": "Bearer $TOKEN"}}
	got, warnings := s.Expand(env(map[string]string{"BIN": "npx", "HOME": "/h", "BASE": "http://b"}))
	want := Server{Name: "s", Command: "npx", Args: []string{"/h/x", ""}, Env: map[string]string{"T": "none"},
		Cwd: "/h", URL: "$NOT_USED", HTTPURL: "http://b/mcp", Headers: map[string]string{"A": "Bearer "}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if w := []string{`args[1]: variable UNSET is not set; it expands to ""`, `headers.A: variable TOKEN is not set; it expands to ""`}; !slices.Equal(warnings, w) {
		t.Errorf("warnings: got %q, want %q", warnings, w)
	}
	if !reflect.DeepEqual(s, before) {
		t.Errorf("Expand changed its server: %+v", s)
	}
	if got, _ := (Server{URL: "${BASE}"}).Expand(env(map[string]string{"BASE": "http://b"})); got.URL != "http://b" {
		t.Errorf("url without httpUrl: got %q", got.URL)
	}
}

func TestRead(t *testing.T) {
	dir := t.TempDir()
	if f, err := Read("", ClaudeSettings); err != nil || !reflect.DeepEqual(f, &File{Format: ClaudeSettings}) {
		t.Errorf("no path: %+v, %v", f, err)
	}
	missing := filepath.Join(dir, "missing.json")
	if _, err := Read(missing, GeminiSettings); !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "settings: ") {
		t.Errorf("a missing file: got %v, want fs.ErrNotExist", err)
	}
	path := filepath.Join(dir, "settings.json")
	os.WriteFile(path, []byte("{\n\t\"tools\": {\"core\": \"read_file\"}}"), 0o644)
	if _, err := Read(path, GeminiSettings); err == nil || err.Error() != path+":2:20: tools.core is not a list of strings" {
		t.Errorf("got %v, want the path, line and column", err)
	}
	os.WriteFile(path, []byte(`{"tools": {"core": ["read_file"]}}`), 0o644)
	if f, err := Read(path, GeminiSettings); err != nil || f.Path != path || !slices.Equal(f.Tools.Core, []string{"read_file"}) {
		t.Errorf("got %+v, %v", f, err)
	}
}

// FuzzRead: no input, read as any format, panics; an error is an *Error
// at a place in the input; a File keeps the promises of its type.
func FuzzRead(f *testing.F) {
	for _, s := range []string{geminiSettings, `{}`, `null`, `[]`, ``, `{"mcpServers": 1}`, `{"tools": {"callEnv": [1]}}`,
		`{"mcpServers": {"": {"command": "x"}, "a b": {"url": "http://h", "args": [null], "timeout": 0.5}}}`,
		`{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "timeout": 1e400}]}], "X": 1}, "disableAllHooks": true}`,
		"{\"mcp\": {/* c */ \"allowed\": [\"s\"]}, // c\n \"allowMCPServers\": [\"t\"], \"toolCallCommand\": \" \"}",
		`{"tools": {"discoveryInterval": "1h", "aliases": {"0": "x"}}, "a": 1, "a": 2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, format := range []Format{GeminiSettings, ClaudeSettings, MCPConfig} {
			file, err := Parse(data, "f.json", format)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || e.Line < 1 || e.Column < 1 || e.Line > 1+strings.Count(string(data), "\n") || file != nil {
					t.Fatalf("%v: got %#v, %v", format, file, err)
				}
				continue
			}
			for i, s := range file.MCPServers {
				if i > 0 && file.MCPServers[i-1].Name >= s.Name {
					t.Fatalf("servers not sorted by unique name: %q then %q", file.MCPServers[i-1].Name, s.Name)
				}
				if s.Timeout < 0 || s.NotObject && len(s.Problems) != 1 {
					t.Fatalf("server %+v", s)
				}
				s.Expand(env(map[string]string{"X": "x"}))
			}
			if !slices.IsSorted(file.Hooks.Others) {
				t.Fatalf("other events not sorted: %q", file.Hooks.Others)
			}
		}
	})
}

// What toolbus reads and does not do is said, not silently dropped:
// tools.allowed (and the older allowedTools) would let a file in the
// project, which an agent can write, widen what runs without asking; a
// core entry's restriction in brackets is not held by the registry.
func TestToolsKeysNotHonouredAreSaid(t *testing.T) {
	for _, tt := range []struct {
		name, data string
		want       []string
	}{
		{"none", `{"tools": {"core": ["read_file"], "exclude": ["glob"]}}`, nil},
		{"tools.allowed", `{"tools": {"allowed": ["run_shell_command(git status)"]}}`, []string{"tools.allowed is not honoured"}},
		{"allowedTools", `{"allowedTools": ["write_file"]}`, []string{"allowedTools is not honoured"}},
		{"an empty tools.allowed is still said", `{"tools": {"allowed": []}}`, []string{"tools.allowed is not honoured"}},
		{"a core restriction", `{"coreTools": ["read_file", "run_shell_command(git)"]}`, []string{`coreTools entry "run_shell_command(git)": the registry makes the tool active and does not hold`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse([]byte(tt.data), "settings.json", GeminiSettings)
			if err != nil {
				t.Fatal(err)
			}
			if len(f.Tools.Ignored) != len(tt.want) {
				t.Fatalf("ignored %q, want %d saying %q", f.Tools.Ignored, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(f.Tools.Ignored[i], w) {
					t.Errorf("ignored[%d] = %q, want it to say %q", i, f.Tools.Ignored[i], w)
				}
			}
		})
	}
}

// A project's own files are read when no others are named; a named one
// wins, and a directory in a file's place is no file.
func TestProjectPaths(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, ".gemini"), 0o755)
	os.WriteFile(filepath.Join(dir, ".gemini", "settings.json"), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(dir, ".mcp.json"), []byte("{}"), 0o644)
	os.MkdirAll(filepath.Join(dir, ".claude", "settings.json"), 0o755)
	g, c, m := ProjectPaths(dir, "", "", "")
	if g != filepath.Join(dir, ".gemini", "settings.json") || c != "" || m != filepath.Join(dir, ".mcp.json") {
		t.Errorf("project paths: %q %q %q", g, c, m)
	}
	if g, _, m := ProjectPaths(dir, "other.json", "", "team.mcp.json"); g != "other.json" || m != "team.mcp.json" {
		t.Errorf("named paths: %q %q", g, m)
	}
}
