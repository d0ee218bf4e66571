package discovery

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/settings"
)

func TestParseSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, file string
		want       Settings
	}{
		{"none", `{"mcpServers": {}}`, Settings{}},
		{"gemini keys, with comments", `{
			// the project's tools
			"tools": {"discoveryCommand": "sh tools/discover.sh", /* and */ "callCommand": "sh tools/call.sh", "core": ["read_file"]}}`,
			Settings{DiscoveryCommand: "sh tools/discover.sh", CallCommand: "sh tools/call.sh"}},
		{"legacy keys", `{"toolDiscoveryCommand": "./discover", "toolCallCommand": "./call"}`,
			Settings{DiscoveryCommand: "./discover", CallCommand: "./call"}},
		{"tools keys win over legacy ones", `{"toolDiscoveryCommand": "old", "toolCallCommand": "old-call", "tools": {"discoveryCommand": "new", "callCommand": "new-call"}}`,
			Settings{DiscoveryCommand: "new", CallCommand: "new-call"}},
		{"toolbus extensions", `{"tools": {"discoveryCommand": "d", "callCommand": "c", "discoveryInterval": "10m", "discoveryCacheTTL": "90s",
			"discoveredIdleExpiry": "24h", "callEnv": ["GOPATH", "NODE_OPTIONS"]}}`,
			Settings{DiscoveryCommand: "d", CallCommand: "c", Interval: 10 * time.Minute, CacheTTL: 90 * time.Second, IdleExpiry: 24 * time.Hour,
				CallEnv: []string{"GOPATH", "NODE_OPTIONS"}}},
		{"null is absent", `{"tools": {"discoveryCommand": null, "discoveryInterval": null}}`, Settings{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseSettings([]byte(c.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParseSettingsErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, file, want string }{
		{"empty discovery command", `{"tools": {"discoveryCommand": "", "callCommand": "c"}}`, "tools.discoveryCommand is empty"},
		{"blank call command", `{"tools": {"discoveryCommand": "d", "callCommand": "  \t"}}`, "tools.callCommand is empty"},
		{"empty legacy command", `{"toolDiscoveryCommand": "", "toolCallCommand": "c"}`, "toolDiscoveryCommand is empty"},
		{"unterminated quote", `{"tools": {"discoveryCommand": "sh 'discover.sh", "callCommand": "c"}}`, "tools.discoveryCommand: \"sh 'discover.sh\" does not split into words"},
		{"trailing backslash", `{"tools": {"discoveryCommand": "d", "callCommand": "call\\"}}`, "tools.callCommand:"},
		{"only a comment", `{"tools": {"discoveryCommand": "# nothing", "callCommand": "c"}}`, "tools.discoveryCommand: \"# nothing\" has no command in it"},
		{"call without discovery", `{"tools": {"callCommand": "c"}}`, "tools.callCommand is set without tools.discoveryCommand"},
		{"discovery without call", `{"tools": {"discoveryCommand": "d"}}`, "tools.discoveryCommand is set without tools.callCommand"},
		{"legacy discovery without call", `{"toolDiscoveryCommand": "d"}`, "set without tools.callCommand"},
		{"interval not a string", `{"tools": {"discoveryCommand": "d", "callCommand": "c", "discoveryInterval": 600}}`, "tools.discoveryInterval: want a duration string"},
		{"interval not a duration", `{"tools": {"discoveryCommand": "d", "callCommand": "c", "discoveryInterval": "often"}}`, "tools.discoveryInterval: \"often\" is not a duration"},
		{"interval too short", `{"tools": {"discoveryCommand": "d", "callCommand": "c", "discoveryInterval": "10ms"}}`, "the shortest is 1s"},
		{"negative ttl", `{"tools": {"discoveryCommand": "d", "callCommand": "c", "discoveryCacheTTL": "-1m"}}`, "tools.discoveryCacheTTL is negative"},
		{"negative expiry", `{"tools": {"discoveryCommand": "d", "callCommand": "c", "discoveredIdleExpiry": "-1h"}}`, "tools.discoveredIdleExpiry is negative"},
		{"callEnv pattern", `{"tools": {"discoveryCommand": "d", "callCommand": "c", "callEnv": ["NATS_*"]}}`, `tools.callEnv: "NATS_*" is not an environment variable name`},
		{"callEnv with =", `{"tools": {"discoveryCommand": "d", "callCommand": "c", "callEnv": ["A=B"]}}`, `"A=B" is not an environment variable name`},
		{"not JSON", `{"tools": `, "unexpected end of JSON input"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseSettings([]byte(c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestLoadSettings(t *testing.T) {
	t.Parallel()
	if s, err := loadSettings(""); err != nil || s.Configured() {
		t.Errorf("no path: %+v, %v", s, err)
	}
	path := filepath.Join(t.TempDir(), "settings.json")
	if _, err := loadSettings(path); err == nil {
		t.Error("a missing file loaded")
	}
	os.WriteFile(path, []byte(`{"tools": {"discoveryCommand": "", "callCommand": "c"}}`), 0o644)
	if _, err := loadSettings(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "tools.discoveryCommand is empty") {
		t.Errorf("got %v, want the path and the key", err)
	}
}

// parseSettings reads the discovery settings of a settings.json's
// contents, as an executor does.
func parseSettings(data []byte) (Settings, error) {
	f, err := settings.Parse(data, "", settings.GeminiSettings)
	if err != nil {
		return Settings{}, err
	}
	return SettingsFrom(f.Discovery)
}

// loadSettings reads the discovery settings of the settings.json at path,
// as an executor does.
func loadSettings(path string) (Settings, error) {
	f, err := settings.Read(path, settings.GeminiSettings)
	if err != nil {
		return Settings{}, err
	}
	return SettingsFrom(f.Discovery)
}

func TestSplitCommand(t *testing.T) {
	t.Parallel()
	for line, want := range map[string][]string{
		`sh tools/discover.sh`:                {"sh", "tools/discover.sh"},
		`python3 "my tools.py" --list`:        {"python3", "my tools.py", "--list"},
		`node 'a b' c\ d`:                     {"node", "a b", "c d"},
		`./call && rm -rf / # no shell here`:  {"./call", "&&", "rm", "-rf", "/"},
		`echo $HOME "$(id)" *.go`:             {"echo", "$HOME", "$(id)", "*.go"},
		"  go run ./cmd/tools  \n":            {"go", "run", "./cmd/tools"},
		`sh -c 'echo "quoted"; exit 3'`:       {"sh", "-c", `echo "quoted"; exit 3`},
		`'/opt/my tools/bin/discover' --json`: {"/opt/my tools/bin/discover", "--json"},
		`"" empty-first-word-is-still-a-word`: {"", "empty-first-word-is-still-a-word"},
	} {
		got, err := SplitCommand(line)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", line, got, err, want)
		}
	}
}
