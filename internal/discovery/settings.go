package discovery

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/google/shlex"

	"github.com/toolbus/toolbus/internal/settings"
)

// Settings are the discovery parts of a Gemini CLI settings.json
// (settings.Discovery). A file written for Gemini CLI works unchanged; the
// keys of Gemini CLI are read as it reads them and the rest of the file is
// ignored.
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

// SettingsFrom is the discovery settings of a settings file's discovery
// keys, validated. The key names in Validate's errors are the tools ones;
// the error says which older key was read instead, when one was.
func SettingsFrom(d settings.Discovery) (Settings, error) {
	s := Settings{DiscoveryCommand: d.DiscoveryCommand, CallCommand: d.CallCommand,
		Interval: d.Interval, CacheTTL: d.CacheTTL, IdleExpiry: d.IdleExpiry, CallEnv: d.CallEnv}
	if err := s.Validate(); err != nil {
		discoveryKey, callKey := cmp.Or(d.DiscoveryKey, "tools.discoveryCommand"), cmp.Or(d.CallKey, "tools.callCommand")
		if discoveryKey != "tools.discoveryCommand" || callKey != "tools.callCommand" {
			err = fmt.Errorf("%w (read from %s and %s)", err, discoveryKey, callKey)
		}
		return Settings{}, err
	}
	return s, nil
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
