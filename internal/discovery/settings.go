package discovery

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/google/shlex"

	"github.com/toolbus/toolbus/internal/jsonc"
)

// Settings are the discovery parts of a Gemini CLI settings.json. A file
// written for Gemini CLI works unchanged; the keys of Gemini CLI are read
// as it reads them and the rest of the file is ignored.
//
//	{"tools": {
//	  "discoveryCommand": "sh tools/discover.sh",  // legacy: top-level toolDiscoveryCommand
//	  "callCommand": "sh tools/call.sh",            // legacy: top-level toolCallCommand
//	  "discoveryInterval": "10m",                   // toolbus extensions, below
//	  "discoveryCacheTTL": "1m",
//	  "discoveredIdleExpiry": "24h",
//	  "callEnv": ["GOPATH", "NODE_OPTIONS"]
//	}}
type Settings struct {
	// DiscoveryCommand (tools.discoveryCommand, legacy toolDiscoveryCommand)
	// prints the declarations of the project's tools as a JSON array. It
	// is split as a shell would split it (github.com/google/shlex: quotes,
	// backslashes, # comments) and run without a shell: a pipe, &&, $VAR
	// or a glob in it is passed on as a plain argument.
	DiscoveryCommand string
	// CallCommand (tools.callCommand, legacy toolCallCommand) runs one call:
	// split the same way, with the tool's name appended as its last
	// argument and the arguments as JSON on its stdin.
	CallCommand string
	// Interval (tools.discoveryInterval, a Go duration such as "10m")
	// re-runs the discovery that often; zero, the default, never: the
	// tools are discovered at start, when the settings change and when
	// asked (toolbus tools discover).
	Interval time.Duration
	// CacheTTL (tools.discoveryCacheTTL) is how long a discovery's result
	// is used again instead of running the command (seed 000
	// CachedToolRegistry): a re-discovery within it, by the interval or by
	// a request that does not force one, takes the cached result. Zero,
	// the default, caches nothing.
	CacheTTL time.Duration
	// IdleExpiry (tools.discoveredIdleExpiry) drops a discovered tool that
	// was not called for that long from the catalogue (seed 000
	// ManagedToolRegistry); the next discovery brings it back. Zero, the
	// default, keeps every tool.
	IdleExpiry time.Duration
	// CallEnv (tools.callEnv) names environment variables of the executor
	// that both commands get on top of the harmless ones (see
	// FilterEnv): nothing else of the executor's environment, its
	// credentials above all, reaches them.
	CallEnv []string
}

// MinInterval is the shortest discoveryInterval a settings file may set:
// a discovery spawns a process and replaces a set in the catalogue.
const MinInterval = time.Second

// Configured reports whether the settings name a discovery command.
func (s *Settings) Configured() bool { return s.DiscoveryCommand != "" }

// settingsFile is the subset of settings.json read here. Pointers tell a
// key that is absent from one that is present but empty.
type settingsFile struct {
	Tools struct {
		DiscoveryCommand     *string         `json:"discoveryCommand"`
		CallCommand          *string         `json:"callCommand"`
		DiscoveryInterval    json.RawMessage `json:"discoveryInterval"`
		DiscoveryCacheTTL    json.RawMessage `json:"discoveryCacheTTL"`
		DiscoveredIdleExpiry json.RawMessage `json:"discoveredIdleExpiry"`
		CallEnv              []string        `json:"callEnv"`
	} `json:"tools"`
	ToolDiscoveryCommand *string `json:"toolDiscoveryCommand"`
	ToolCallCommand      *string `json:"toolCallCommand"`
}

// LoadSettings reads the discovery settings of a settings.json (comments
// allowed, as Gemini CLI allows them). An empty path gives empty Settings:
// no discovery.
func LoadSettings(path string) (Settings, error) {
	if path == "" {
		return Settings{}, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Settings{}, fmt.Errorf("settings: %w", err)
	}
	s, err := ParseSettings(data)
	if err != nil {
		return Settings{}, fmt.Errorf("settings %s: %w", path, err)
	}
	return s, nil
}

