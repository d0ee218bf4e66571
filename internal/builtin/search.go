package builtin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// Limits that keep one search from flooding the model.
const (
	maxGlobResults   = 5000
	maxSearchMatches = 2000
	maxSearchLine    = 500
)

// skipDirs are never searched.
var skipDirs = map[string]bool{".git": true, "node_modules": true}

func hasMeta(p string) bool { return strings.ContainsAny(p, "*?[{") }

// globFailure is the result of a failed globFiles: an error of the call's
// arguments, or the end of ctx, which the executor reports as a deadline
// or a cancel.
func globFailure(err error) (*tool.Output, error) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return nil, err
	}
	return tool.Failed(events.ErrInvalidParams, err.Error()), nil
}

// globFiles lists the regular files under base whose path relative to base
// matches pattern, staying inside the workspace. The walk stops at the end
// of ctx with ctx's error.
func globFiles(ctx context.Context, ws *Workspace, base, pattern string) ([]string, error) {
	pattern = filepath.ToSlash(pattern)
	if strings.HasPrefix(pattern, "/") {
		return nil, fmt.Errorf("pattern %q must be relative to %s", pattern, ws.Rel(base))
	}
	matcher, err := compileGlob(pattern)
	if err != nil {
		return nil, err
	}
	var out []string
	err = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable entries are skipped, not fatal
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		if d.IsDir() {
			if skipDirs[d.Name()] && p != base {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(base, p)
		if !matcher.match(filepath.ToSlash(rel)) {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			real, err := ws.Resolve(p)
			if err != nil {
				return nil // a link out of the workspace is not followed
			}
			if info, err := os.Stat(real); err != nil || !info.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		out = append(out, p)
		if len(out) >= maxGlobResults {
			return fs.SkipAll
		}
		return nil
	})
	return out, err
}

// --- glob --------------------------------------------------------------------

type glob struct{ fileTool }

type globArgs struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path"`
}

func (t *glob) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	a, err := decode[globArgs](call.Args)
	if err != nil {
		return nil, err
	}
	base, fail := t.resolve(cmpOr(a.Path, "."))
	if fail != nil {
		return fail, nil
	}
	files, err := globFiles(ctx, t.ws, base, a.Pattern)
	if err != nil {
		return globFailure(err)
	}
	if len(files) == 0 {
		return tool.Text(fmt.Sprintf("No files found matching %q in %s.", a.Pattern, t.ws.Rel(base))), nil
	}
	// Newest first, as Gemini CLI's glob sorts.
	mtime := make(map[string]int64, len(files))
	for _, f := range files {
		if info, err := os.Stat(f); err == nil {
			mtime[f] = info.ModTime().UnixNano()
		}
	}
	sort.SliceStable(files, func(i, j int) bool {
		if mtime[files[i]] != mtime[files[j]] {
			return mtime[files[i]] > mtime[files[j]]
		}
		return files[i] < files[j]
	})
	head := fmt.Sprintf("Found %d file(s) matching %q in %s, newest first:\n", len(files), a.Pattern, t.ws.Rel(base))
	return &tool.Output{LLMContent: head + strings.Join(files, "\n"), ReturnDisplay: fmt.Sprintf("Found %d matching file(s).", len(files))}, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// --- search_file_content -----------------------------------------------------

type searchFileContent struct{ fileTool }

type searchArgs struct {
	Pattern string `json:"pattern"`
	Path    string `json:"path"`
	Include string `json:"include"`
}

func (t *searchFileContent) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	a, err := decode[searchArgs](call.Args)
	if err != nil {
		return nil, err
	}
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return tool.Failed(events.ErrInvalidParams, fmt.Sprintf("pattern %q is not a valid regular expression: %v", a.Pattern, err)), nil
	}
	base, fail := t.resolve(cmpOr(a.Path, "."))
	if fail != nil {
		return fail, nil
	}
	include := "**"
	if a.Include != "" {
		include = a.Include
		if !strings.Contains(include, "/") {
			include = "**/" + include
		}
	}
	files, err := globFiles(ctx, t.ws, base, include)
	if err != nil {
		return globFailure(err)
	}
	sort.Strings(files)
	files, skipped, err := t.permitted(call, files)
	if err != nil {
		return tool.Failed(events.ErrPolicyDenied, err.Error()), nil
	}
	var b strings.Builder
	matches, inFiles, changed := 0, 0, 0
	for _, f := range files {
		if matches >= maxSearchMatches {
			break
		}
		n, err := searchFile(t.ws, f, call.Opened, re, &b, maxSearchMatches-matches)
		if errors.Is(err, ErrChanged) {
			changed++
		}
		if n > 0 {
			inFiles++
			matches += n
		}
	}
	note := skippedNote(skipped)
	if changed > 0 {
		note += fmt.Sprintf("\n[%d file(s) not searched: %v.]", changed, ErrChanged)
	}
	if matches == 0 {
		return tool.Text(fmt.Sprintf("No matches found for pattern %q in %s.", a.Pattern, t.ws.Rel(base)) + note), nil
	}
	head := fmt.Sprintf("Found %d match(es) for pattern %q in %s:\n---\n", matches, a.Pattern, t.ws.Rel(base))
	return &tool.Output{LLMContent: head + b.String() + note, ReturnDisplay: fmt.Sprintf("Found %d match(es) in %d file(s).", matches, inFiles)}, nil
}

// searchFile appends the matching lines of one text file, once check
// accepted it. The error is why it could not be opened.
func searchFile(ws *Workspace, p string, check Check, re *regexp.Regexp, b *strings.Builder, limit int) (int, error) {
	rel := ws.Rel(p)
	f, err := ws.Open(p, check)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	n, line := 0, 0
	for sc.Scan() && n < limit {
		line++
		text := sc.Bytes()
		if line == 1 && bytes.IndexByte(text, 0) >= 0 {
			return 0, nil // binary
		}
		if !re.Match(text) {
			continue
		}
		if n == 0 {
			fmt.Fprintf(b, "File: %s\n", rel)
		}
		if len(text) > maxSearchLine {
			text = append(text[:maxSearchLine:maxSearchLine], "…"...)
		}
		fmt.Fprintf(b, "L%d: %s\n", line, text)
		n++
	}
	if n > 0 {
		b.WriteString("---\n")
	}
	return n, nil
}
