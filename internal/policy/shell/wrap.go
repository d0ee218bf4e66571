package shell

import (
	"path"
	"strings"
)

// Wrappers are commands that run another command given in their
// arguments. Each is looked through by its own option grammar, so that
// `exec -a ls touch P` is judged as touch and `xargs -E ls touch P` as
// touch; an option a grammar does not know makes the line opaque.

// optArg says whether an option takes a value.
type optArg int

const (
	noValue       optArg = iota
	needsValue           // -o VALUE, -oVALUE, --opt=VALUE, --opt VALUE
	optionalValue        // -oVALUE, --opt=VALUE only
	runsNothing          // the wrapper then runs no command (command -v, sudo -l)
	notModelled          // the analyser does not follow what it does (sudo -e)
)

// grammar is a wrapper's command line.
type grammar struct {
	short map[byte]optArg
	long  map[string]optArg
	// assigns: NAME=VALUE words may come before the command (env, sudo).
	assigns bool
	// numeric: -NUMBER is an option (nice -10).
	numeric bool
	// operand: the first operand is not the command (timeout DURATION).
	operand bool
	// defaultCommand runs when no command is given (xargs runs echo).
	defaultCommand string
}

func shorts(spec map[optArg]string) map[byte]optArg {
	m := map[byte]optArg{}
	for kind, letters := range spec {
		for i := 0; i < len(letters); i++ {
			m[letters[i]] = kind
		}
	}
	return m
}

var wrappers = map[string]grammar{
	"exec":    {short: shorts(map[optArg]string{noValue: "cl", needsValue: "a"})},
	"command": {short: shorts(map[optArg]string{noValue: "p", runsNothing: "vV"})},
	"builtin": {},
	"nohup":   {long: map[string]optArg{"help": runsNothing, "version": runsNothing}},
	"nice": {short: shorts(map[optArg]string{needsValue: "n"}), numeric: true,
		long: map[string]optArg{"adjustment": needsValue, "help": runsNothing, "version": runsNothing}},
	"ionice": {short: shorts(map[optArg]string{noValue: "t", needsValue: "cn", runsNothing: "pPuh"}),
		long: map[string]optArg{"class": needsValue, "classdata": needsValue, "ignore": noValue, "help": runsNothing, "version": runsNothing}},
	"timeout": {short: shorts(map[optArg]string{noValue: "fpv", needsValue: "ks"}), operand: true,
		long: map[string]optArg{"foreground": noValue, "kill-after": needsValue, "preserve-status": noValue, "signal": needsValue,
			"verbose": noValue, "help": runsNothing, "version": runsNothing}},
	"stdbuf": {short: shorts(map[optArg]string{needsValue: "ioe"}),
		long: map[string]optArg{"input": needsValue, "output": needsValue, "error": needsValue, "help": runsNothing, "version": runsNothing}},
	"env": {short: shorts(map[optArg]string{noValue: "i0v", needsValue: "uCSa"}), assigns: true,
		long: map[string]optArg{"ignore-environment": noValue, "null": noValue, "unset": needsValue, "chdir": needsValue,
			"split-string": needsValue, "argv0": needsValue, "debug": noValue, "block-signal": optionalValue,
			"default-signal": optionalValue, "ignore-signal": optionalValue, "list-signal-handling": runsNothing,
			"help": runsNothing, "version": runsNothing}},
	"sudo": {short: shorts(map[optArg]string{noValue: "ABbEHnPSis", needsValue: "CDgpRrTtUu", runsNothing: "KklVv", notModelled: "eh"}), assigns: true,
		long: map[string]optArg{"askpass": noValue, "background": noValue, "bell": noValue, "close-from": needsValue, "chdir": needsValue,
			"preserve-env": optionalValue, "edit": notModelled, "group": needsValue, "set-home": noValue, "help": runsNothing,
			"host": needsValue, "login": noValue, "remove-timestamp": runsNothing, "reset-timestamp": runsNothing, "list": runsNothing,
			"non-interactive": noValue, "preserve-groups": noValue, "prompt": needsValue, "chroot": needsValue, "role": needsValue,
			"stdin": noValue, "shell": noValue, "type": needsValue, "command-timeout": needsValue, "other-user": needsValue,
			"user": needsValue, "version": runsNothing, "validate": runsNothing}},
	"doas": {short: shorts(map[optArg]string{noValue: "ns", needsValue: "Cu", runsNothing: "L"})},
	"xargs": {short: shorts(map[optArg]string{noValue: "0oprtx", needsValue: "adEILnPs", optionalValue: "eil"}), defaultCommand: "echo",
		long: map[string]optArg{"null": noValue, "arg-file": needsValue, "delimiter": needsValue, "eof": optionalValue, "replace": optionalValue,
			"max-lines": optionalValue, "max-args": needsValue, "max-procs": needsValue, "open-tty": noValue, "interactive": noValue,
			"process-slot-var": needsValue, "no-run-if-empty": noValue, "max-chars": needsValue, "show-limits": noValue,
			"verbose": noValue, "exit": noValue, "help": runsNothing, "version": runsNothing}},
	"busybox": {long: map[string]optArg{"list": runsNothing, "list-full": runsNothing, "install": runsNothing, "help": runsNothing}},
	"time": {short: shorts(map[optArg]string{noValue: "apqvV", needsValue: "fo"}),
		long: map[string]optArg{"format": needsValue, "output": needsValue, "append": noValue, "portability": noValue,
			"verbose": noValue, "quiet": noValue, "help": runsNothing, "version": runsNothing}},
}

