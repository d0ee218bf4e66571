package registry

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/toolbus/toolbus/internal/jsonc"
)

// Settings are the registry's parts of a Gemini CLI settings.json. A file
// written for Gemini CLI works unchanged: its other keys are ignored.
type Settings struct {
	// Core, when not empty, is the only built-in tools that are active
	// (tools.core; legacy coreTools). An entry may carry an argument
	// restriction, "run_shell_command(git)"; the registry uses the name, the
	// restriction is the policy's business.
	Core []string
	// Exclude lists tools that stay registered but inactive until enabled
	// at run time (tools.exclude; legacy excludeTools).
	Exclude []string
	// Aliases maps extra names to catalogue names (tools.aliases, a toolbus
	// extension).
	Aliases map[string]string
}

// settingsFile is the subset of settings.json read here.
type settingsFile struct {
	Tools struct {
		Core    []string          `json:"core"`
		Exclude []string          `json:"exclude"`
		Aliases map[string]string `json:"aliases"`
	} `json:"tools"`
	CoreTools    []string `json:"coreTools"`
	ExcludeTools []string `json:"excludeTools"`
}

// LoadSettings reads a Gemini CLI settings.json (comments allowed, as Gemini
// CLI allows them). A missing path is an error; an empty path gives empty
// Settings.
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

// ParseSettings parses the contents of a settings.json.
func ParseSettings(data []byte) (Settings, error) {
	var f settingsFile
	if err := json.Unmarshal(jsonc.StripComments(data), &f); err != nil {
		return Settings{}, err
	}
	s := Settings{Core: f.Tools.Core, Exclude: f.Tools.Exclude, Aliases: f.Tools.Aliases}
	if len(s.Core) == 0 {
		s.Core = f.CoreTools
	}
	if len(s.Exclude) == 0 {
		s.Exclude = f.ExcludeTools
	}
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
