package discovery

import (
	"slices"
	"strings"
)

// The environment of the discovery and call commands is an allowlist, not
// a denylist: the executor's environment holds its NATS credentials
// (NATS_*, TOOLBUS_*), cloud and API tokens and whatever else the process
// that started it had, and a name-based denylist would miss the next
// secret (GH_PAT, OPENAI_API_KEY, a DATABASE_URL with a password in it).
// A discovered tool is the project's own code, asked to run by a model: it
// gets what a program needs to run and speak the user's language —
// harmlessEnv and every LC_* variable — and the variables its settings
// name in tools.callEnv, exactly by name.
var harmlessEnv = []string{"HOME", "LANG", "LANGUAGE", "LOGNAME", "PATH", "SHELL", "TERM", "TMPDIR", "TZ", "USER"}

// FilterEnv returns the variables of environ (as os.Environ gives them)
// that the commands may see: those named in harmlessEnv, those starting
// with LC_, and those named in pass. The result is never nil, so that it
// is never taken for "the caller's environment".
func FilterEnv(environ, pass []string) []string {
	out := make([]string, 0, len(harmlessEnv)+len(pass)+4)
	for _, kv := range environ {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			continue
		}
		if strings.HasPrefix(name, "LC_") || slices.Contains(harmlessEnv, name) || slices.Contains(pass, name) {
			out = append(out, kv)
		}
	}
	return out
}

// lookEnv is the value of name in env, as the command will see it.
func lookEnv(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- { // the last one wins, as in exec
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}
