package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// defaultReadLimit is how many lines read_file returns unless told
// otherwise, as in Gemini CLI.
const defaultReadLimit = 2000

// fileTool is the part every file tool shares: its declaration and the
// workspace it is confined to.
type fileTool struct {
	spec events.ToolSpec
	ws   *Workspace
}

func (t *fileTool) Spec() events.ToolSpec { return t.spec }

// pathArgs names the arguments that hold paths, for the policy.
var pathArgs = []string{"file_path", "path", "directory"}

// Paths implements tool.PathNamer: every path argument, absolute.
func (t *fileTool) Paths(m map[string]any) []string {
	var out []string
	for _, k := range pathArgs {
		if s, ok := m[k].(string); ok && s != "" {
			out = append(out, t.ws.Abs(s))
		}
	}
	if list, ok := m["paths"].([]any); ok {
		for _, v := range list {
			if s, ok := v.(string); ok && s != "" && !hasMeta(s) {
				out = append(out, t.ws.Abs(s))
			}
		}
	}
	return out
}

// Look implements tool.LinkResolver.
func (t *fileTool) Look(p string) (tool.File, error) { return t.ws.Look(p) }

// resolve confines p to the workspace, as a tool-level failure.
func (t *fileTool) resolve(p string) (string, *tool.Output) {
	real, err := t.ws.Resolve(p)
	if err != nil {
		return "", t.failure(p, err)
	}
	return real, nil
}

// failure turns a file error into the tool-level failure it is.
func (t *fileTool) failure(p string, err error) *tool.Output {
	switch {
	case errors.Is(err, ErrOutsideWorkspace):
		return tool.Failed(events.ErrPathNotInWorkspace, err.Error())
	case errors.Is(err, fs.ErrNotExist):
		return tool.Failed(events.ErrFileNotFound, "File not found: "+p)
	case errors.Is(err, ErrTooLarge):
		return tool.Failed(events.ErrFileTooLarge, fmt.Sprintf("%s: %v", p, err))
	case errors.Is(err, ErrChanged):
		return tool.Failed(events.ErrPolicyDenied, err.Error()+"; nothing of it was used")
	}
	return tool.Failed(events.ErrExecutionFailed, err.Error())
}

// decode reads a tool's arguments the way the executor's validation and
// the policy read them: names match exactly (encoding/json would also take
// "FILE_PATH" for file_path, a value the policy never saw) and a name
// given twice is an error. Unknown names are ignored.
func decode[T any](args json.RawMessage) (T, error) {
	var v T
	err := jsonv2.Unmarshal(args, &v)
	return v, err
}

// --- read_file ---------------------------------------------------------------

type readFile struct{ fileTool }

type readFileArgs struct {
	FilePath string `json:"file_path"`
	Offset   int    `json:"offset"`
	Limit    int    `json:"limit"`
}

