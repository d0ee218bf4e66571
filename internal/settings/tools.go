package settings

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Tools are the registry's keys of a Gemini CLI settings.json. A tools key
// that is empty gives way to the older top-level key Gemini CLI migrates
// to it.
type Tools struct {
	// Core (tools.core; older coreTools), when not empty, is the only
	// built-in tools that are active. An entry may carry an argument
	// restriction, "run_shell_command(git)".
	Core []string
	// Exclude (tools.exclude; older excludeTools) lists tools that stay
	// registered but inactive until enabled at run time.
	Exclude []string
	// Aliases (tools.aliases, a toolbus key) maps extra names to
	// catalogue names.
	Aliases map[string]string
	// Ignored says what of the tools keys toolbus reads and does not do,
	// and why: tools.allowed, and the argument restriction of a core
	// entry.
	Ignored []string
}

// Discovery are the keys of a Gemini CLI settings.json that configure the
// project's discovery command. A tools key wins over the older top-level
// key Gemini CLI migrates to it when both are given.
type Discovery struct {
	// DiscoveryCommand (tools.discoveryCommand; older
	// toolDiscoveryCommand) and CallCommand (tools.callCommand; older
	// toolCallCommand) are the commands as written; empty when not given.
	// A key given with nothing but spaces does not read.
	DiscoveryCommand, CallCommand string
	// DiscoveryKey and CallKey name the key each command was read from,
	// for messages: the tools key, or the older one when that was used.
	DiscoveryKey, CallKey string
	// Interval (tools.discoveryInterval), CacheTTL (tools.discoveryCacheTTL)
	// and IdleExpiry (tools.discoveredIdleExpiry) are Go duration strings
	// such as "10m" in the file; zero when not given.
	Interval, CacheTTL, IdleExpiry time.Duration
	// CallEnv (tools.callEnv) names environment variables the commands
	// get.
	CallEnv []string
}

// toolsJSON is the tools key of a Gemini CLI settings.json.
type toolsJSON struct {
	Core                 []string          `json:"core"`
	Exclude              []string          `json:"exclude"`
	Aliases              map[string]string `json:"aliases"`
	Allowed              jsontext.Value    `json:"allowed"`
	DiscoveryCommand     *command          `json:"discoveryCommand"`
	CallCommand          *command          `json:"callCommand"`
	DiscoveryInterval    duration          `json:"discoveryInterval"`
	DiscoveryCacheTTL    duration          `json:"discoveryCacheTTL"`
	DiscoveredIdleExpiry duration          `json:"discoveredIdleExpiry"`
	CallEnv              []string          `json:"callEnv"`
}

func (t toolsJSON) tools(g geminiJSON) Tools {
	core, coreKey := orOlder(t.Core, "tools.core", g.CoreTools, "coreTools")
	exclude, _ := orOlder(t.Exclude, "tools.exclude", g.ExcludeTools, "excludeTools")
	out := Tools{Core: core, Exclude: exclude, Aliases: t.Aliases}
	for _, allowed := range []struct {
		key string
		v   jsontext.Value
	}{{"tools.allowed", t.Allowed}, {"allowedTools", g.AllowedTools}} {
		if len(allowed.v) > 0 {
			out.Ignored = append(out.Ignored, allowed.key+" is not honoured: what runs without asking is the fleet policy's to say, "+
				"not a file in the project an agent can write; an ALLOW rule in the policy does it (policy/README.md)")
		}
	}
	for _, c := range core {
		if strings.Contains(c, "(") {
			out.Ignored = append(out.Ignored, fmt.Sprintf("%s entry %q: the registry makes the tool active and does not hold its calls to the restriction in brackets; "+
				"the policy judges each call (policy/README.md)", coreKey, c))
		}
	}
	return out
}

func (t toolsJSON) discovery(g geminiJSON) Discovery {
	d := Discovery{Interval: time.Duration(t.DiscoveryInterval), CacheTTL: time.Duration(t.DiscoveryCacheTTL),
		IdleExpiry: time.Duration(t.DiscoveredIdleExpiry), CallEnv: t.CallEnv}
	var discover, call *command
	discover, d.DiscoveryKey = pick(t.DiscoveryCommand, "tools.discoveryCommand", g.ToolDiscoveryCommand, "toolDiscoveryCommand")
	call, d.CallKey = pick(t.CallCommand, "tools.callCommand", g.ToolCallCommand, "toolCallCommand")
	if discover != nil {
		d.DiscoveryCommand = string(*discover)
	}
	if call != nil {
		d.CallCommand = string(*call)
	}
	return d
}

// command is a command line: a string with more than spaces in it, since
// an empty command is more likely a mistake than a way to say "none".
type command string

func (c *command) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	var s string
	if err := json.UnmarshalDecode(dec, &s); err != nil {
		return err
	}
	if strings.TrimSpace(s) == "" {
		return &valueError{" is empty: give a command, or remove the key"}
	}
	*c = command(s)
	return nil
}

// duration is a Go duration string, "10m" or "90s"; null is zero.
type duration time.Duration

func (d *duration) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	var s string
	switch v.Kind() {
	case 'n':
		*d = 0
		return nil
	case '"':
		if err := json.Unmarshal(v, &s, decodeOptions); err != nil {
			return err
		}
	default:
		return &valueError{`: want a duration string such as "10m" or "90s", got ` + string(v)}
	}
	p, err := time.ParseDuration(s)
	if err != nil {
		return &valueError{fmt.Sprintf(`: %q is not a duration (examples: "10m", "90s", "24h")`, s)}
	}
	*d = duration(p)
	return nil
}
