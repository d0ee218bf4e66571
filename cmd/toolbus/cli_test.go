package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// commandPaths are the words that name every command a user can run,
// the root's (none) first.
func commandPaths(t *testing.T) [][]string {
	t.Helper()
	var paths [][]string
	root := newRootCommand()
	walk(root, func(c *cobra.Command) {
		if c != root && !c.IsAvailableCommand() && c.Name() != "help" {
			return
		}
		paths = append(paths, strings.Fields(c.CommandPath())[1:])
	})
	if len(paths) < 30 {
		t.Fatalf("only %d commands in the tree", len(paths))
	}
	return paths
}

// Every command has a short description, usage and an example, and its
// help, asked for with -h or --help, goes to stdout with exit 0.
func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	walk(newRootCommand(), func(c *cobra.Command) {
		if !c.IsAvailableCommand() && c.HasParent() && c.Name() != "help" {
			return
		}
		if c.Short == "" || c.Example == "" {
			t.Errorf("%s: short description %q, example %q; want both", c.CommandPath(), c.Short, c.Example)
		}
		// A back-quoted word in a flag's usage is the name help shows for
		// its value: a placeholder, never a phrase.
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if name, _ := pflag.UnquoteUsage(f); strings.ContainsAny(name, " ./") {
				t.Errorf("%s --%s: help names its value %q", c.CommandPath(), f.Name, name)
			}
		})
	})
	for _, path := range commandPaths(t) {
		for _, help := range []string{"--help", "-h"} {
			args := append(append([]string(nil), path...), help)
			out, errOut, code := toolbus(t, args...)
			if code != 0 || errOut != "" || !strings.Contains(out, "Usage:") || !strings.Contains(out, "Examples:") {
				t.Errorf("toolbus %s: exit %d, stderr %q, stdout %.300q; want exit 0 with usage and examples on stdout",
					strings.Join(args, " "), code, errOut, out)
			}
		}
	}
	// The flags of a command are named as they are typed.
	out, _, _ := toolbus(t, "cancel", "--help")
	if strings.Contains(out, "-id toolbus") {
		t.Errorf("cancel --help mangles a flag's name:\n%s", out)
	}
	out, _, _ = toolbus(t, "init", "--help")
	if !strings.Contains(out, "--add ROLE:NAME") || !strings.Contains(out, "--remove NAME") || strings.Contains(out, "Usage of init") {
		t.Errorf("init --help:\n%s", out)
	}
	out, _, _ = toolbus(t, "up", "--help")
	if !strings.Contains(out, "--identities string") || !strings.Contains(out, "--max-output bytes") {
		t.Errorf("up --help:\n%s", out)
	}
	// A command that holds others alone prints its help; an unknown one
	// under it is a mistake.
	if out, _, code := toolbus(t, "audit"); code != 0 || !strings.Contains(out, "whatif") {
		t.Errorf("toolbus audit: exit %d, %s", code, out)
	}
	if _, errOut, code := toolbus(t, "audit", "lsit"); code != 2 || !strings.Contains(errOut, `unknown command "lsit" for "toolbus audit"`) || !strings.Contains(errOut, "did you mean") || !strings.Contains(errOut, "list") {
		t.Errorf("toolbus audit lsit: exit %d, %s", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	flagOut, errOut, code := toolbus(t, "--version")
	if code != 0 || errOut != "" {
		t.Fatalf("--version: exit %d, %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(flagOut), "\n")
	if !strings.HasPrefix(lines[0], "toolbus ") || len(lines[0]) <= len("toolbus ") || !strings.HasPrefix(lines[1], "revision: ") || !strings.HasPrefix(lines[len(lines)-1], "go: go1.") {
		t.Errorf("--version printed:\n%s", flagOut)
	}
	if out, _, code := toolbus(t, "version"); code != 0 || out != flagOut {
		t.Errorf("version: exit %d, %q; want what --version prints, %q", code, out, flagOut)
	}
	out, _, code := toolbus(t, "version", "--json")
	var b build
	if code != 0 || json.Unmarshal([]byte(out), &b) != nil || b.Version == "" || !strings.HasPrefix(b.Go, "go1.") {
		t.Errorf("version --json: exit %d, %s", code, out)
	}
}

// A version set at link time (-ldflags "-X main.version=V") is the one
// reported.
func TestVersionSetAtLinkTime(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "v1.2.3-test"
	if b := readBuildInfo(); b.Version != "v1.2.3-test" || !strings.HasPrefix(versionText(b), "toolbus v1.2.3-test\n") {
		t.Errorf("with main.version set: %+v", b)
	}
}

// A flag every command that talks to a bus shares goes anywhere on the
// line; --nats beats $TOOLBUS_NATS, which beats the default.
func TestGlobalFlags(t *testing.T) {
	t.Parallel()
	flagBus, envBus := "nats://"+freeAddr(t), "nats://"+freeAddr(t)
	for _, tt := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--nats", flagBus, "tools", "list"}, flagBus},
		{nil, []string{"tools", "--nats", flagBus, "list"}, flagBus},
		{nil, []string{"tools", "list", "--nats", flagBus}, flagBus},
		{nil, []string{"--nats=" + flagBus, "audit", "list", "--since", "1h"}, flagBus},
		{[]string{"TOOLBUS_NATS=" + envBus}, []string{"--nats", flagBus, "mcp", "status"}, flagBus},
		{[]string{"TOOLBUS_NATS=" + envBus}, []string{"mcp", "status"}, envBus},
	} {
		_, errOut, code := toolbusWith(t, tt.env, tt.args...)
		if code != 1 || !strings.Contains(errOut, "cannot reach the bus at "+tt.want) {
			t.Errorf("%v toolbus %v: exit %d, %q; want it to try %s", tt.env, tt.args, code, errOut, tt.want)
		}
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	out, err := exec.Command(bash, "-c", "source <("+bin("toolbus")+" completion bash) && complete -p toolbus").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "toolbus") {
		t.Errorf("the bash completion does not load: %v\n%s", err, out)
	}
	for _, shell := range []string{"zsh", "fish"} {
		if out, errOut, code := toolbus(t, "completion", shell); code != 0 || !strings.Contains(out, "toolbus") {
			t.Errorf("completion %s: exit %d, %s", shell, code, errOut)
		}
	}
	// What the shells ask the command: the commands under a word.
	out2, _, code := toolbus(t, "__complete", "audit", "w")
	if code != 0 || !strings.Contains(out2, "whatif") {
		t.Errorf("completion of audit w: exit %d, %s", code, out2)
	}
}