// shellBuiltins are the wrappers that are bash's own: only bash, at the
// start of a command, reads them so; anything else looks for a program of
// that name.
var shellBuiltins = map[string]bool{"exec": true, "command": true, "builtin": true}

// option is one option a wrapper was given.
type option struct {
	name  string // "a", "split-string"
	value string
}

// unwrap looks through the wrappers at the start of c.Words and sets the
// command that runs: Name, Argv, Args, Wrappers.
func (a *analyzer) unwrap(c *Command) {
	argv := c.Words
	external := false // a program runs what follows: no builtin is there
	for len(argv) > 0 {
		name := path.Base(argv[0])
		g, ok := wrappers[name]
		if !ok || !systemProgram(argv[0]) {
			break // ./env is whatever the workspace holds, not env
		}
		if shellBuiltins[name] && (external || argv[0] != name) {
			// Past env, nice, sudo..., or given by path, exec is the
			// program of that name, not bash's exec: env -S 'exec -a
			// ls touch P' runs a program called exec, not ls.
			break
		}
		external = external || !shellBuiltins[name]
		opts, rest, stop := a.options(name, g, argv[1:])
		if stop != "" {
			if stop != "nothing" {
				a.opaque(stop)
			}
			break // the wrapper is the command
		}
		c.Wrappers = append(c.Wrappers, name)
		for _, o := range opts {
			switch {
			case name == "env" && (o.name == "S" || o.name == "split-string"):
				words, ok := splitEnvString(o.value)
				if !ok {
					a.opaque("env -S with quotes, escapes or variables")
				}
				rest = append(words, rest...)
			case name == "env" && (o.name == "C" || o.name == "chdir"),
				name == "sudo" && (o.name == "D" || o.name == "chdir"):
				a.s.dirs = append(a.s.dirs, o.value)
			case name == "xargs" && (o.name == "I" || o.name == "i" || o.name == "replace"):
				a.opaque("xargs -I puts what it reads inside the arguments")
			case name == "sudo" && (o.name == "R" || o.name == "chroot"):
				a.opaque("sudo --chroot")
			case name == "time" && (o.name == "o" || o.name == "output"):
				a.opaque("time -o writes a file")
			}
		}
		if g.assigns {
			for len(rest) > 0 && isAssignment(rest[0]) {
				a.opaque("a variable set for the command")
				rest = rest[1:]
			}
		}
		if g.operand && len(rest) > 0 {
			rest = rest[1:]
		}
		if name == "xargs" {
			c.MoreArgs = true
			if len(rest) == 0 {
				rest = []string{g.defaultCommand}
			}
		}
		if name == "sudo" && len(rest) == 0 {
			a.opaque("sudo starts a shell")
		}
		argv = rest
	}
	if len(argv) == 0 {
		// A wrapper with no command (`env`, `nice`): it is the command.
		argv = c.Words
		c.Wrappers = c.Wrappers[:0]
	}
	c.Argv = argv
	c.Name = path.Base(argv[0])
	c.Args = argv[1:]
	if c.Args == nil {
		c.Args = []string{}
	}
}

// options reads a wrapper's options by its grammar. stop is set when the
// wrapper is itself the command: "nothing" when it runs none (command -v),
// or the reason the line is opaque.
func (a *analyzer) options(name string, g grammar, args []string) (opts []option, rest []string, stop string) {
	for len(args) > 0 {
		w := args[0]
		switch {
		case w == "--":
			return opts, args[1:], ""
		case name == "env" && w == "-":
			opts = append(opts, option{name: "i"})
			args = args[1:]
			continue
		case len(w) < 2 || w[0] != '-':
			return opts, args, ""
		case g.numeric && isNumber(w[1:]):
			args = args[1:]
			continue
		case strings.HasPrefix(w, "--"):
			long, value, hasValue := strings.Cut(w[2:], "=")
			full, kind, ok := matchLong(g.long, long)
			if !ok {
				return nil, nil, "the option " + w + " of " + name + " is not modelled"
			}
			switch kind {
			case runsNothing:
				return nil, nil, "nothing"
			case notModelled:
				return nil, nil, "the option " + w + " of " + name + " is not modelled"
			case needsValue:
				if !hasValue {
					if len(args) < 2 {
						return nil, nil, name + " " + w + " lacks its value"
					}
					value, args = args[1], args[1:]
				}
			case noValue:
				if hasValue {
					return nil, nil, name + " " + w + " takes no value"
				}
			}
			opts = append(opts, option{name: full, value: value})
			args = args[1:]
			continue
		}
		// A cluster of short options: -abc, -n5, -n 5.
		cluster := w[1:]
		args = args[1:]
		for i := 0; i < len(cluster); i++ {
			kind, ok := g.short[cluster[i]]
			if !ok {
				return nil, nil, "the option -" + cluster[i:i+1] + " of " + name + " is not modelled"
			}
			o := option{name: cluster[i : i+1]}
			switch kind {
			case runsNothing:
				return nil, nil, "nothing"
			case notModelled:
				return nil, nil, "the option -" + o.name + " of " + name + " is not modelled"
			case needsValue:
				if i+1 < len(cluster) {
					o.value = cluster[i+1:]
				} else if len(args) > 0 {
					o.value, args = args[0], args[1:]
				} else {
					return nil, nil, name + " -" + o.name + " lacks its value"
				}
				i = len(cluster)
			case optionalValue:
				o.value = cluster[i+1:]
				i = len(cluster)
			}
			opts = append(opts, o)
		}
	}
	return opts, args, ""
}

