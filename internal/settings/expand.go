package settings

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Expand returns s with $VAR, ${VAR} and ${VAR:-default} expanded where
// the agents expand them: in the command, each of args, the env values,
// cwd, the URL the entry uses (httpUrl when given, else url) and the header
// values. getenv looks variables up; nil means os.Getenv. The warnings say what did not expand,
// each naming its key ("args[1]: variable TOKEN is not set; it expands to
// \"\""), in the order of those keys. s, and the File it came from, are
// not changed.
func (s Server) Expand(getenv func(string) string) (Server, []string) {
	if getenv == nil {
		getenv = os.Getenv
	}
	var warnings []string
	e := expander{getenv: getenv, warn: func(field, msg string) { warnings = append(warnings, field+": "+msg) }}
	s.Command = e.expand("command", s.Command)
	s.Args = slices.Clone(s.Args)
	for i, a := range s.Args {
		s.Args[i] = e.expand("args["+strconv.Itoa(i)+"]", a)
	}
	s.Env = maps.Clone(s.Env)
	for _, k := range sortedKeys(s.Env) {
		s.Env[k] = e.expand("env."+k, s.Env[k])
	}
	s.Cwd = e.expand("cwd", s.Cwd)
	if s.HTTPURL != "" {
		s.HTTPURL = e.expand("httpUrl", s.HTTPURL)
	} else {
		s.URL = e.expand("url", s.URL)
	}
	s.Headers = maps.Clone(s.Headers)
	for _, k := range sortedKeys(s.Headers) {
		s.Headers[k] = e.expand("headers."+k, s.Headers[k])
	}
	return s, warnings
}

// expander expands environment variables in the string values of one server
// entry and notes, as warnings, what it could not expand.
type expander struct {
	getenv func(string) string
	// warn is called with the field ("args[1]", "env.API_KEY") and what
	// went wrong there.
	warn func(field, msg string)
}

// expand replaces $VAR, ${VAR} and ${VAR:-default} in s, the forms Gemini
// CLI ($VAR, ${VAR}) and Claude Code (${VAR}, ${VAR:-default}) document
// between them. A variable counts as unset when getenv gives "": the
// default replaces it, as in the shell's ":-", and without a default it
// expands to "" with a warning naming it, since a server started with an
// empty token is a confusing failure far from its cause.
//
// Anything else stays as it is: a "$" not followed by a name ("$1", "$$",
// a trailing "$"), and a "${...}" that is not one of the forms above, such
// as "${VAR-x}" or "${}" (with a warning, since its writer meant something).
// The default is the literal text up to the first "}": defaults do not nest,
// and a variable's value is not expanded again.
func (e expander) expand(field, s string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			i++
			continue
		}
		if s[i+1] == '{' {
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				e.warn(field, "an unterminated \"${\" is left as it is")
				b.WriteString(s[i:])
				break
			}
			whole := s[i : i+2+end+1]
			name, def, hasDef := strings.Cut(s[i+2:i+2+end], ":-")
			i += len(whole)
			if !validVarName(name) {
				e.warn(field, strconv.Quote(whole)+" is not $VAR, ${VAR} or ${VAR:-default}; it is left as it is")
				b.WriteString(whole)
				continue
			}
			b.WriteString(e.lookup(field, name, def, hasDef))
			continue
		}
		if !isNameStart(s[i+1]) {
			b.WriteByte('$')
			i++
			continue
		}
		j := i + 2
		for j < len(s) && isNameChar(s[j]) {
			j++
		}
		b.WriteString(e.lookup(field, s[i+1:j], "", false))
		i = j
	}
	return b.String()
}

func (e expander) lookup(field, name, def string, hasDef bool) string {
	if v := e.getenv(name); v != "" {
		return v
	}
	if hasDef {
		return def
	}
	e.warn(field, "variable "+name+" is not set; it expands to \"\"")
	return ""
}

func validVarName(s string) bool {
	if s == "" || !isNameStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isNameChar(s[i]) {
			return false
		}
	}
	return true
}

func isNameStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isNameChar(c byte) bool {
	return isNameStart(c) || c >= '0' && c <= '9'
}