// ParseSettings reads the discovery settings of the contents of a
// settings.json and validates them. A tools key wins over its legacy
// top-level name when both are given.
func ParseSettings(data []byte) (Settings, error) {
	var f settingsFile
	if err := json.Unmarshal(jsonc.StripComments(data), &f); err != nil {
		return Settings{}, err
	}
	var s Settings
	var errs []error
	discovery, discoveryKey := pick(f.Tools.DiscoveryCommand, "tools.discoveryCommand", f.ToolDiscoveryCommand, "toolDiscoveryCommand")
	call, callKey := pick(f.Tools.CallCommand, "tools.callCommand", f.ToolCallCommand, "toolCallCommand")
	for _, c := range []struct {
		value *string
		key   string
		into  *string
	}{{discovery, discoveryKey, &s.DiscoveryCommand}, {call, callKey, &s.CallCommand}} {
		if c.value == nil {
			continue
		}
		if strings.TrimSpace(*c.value) == "" {
			errs = append(errs, fmt.Errorf("%s is empty: give a command, or remove the key", c.key))
			continue
		}
		*c.into = *c.value
	}
	for _, d := range []struct {
		raw  json.RawMessage
		key  string
		into *time.Duration
	}{{f.Tools.DiscoveryInterval, "tools.discoveryInterval", &s.Interval}, {f.Tools.DiscoveryCacheTTL, "tools.discoveryCacheTTL", &s.CacheTTL},
		{f.Tools.DiscoveredIdleExpiry, "tools.discoveredIdleExpiry", &s.IdleExpiry}} {
		v, err := duration(d.raw, d.key)
		if err != nil {
			errs = append(errs, err)
		}
		*d.into = v
	}
	s.CallEnv = f.Tools.CallEnv
	if err := errors.Join(errs...); err != nil {
		return Settings{}, err
	}
	// The key names in Validate's errors are the tools ones; say which
	// legacy key was meant when one was used.
	if err := s.Validate(); err != nil {
		if discoveryKey != "tools.discoveryCommand" || callKey != "tools.callCommand" {
			err = fmt.Errorf("%w (read from %s and %s)", err, discoveryKey, callKey)
		}
		return Settings{}, err
	}
	return s, nil
}

// pick is the value of a tools key, else of its legacy name, and the key
// it came from.
func pick(v *string, key string, legacy *string, legacyKey string) (*string, string) {
	if v == nil && legacy != nil {
		return legacy, legacyKey
	}
	return v, key
}

// duration reads a Go duration string; absent or null is zero.
func duration(raw json.RawMessage, key string) (time.Duration, error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("%s: want a duration string such as \"10m\" or \"90s\", got %s", key, raw)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration (examples: \"10m\", \"90s\", \"24h\")", key, s)
	}
	return d, nil
}

// Validate reports settings that cannot work, naming the key: a command
// that does not split into words, one command without the other, a
// negative or too short duration, a callEnv entry that is not a
// variable name.
func (s *Settings) Validate() error {
	var errs []error
	if s.DiscoveryCommand != "" || s.CallCommand != "" {
		if s.DiscoveryCommand == "" {
			errs = append(errs, errors.New("tools.callCommand is set without tools.discoveryCommand: there would be no tools to call"))
		}
		if s.CallCommand == "" {
			errs = append(errs, errors.New("tools.discoveryCommand is set without tools.callCommand: its tools could not be called"))
		}
	}
	for _, c := range []struct{ key, line string }{{"tools.discoveryCommand", s.DiscoveryCommand}, {"tools.callCommand", s.CallCommand}} {
		if c.line == "" {
			continue
		}
		if _, err := SplitCommand(c.line); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.key, err))
		}
	}
	switch {
	case s.Interval < 0:
		errs = append(errs, fmt.Errorf("tools.discoveryInterval is negative (%s)", s.Interval))
	case s.Interval > 0 && s.Interval < MinInterval:
		errs = append(errs, fmt.Errorf("tools.discoveryInterval is %s; the shortest is %s", s.Interval, MinInterval))
	}
	if s.CacheTTL < 0 {
		errs = append(errs, fmt.Errorf("tools.discoveryCacheTTL is negative (%s)", s.CacheTTL))
	}
	if s.IdleExpiry < 0 {
		errs = append(errs, fmt.Errorf("tools.discoveredIdleExpiry is negative (%s)", s.IdleExpiry))
	}
	for _, name := range s.CallEnv {
		if !validEnvName(name) {
			errs = append(errs, fmt.Errorf("tools.callEnv: %q is not an environment variable name (letters, digits and _, not starting with a digit; no patterns)", name))
		}
	}
	return errors.Join(errs...)
}

// SplitCommand splits a command line into its words as a POSIX shell
// would (quotes, backslash escapes, # comments), with nothing expanded.
func SplitCommand(line string) ([]string, error) {
	words, err := shlex.Split(line)
	if err != nil {
		return nil, fmt.Errorf("%q does not split into words: %v", line, err)
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("%q has no command in it", line)
	}
	return words, nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