// matchLong finds a long option by its name or, as getopt_long does, by
// an unambiguous prefix of it (`env --split=...` is --split-string).
func matchLong(long map[string]optArg, name string) (string, optArg, bool) {
	if kind, ok := long[name]; ok {
		return name, kind, true
	}
	found, kind := "", optArg(0)
	for full, k := range long {
		if name != "" && strings.HasPrefix(full, name) {
			if found != "" {
				return "", 0, false // ambiguous
			}
			found, kind = full, k
		}
	}
	return found, kind, found != ""
}

// systemProgram reports whether w names a program found through PATH or
// in a system directory, where a wrapper's name means that wrapper.
func systemProgram(w string) bool {
	switch path.Dir(w) {
	case ".":
		return !strings.Contains(w, "/")
	case "/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin":
		return true
	}
	return false
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isAssignment reports whether w is NAME=VALUE.
func isAssignment(w string) bool {
	name, _, ok := strings.Cut(w, "=")
	if !ok || name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// splitEnvString splits env -S's string into words. Only plain words
// separated by blanks are followed; quotes, escapes, ${VAR} and # have
// env's own meaning there, so ok is false for them.
func splitEnvString(s string) ([]string, bool) {
	if strings.ContainsAny(s, `'"\$#`) {
		return strings.Fields(s), false
	}
	return strings.Fields(s), true
}

// Shells whose -c script the analyser reads as bash.
var shells = map[string]bool{"sh": true, "bash": true, "rbash": true, "dash": true, "ash": true, "ksh": true, "mksh": true,
	"zsh": true, "yash": true, "posh": true, "fish": true, "csh": true, "tcsh": true}

func isShell(name string) bool { return shells[name] }

// How a shell gets its script.
type scriptMode int

const (
	scriptStdin   scriptMode = iota // no operand: standard input
	scriptArg                       // -c SCRIPT
	scriptFile                      // an operand names a script file
	scriptUnknown                   // options the analyser does not follow
)

// shellScript reads a shell's arguments as bash reads its own: option
// clusters (-xc, -lc, +x), -o NAME and -O NAME (and +o, +O) with their
// value, long options before them (--rcfile FILE), `--` or `-` ending the
// options; with -c, the first operand is the script.
func shellScript(args []string) (wordValue, scriptMode) {
	command, stdin := false, false
	i := 0
	for i < len(args) {
		w := args[i]
		if w == "--" || w == "-" {
			i++
			break
		}
		if strings.HasPrefix(w, "--") {
			switch w {
			case "--rcfile", "--init-file":
				i += 2
			case "--login", "--noprofile", "--norc", "--posix", "--restricted", "--verbose", "--noediting",
				"--debugger", "--dump-strings", "--dump-po-strings", "--wordexp", "--protected":
				i++
			default:
				return wordValue{}, scriptUnknown
			}
			continue
		}
		if len(w) < 2 || (w[0] != '-' && w[0] != '+') {
			break
		}
		i++
		for _, c := range w[1:] {
			switch c {
			case 'c':
				command = command || w[0] == '-'
			case 's':
				stdin = true
			case 'o', 'O':
				i++ // its value
			}
		}
	}
	switch {
	case command && i < len(args):
		return wordValue{value: args[i], literal: true}, scriptArg
	case command:
		return wordValue{}, scriptUnknown // -c without a script
	case i < len(args) && !stdin:
		return wordValue{}, scriptFile
	}
	return wordValue{}, scriptStdin
}

// findExec lists the commands find runs with -exec, -execdir, -ok and
// -okdir: the words up to `;` or `+`.
func findExec(c Command) []Command {
	var out []Command
	args := c.Args
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for j < len(args) && args[j] != ";" && args[j] != "+" {
				j++
			}
			if j > i+1 {
				words := args[i+1 : j]
				n := Command{Name: path.Base(words[0]), Argv: words, Args: words[1:], Words: words, Wrappers: []string{"find"},
					Text: strings.Join(words, " "), Literal: c.Literal, Globs: c.Globs, MoreArgs: true, Paths: []string{}, Redirects: []Redirect{}}
				out = append(out, n)
			}
			i = j
		}
	}
	return out
}
