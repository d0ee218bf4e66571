package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

var updateCLIReference = flag.Bool("update-cli-reference", false, "write docs/cli.md from the command tree (go generate ./cmd/toolbus)")

// cliReference is the command-line reference, made from the command tree
// so that it cannot drift from it.
const cliReference = "../../docs/cli.md"

// TestCLIReference fails when docs/cli.md is not what the command tree
// makes; go generate ./cmd/toolbus writes it again.
func TestCLIReference(t *testing.T) {
	var want bytes.Buffer
	if err := writeCLIReference(&want, newRootCommand()); err != nil {
		t.Fatal(err)
	}
	if *updateCLIReference {
		if err := os.WriteFile(cliReference, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(cliReference)
	if err != nil {
		t.Fatalf("%v; run go generate ./cmd/toolbus", err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(want.String(), "\n")
		for i := range max(len(gotLines), len(wantLines)) {
			g, w := lineAt(gotLines, i), lineAt(wantLines, i)
			if g != w {
				t.Fatalf("docs/cli.md is stale; run go generate ./cmd/toolbus\nline %d is\n\t%q\nwant\n\t%q", i+1, g, w)
			}
		}
	}
}

func lineAt(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end of file)"
}

// writeCLIReference writes the reference of every command below root to
// w, one file: the exit codes, an index, then each command as cobra's
// markdown generator makes it, its links turned into links within the
// file.
func writeCLIReference(w io.Writer, root *cobra.Command) error {
	var b bytes.Buffer
	b.WriteString(`# toolbus command-line reference

<!-- Made from the command tree by go generate ./cmd/toolbus; edit the commands, not this file. -->

Every command of ` + "`toolbus`" + ` with its flags, as ` + "`toolbus COMMAND --help`" + ` prints
them. Flags go anywhere on the line: ` + "`toolbus --nats URL tools list`" + ` is
` + "`toolbus tools list --nats URL`" + `. Shell completion:
` + "`source <(toolbus completion bash)`" + ` (or zsh, fish, powershell).

## Exit codes

| Code | Name | Type in the ` + "`--json`" + ` error | Meaning |
|---:|---|---|---|
`)
	for _, c := range exitCodes {
		types := make([]string, len(c.types))
		for i, t := range c.types {
			if strings.ToUpper(t) == t {
				t = "`" + t + "`"
			}
			types[i] = t
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s |\n", c.code, c.name, strings.Join(types, ", "), c.meaning)
	}
	b.WriteString(`
A command given ` + "`--json`" + ` that fails prints its error on stderr as one JSON
object, ` + "`" + `{"error": "...", "type": "...", "exitCode": N}` + "`" + `, with the call's
` + "`invocationId`" + ` when a call failed; without ` + "`--json`" + `, as a line
` + "`toolbus: ...`" + `.

A call whose tool ran a command that exited non-zero (` + "`run_shell_command`" + `)
exits 1, not with the command's status: that status could be any of the codes
above, so a script could not tell the command's 2 or 130 from toolbus's. The
status is in the message, and in the result's ` + "`exitCode`" + ` with ` + "`call --json`" + `.

## Commands

`)
	var cmds []*cobra.Command
	walk(root, func(c *cobra.Command) {
		if c == root || c.IsAvailableCommand() {
			cmds = append(cmds, c)
		}
	})
	for _, c := range cmds {
		fmt.Fprintf(&b, "- [%s](%s) - %s\n", c.CommandPath(), anchor(c.CommandPath()), c.Short)
	}
	b.WriteString("\n")
	for _, c := range cmds {
		c.DisableAutoGenTag = true // a date would make every run differ
		restore := asCommandHolder(c)
		err := doc.GenMarkdownCustom(c, &b, func(file string) string {
			return anchor(strings.ReplaceAll(strings.TrimSuffix(file, ".md"), "_", " "))
		})
		restore()
		if err != nil {
			return err
		}
	}
	_, err := w.Write(bytes.TrimRight(b.Bytes(), "\n"))
	if err == nil {
		_, err = io.WriteString(w, "\n")
	}
	return err
}

// anchor is the link to the heading of a command's section, as GitHub
// names it.
func anchor(commandPath string) string {
	return "#" + strings.ReplaceAll(commandPath, " ", "-")
}
