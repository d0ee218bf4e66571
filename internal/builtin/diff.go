package builtin

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"

	"github.com/toolbus/toolbus/internal/tool"
)

// context lines around a change, as diff -u shows them.
const diffContext = 3

// unifiedDiff is a unified diff of before and after as a reviewer reads
// one: Myers' algorithm (go-udiff, gopls's diff), a hunk per change with
// three lines of context around it, not one hunk spanning everything
// between the first change and the last.
func unifiedDiff(name, before, after string) (string, error) {
	if before == after {
		return "", nil
	}
	from := "a/" + name
	if before == "" {
		from = "/dev/null"
	}
	d, err := udiff.ToUnified(from, "b/"+name, before, udiff.Lines(before, after), diffContext)
	if err != nil {
		return "", fmt.Errorf("diff of %s: %w", name, err)
	}
	return d, nil
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
	return unifiedDiff(t.ws.Rel(p), before, a.Content)
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
	return unifiedDiff(t.ws.Rel(p), before, after)
}
