package builtin

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/toolbus/toolbus/internal/tool"
)

// context lines around a change, as diff -u shows them.
const diffContext = 3

// unifiedDiff is a unified diff of before and after, one hunk covering
// everything between the common head and the common tail: not minimal,
// always correct, and linear in the size of the files.
func unifiedDiff(name, before, after string) string {
	if before == after {
		return ""
	}
	a, b := splitLines(before), splitLines(after)
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	start := max(head-diffContext, 0)
	endA := min(len(a)-tail+diffContext, len(a))
	endB := min(len(b)-tail+diffContext, len(b))
	var sb strings.Builder
	fromName, toName := "a/"+name, "b/"+name
	if before == "" {
		fromName = "/dev/null"
	}
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", fromName, toName)
	fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(start, endA-start), hunkRange(start, endB-start))
	for _, l := range a[start:head] {
		sb.WriteString(" " + l)
	}
	for _, l := range a[head : len(a)-tail] {
		sb.WriteString("-" + l)
	}
	for _, l := range b[head : len(b)-tail] {
		sb.WriteString("+" + l)
	}
	for _, l := range a[len(a)-tail : endA] {
		sb.WriteString(" " + l)
	}
	return sb.String()
}

func hunkRange(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

// splitLines splits s into lines that keep their newline; a last line
// without one gets the marker diff uses.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	} else {
		lines[len(lines)-1] += "\n\\ No newline at end of file\n"
	}
	return lines
}

// current reads a file for a diff, through the workspace like any read
// (confined at the moment of the read, bounded, and checked against what
// the policy judged, as the diff goes to the approver); a missing file is
// empty.
func (t *fileTool) current(p string, check Check) (string, string, error) {
	real, err := t.ws.Resolve(p)
	if err != nil {
		return "", "", err
	}
	data, err := t.ws.ReadFile(p, check)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	return real, string(data), nil
}

// Diff implements tool.Differ.
func (t *writeFile) Diff(call *tool.Call) (string, error) {
	a, err := decode[writeFileArgs](call.Args)
	if err != nil {
		return "", err
	}
	p, before, err := t.current(a.FilePath, call.Opened)
	if err != nil {
		return "", err
	}
	return unifiedDiff(t.ws.Rel(p), before, a.Content), nil
}

// Diff implements tool.Differ.
func (t *replace) Diff(call *tool.Call) (string, error) {
	a, err := decode[replaceArgs](call.Args)
	if err != nil {
		return "", err
	}
	p, before, err := t.current(a.FilePath, call.Opened)
	if err != nil {
		return "", err
	}
	after := a.NewString
	if before != "" || a.OldString != "" {
		after = strings.ReplaceAll(before, a.OldString, a.NewString)
	}
	return unifiedDiff(t.ws.Rel(p), before, after), nil
}