func (t *readFile) Run(_ context.Context, call *tool.Call) (*tool.Output, error) {
	a, err := decode[readFileArgs](call.Args)
	if err != nil {
		return nil, err
	}
	data, err := t.ws.ReadFile(a.FilePath, call.Opened)
	if err != nil {
		return t.failure(a.FilePath, err), nil
	}
	p := t.ws.Abs(a.FilePath)
	limit := a.Limit
	if limit <= 0 {
		limit = defaultReadLimit
	}
	// The text goes out as bytes, spooled when large (textOutput), never
	// as a copy in a string: the output of a 20 MB file then holds its
	// head in memory while it waits to be stored, not 40 MB.
	if n := lineCount(data); a.Offset == 0 && n <= limit {
		return textOutput(nil, data, "Read "+strconv.Itoa(n)+" lines from "+t.ws.Rel(p)), nil
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	start := min(a.Offset, len(lines))
	end := min(start+limit, len(lines))
	note := fmt.Sprintf("[File content truncated: showing lines %d-%d of %d total lines. Use offset/limit to read more.]\n", start+1, end, len(lines))
	return textOutput([]byte(note), bytes.Join(lines[start:end], nil), fmt.Sprintf("Read lines %d-%d of %d from %s", start+1, end, len(lines), t.ws.Rel(p))), nil
}

// lineCount is how many lines text has, the last one counted whether or
// not a newline ends it.
func lineCount(text []byte) int {
	n := bytes.Count(text, []byte("\n"))
	if len(text) > 0 && text[len(text)-1] != '\n' {
		n++
	}
	return n
}

// --- write_file --------------------------------------------------------------

type writeFile struct{ fileTool }

type writeFileArgs struct {
	FilePath string `json:"file_path"`
	Content  string `json:"content"`
}

func (t *writeFile) Run(_ context.Context, call *tool.Call) (*tool.Output, error) {
	a, err := decode[writeFileArgs](call.Args)
	if err != nil {
		return nil, err
	}
	created, err := t.ws.WriteFile(a.FilePath, []byte(a.Content), call.Opened)
	if err != nil {
		return t.failure(a.FilePath, err), nil
	}
	p := t.ws.Abs(a.FilePath)
	verb := "Overwrote"
	if created {
		verb = "Created"
	}
	msg := fmt.Sprintf("%s %s (%d bytes).", verb, t.ws.Rel(p), len(a.Content))
	return tool.Text(msg), nil
}

// --- replace -----------------------------------------------------------------

type replace struct{ fileTool }

type replaceArgs struct {
	FilePath             string `json:"file_path"`
	OldString            string `json:"old_string"`
	NewString            string `json:"new_string"`
	ExpectedReplacements int    `json:"expected_replacements"`
}

// ValidateArgs implements tool.Validator.
func (t *replace) ValidateArgs(args json.RawMessage) error {
	a, err := decode[replaceArgs](args)
	if err != nil {
		return err
	}
	if a.OldString == a.NewString {
		return errors.New("old_string and new_string are the same: nothing to change")
	}
	return nil
}

func (t *replace) Run(_ context.Context, call *tool.Call) (*tool.Output, error) {
	a, err := decode[replaceArgs](call.Args)
	if err != nil {
		return nil, err
	}
	p := t.ws.Abs(a.FilePath)
	data, err := t.ws.ReadFile(a.FilePath, call.Opened)
	switch {
	case errors.Is(err, fs.ErrNotExist) && a.OldString == "":
		// An empty old_string creates the file, as Gemini CLI's edit does.
		if _, err := t.ws.WriteFile(a.FilePath, []byte(a.NewString), call.Opened); err != nil {
			return t.failure(a.FilePath, err), nil
		}
		return tool.Text("Created " + t.ws.Rel(p) + "."), nil
	case err != nil:
		return t.failure(a.FilePath, err), nil
	case a.OldString == "":
		return tool.Failed(events.ErrInvalidParams, "old_string is empty but "+a.FilePath+" exists: give the text to replace"), nil
	}
	expected := max(a.ExpectedReplacements, 1)
	found := strings.Count(string(data), a.OldString)
	switch {
	case found == 0:
		return tool.Failed(events.ErrEditNoOccurrence, fmt.Sprintf("Failed to edit: could not find old_string in %s. Read the file again and match it exactly, whitespace included.", a.FilePath)), nil
	case found != expected:
		return tool.Failed(events.ErrEditOccurrenceMismatch, fmt.Sprintf("Failed to edit: expected %d occurrence(s) of old_string in %s, found %d.", expected, a.FilePath, found)), nil
	}
	updated := strings.ReplaceAll(string(data), a.OldString, a.NewString)
	if _, err := t.ws.WriteFile(a.FilePath, []byte(updated), call.Opened); err != nil {
		return t.failure(a.FilePath, err), nil
	}
	return tool.Text(fmt.Sprintf("Replaced %d occurrence(s) in %s.", found, t.ws.Rel(p))), nil
}

// --- list_directory ----------------------------------------------------------

type listDirectory struct{ fileTool }

type listDirectoryArgs struct {
	Path   string   `json:"path"`
	Ignore []string `json:"ignore"`
}

func (t *listDirectory) Run(_ context.Context, call *tool.Call) (*tool.Output, error) {
	a, err := decode[listDirectoryArgs](call.Args)
	if err != nil {
		return nil, err
	}
	entries, err := t.ws.ReadDir(a.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return tool.Failed(events.ErrFileNotFound, "Directory not found: "+a.Path), nil
	}
	if err != nil {
		return t.failure(a.Path, err), nil
	}
	p := t.ws.Abs(a.Path)
	var dirs, files []string
	for _, e := range entries {
		if ignored(e.Name(), a.Ignore) {
			continue
		}
		if e.IsDir() {
			dirs = append(dirs, "[DIR] "+e.Name())
		} else {
			files = append(files, e.Name())
		}
	}
	sort.Strings(dirs)
	sort.Strings(files)
	list := append(dirs, files...)
	head := fmt.Sprintf("Directory listing for %s:\n", t.ws.Rel(p))
	return &tool.Output{LLMContent: head + strings.Join(list, "\n"), ReturnDisplay: fmt.Sprintf("Listed %d item(s).", len(list))}, nil
}

func ignored(name string, patterns []string) bool {
	for _, pat := range patterns {
		if ok, _ := filepath.Match(pat, name); ok {
			return true
		}
	}
	return false
}

// --- read_many_files ---------------------------------------------------------

type readManyFiles struct{ fileTool }

type readManyFilesArgs struct {
	Paths   []string `json:"paths"`
	Include []string `json:"include"`
	Exclude []string `json:"exclude"`
}

// maxManyFiles bounds how many files one call reads.
const maxManyFiles = 500

func (t *readManyFiles) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	a, err := decode[readManyFilesArgs](call.Args)
	if err != nil {
		return nil, err
	}
	exclude, err := compileGlobs(a.Exclude)
	if err != nil {
		return tool.Failed(events.ErrInvalidParams, "exclude: "+err.Error()), nil
	}
	var files []string
	seen := map[string]bool{}
	for _, pat := range append(append([]string{}, a.Paths...), a.Include...) {
		matches, fail, err := t.expand(ctx, pat)
		if fail != nil || err != nil {
			return fail, err
		}
		for _, m := range matches {
			rel := t.ws.Rel(m)
			if !seen[m] && !exclude.match(rel) {
				seen[m] = true
				files = append(files, m)
			}
		}
	}
	sort.Strings(files)
	if len(files) > maxManyFiles {
		files = files[:maxManyFiles]
	}
	files, skipped, err := t.permitted(call, files)
	if err != nil {
		return tool.Failed(events.ErrPolicyDenied, err.Error()), nil
	}
	var b strings.Builder
	var unread []string
	notRead := 0
	for i, f := range files {
		if b.Len() >= MaxReadBytes { // one call reads no more than one file may hold
			unread = append(unread, fmt.Sprintf("%d more, as the call read %d MB already", len(files)-i, MaxReadBytes>>20))
			notRead += len(files) - i
			break
		}
		data, err := t.ws.ReadFile(f, call.Opened)
		if err != nil { // too large, gone, leading out or changed since it was judged
			unread = append(unread, fmt.Sprintf("%s (%v)", t.ws.Rel(f), err))
			notRead++
			continue
		}
		fmt.Fprintf(&b, "--- %s ---\n%s\n", t.ws.Rel(f), data)
	}
	if len(files) == 0 {
		return tool.Text("No files matched." + skippedNote(skipped)), nil
	}
	note := skippedNote(skipped)
	if notRead > 0 {
		note += fmt.Sprintf("\n[%d file(s) not read: %s]", notRead, strings.Join(unread, "; "))
	}
	return &tool.Output{LLMContent: b.String() + note, ReturnDisplay: fmt.Sprintf("Read %d file(s).", len(files)-notRead)}, nil
}

