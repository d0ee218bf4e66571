package main

import (
	"os"
	"path"
	"strings"

	"github.com/toolbus/toolbus/internal/testkit/sandboxwire"
)

// wrapped models the stubs that run another program. The sandbox uses
// the host's real env, nice, nohup, timeout, stdbuf and xargs (they only
// execute, and what they execute is a stub), but sudo needs privileges and
// a configuration and busybox would run its own applets for real, so
// those two are modelled here from their manuals. It returns the program
// to execute and its argv, wraps=false when the stub does something else
// (a shell, an editor, a listing, an error) and is to be judged as a run
// of its own, and path="" when the program is not found.
func wrapped(rec sandboxwire.Record) (file string, argv []string, wraps bool) {
	if len(rec.Argv) == 0 {
		return "", nil, false
	}
	switch path.Base(rec.Exe) {
	case "sudo":
		argv, ok := sudoCommand(rec.Argv[1:])
		if !ok {
			return "", nil, false
		}
		return lookPath(argv[0]), argv, true
	case "busybox":
		// busybox APPLET [ARGS]: the applet is the base name of the first
		// argument; --help, --list, --install... are busybox's own.
		if len(rec.Argv) < 2 || strings.HasPrefix(rec.Argv[1], "--") {
			return "", nil, false
		}
		applet := "/bin/" + path.Base(rec.Argv[1])
		if _, err := os.Stat(applet); err != nil {
			applet = ""
		}
		return applet, rec.Argv[1:], true
	}
	return "", nil, false
}

// sudo's options, from sudo(8) (getopt_long with "+Aa:BbC:c:D:Eeg:Hh::iKklNnPp:R:r:SsT:t:U:u:Vv").
var (
	sudoShortValue = "aCcDgpRrTtUu"
	sudoShortFlag  = "ABbEHkNnPS"
	// The other short options (-e -i -l -s -v -K -V, -h alone) make sudo
	// run something other than the command as given: an editor, a shell,
	// a listing, or nothing.
	sudoLong = map[string]byte{ // name → 'v' takes a value, 'f' flag, 'm' mode, 'o' optional value
		"auth-type": 'v', "close-from": 'v', "login-class": 'v', "chdir": 'v', "group": 'v', "host": 'v',
		"prompt": 'v', "chroot": 'v', "role": 'v', "type": 'v', "command-timeout": 'v', "other-user": 'v', "user": 'v',
		"askpass": 'f', "bell": 'f', "background": 'f', "set-home": 'f', "reset-timestamp": 'f', "no-update": 'f',
		"non-interactive": 'f', "preserve-groups": 'f', "stdin": 'f', "preserve-env": 'o',
		"edit": 'm', "help": 'm', "login": 'm', "remove-timestamp": 'm', "list": 'm', "shell": 'm', "version": 'm', "validate": 'm',
	}
)

// sudoCommand returns the command `sudo ARGS` runs as given, ok=false when
// it runs something else or refuses the options.
func sudoCommand(args []string) ([]string, bool) {
	for len(args) > 0 {
		a := args[0]
		switch {
		case a == "--":
			args = args[1:]
			goto command
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			kind, ok := longOption(name)
			switch {
			case !ok || kind == 'm' || kind == 'f' && hasValue:
				return nil, false
			case kind == 'v' && !hasValue:
				if len(args) < 2 {
					return nil, false
				}
				args = args[1:]
			}
			args = args[1:]
		case strings.HasPrefix(a, "-") && a != "-":
			args = args[1:]
			for i := 1; i < len(a); i++ {
				c := a[i]
				switch {
				case strings.IndexByte(sudoShortFlag, c) >= 0:
					continue
				case c == 'h' && i+1 < len(a): // -hHOST; -h alone is help
					i = len(a)
				case strings.IndexByte(sudoShortValue, c) >= 0:
					if i+1 == len(a) { // the value is the next argument
						if len(args) == 0 {
							return nil, false
						}
						args = args[1:]
					}
					i = len(a)
				default: // a mode, or an unknown option
					return nil, false
				}
			}
		default:
			goto command
		}
	}
command:
	// VAR=value words before the command set its environment.
	for len(args) > 0 && strings.Contains(args[0], "=") && !strings.HasPrefix(args[0], "=") {
		args = args[1:]
	}
	if len(args) == 0 {
		return nil, false // `sudo -u x` alone prints usage
	}
	return args, true
}

// longOption finds a long option by its name or an unambiguous prefix of
// it, as getopt_long does.
func longOption(name string) (byte, bool) {
	if k, ok := sudoLong[name]; ok {
		return k, true
	}
	var kind byte
	found := 0
	for n, k := range sudoLong {
		if name != "" && strings.HasPrefix(n, name) {
			kind, found = k, found+1
		}
	}
	return kind, found == 1
}

// lookPath finds name as execvp would, in $PATH, or returns "".
func lookPath(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	dirs := os.Getenv("PATH")
	if dirs == "" {
		dirs = "/bin:/usr/bin"
	}
	for _, dir := range strings.Split(dirs, ":") {
		p := path.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
