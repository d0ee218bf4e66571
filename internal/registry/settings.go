package registry

import (
	"fmt"
	"strings"

	"github.com/toolbus/toolbus/internal/settings"
)

// Settings are the registry's parts of a Gemini CLI settings.json
// (settings.Tools). A file written for Gemini CLI works unchanged: its
// other keys are ignored.
type Settings struct {
	// Core, when not empty, is the only built-in tools that are active
	// (tools.core; legacy coreTools). An entry may carry an argument
	// restriction, "run_shell_command(git)"; the registry uses the name, and
	// says the restriction is not held (Ignored): the policy judges calls.
	Core []string
	// Exclude lists tools that stay registered but inactive until enabled
	// at run time (tools.exclude; legacy excludeTools).
	Exclude []string
	// Aliases maps extra names to catalogue names (tools.aliases, a toolbus
	// extension).
	Aliases map[string]string
	// Ignored says what of the settings the registry reads and does not
	// do (settings.Tools.Ignored); the registry logs each when it starts.
	Ignored []string
}

// SettingsFrom is the registry's settings from a settings file's tools
// keys, validated.
func SettingsFrom(t settings.Tools) (Settings, error) {
	s := Settings{Core: t.Core, Exclude: t.Exclude, Aliases: t.Aliases, Ignored: t.Ignored}
	return s, s.Validate()
}

// Validate reports entries that can never match a tool.
func (s Settings) Validate() error {
	for _, c := range s.Core {
		if toolNameOf(c) == "" {
			return fmt.Errorf("tools.core: empty entry %q", c)
		}
	}
	for _, e := range s.Exclude {
		if strings.TrimSpace(e) == "" {
			return fmt.Errorf("tools.exclude: empty entry")
		}
	}
	for a, t := range s.Aliases {
		if a == "" || t == "" {
			return fmt.Errorf("tools.aliases: %q -> %q: both sides must be names", a, t)
		}
	}
	return nil
}

// toolNameOf is the tool name of a tools.core entry: "run_shell_command(git)"
// names run_shell_command.
func toolNameOf(entry string) string {
	name, _, _ := strings.Cut(entry, "(")
	return strings.TrimSpace(name)
}