// expand turns a path or glob pattern into the files it names. A
// pattern that cannot name files is a failed Output; the end of ctx is
// its error, which the executor reports as the deadline or the cancel it
// was.
func (t *readManyFiles) expand(ctx context.Context, pat string) ([]string, *tool.Output, error) {
	if !hasMeta(pat) {
		info, err := t.ws.Stat(pat)
		if errors.Is(err, ErrOutsideWorkspace) {
			return nil, t.failure(pat, err), nil
		}
		if err != nil {
			return nil, nil, nil
		}
		if !info.IsDir() {
			return []string{t.ws.Abs(pat)}, nil, nil
		}
		pat = filepath.Join(pat, "**")
	}
	matches, err := globFiles(ctx, t.ws, t.ws.Root(), pat)
	if err != nil {
		fail, err := globFailure(err)
		return nil, fail, err
	}
	return matches, nil, nil
}

// permitted drops from files (absolute paths) those the policy refuses
// for this call, through call.Refused, which also judges where symbolic
// links lead them. It returns the files kept and how many were dropped;
// an error means the policy could not judge them.
func (t *fileTool) permitted(call *tool.Call, files []string) ([]string, int, error) {
	if call.Refused == nil || len(files) == 0 {
		return files, 0, nil
	}
	refused, err := call.Refused(files)
	if err != nil {
		return nil, 0, err
	}
	kept := make([]string, 0, len(files))
	for _, f := range files {
		if !refused[f] {
			kept = append(kept, f)
		}
	}
	return kept, len(files) - len(kept), nil
}

// skippedNote says how many files the policy kept a tool from reading.
func skippedNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("\n[%d file(s) skipped: the policy does not allow reading them.]", n)
}
