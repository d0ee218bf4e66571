// Package builtin holds toolbus's built-in tools: Gemini CLI's file, search
// and shell tools with Gemini CLI's names and parameters, confined to a
// workspace root.
package builtin

import (
	"encoding/json"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// Categories of the built-in tools (seed 004).
const (
	CategoryFilesystem = "filesystem"
	CategorySearch     = "search"
	CategoryExecution  = "execution"
)

// Specs are the declarations of the built-in tools, as a provider registers
// them. Aliases are seed 004's, mapped onto Gemini CLI's names. It is one
// table, read top to bottom, rather than a function per tool: its length
// is the number of tools.
func Specs() []events.ToolSpec {
	return []events.ToolSpec{
		{
			Name: "list_directory", DisplayName: "ReadFolder", Kind: events.KindRead, Category: CategoryFilesystem, ReadOnly: true,
			Description: "Lists the names of files and subdirectories directly within a specified directory path. Can optionally ignore entries matching provided glob patterns.",
			Parameters: schema(`{"type":"object","properties":{
				"path":{"type":"string","description":"The path to the directory to list, relative to the workspace root or absolute inside it."},
				"ignore":{"type":"array","items":{"type":"string"},"description":"List of glob patterns to ignore."}},
				"required":["path"]}`),
		},
		{
			Name: "read_file", DisplayName: "ReadFile", Kind: events.KindRead, Category: CategoryFilesystem, ReadOnly: true,
			Aliases:     []string{"file_read", "Read"},
			Description: "Reads and returns the content of a specified file. If the file is large, the content is truncated; use 'offset' and 'limit' to page through it.",
			Parameters: schema(`{"type":"object","properties":{
				"file_path":{"type":"string","description":"The path to the file to read."},
				"offset":{"type":"integer","minimum":0,"description":"The 0-based line number to start reading from."},
				"limit":{"type":"integer","minimum":1,"description":"Maximum number of lines to read."}},
				"required":["file_path"]}`),
		},
		{
			Name: "search_file_content", DisplayName: "SearchText", Kind: events.KindSearch, Category: CategorySearch, ReadOnly: true,
			Aliases:     []string{"search", "Grep"},
			Description: "Searches for a regular expression pattern within the content of files in a directory. Returns the lines containing matches, with their file paths and line numbers.",
			Parameters: schema(`{"type":"object","properties":{
				"pattern":{"type":"string","description":"The regular expression (RE2 syntax) to search for."},
				"path":{"type":"string","description":"The directory to search within; defaults to the workspace root."},
				"include":{"type":"string","description":"A glob pattern to filter which files are searched, e.g. '*.go'."}},
				"required":["pattern"]}`),
		},
		{
			Name: "glob", DisplayName: "FindFiles", Kind: events.KindSearch, Category: CategorySearch, ReadOnly: true,
			Description: "Finds files matching a glob pattern (e.g. 'src/**/*.go'), returning paths sorted by modification time, newest first.",
			Parameters: schema(`{"type":"object","properties":{
				"pattern":{"type":"string","description":"The glob pattern to match against."},
				"path":{"type":"string","description":"The directory to search within; defaults to the workspace root."}},
				"required":["pattern"]}`),
		},
		{
			Name: "replace", DisplayName: "Edit", Kind: events.KindEdit, Category: CategoryFilesystem,
			Aliases:     []string{"str_replace", "Edit"},
			Description: "Replaces text within a file. By default replaces a single occurrence; set 'expected_replacements' to replace several. 'old_string' must match the file exactly, whitespace included.",
			Parameters: schema(`{"type":"object","properties":{
				"file_path":{"type":"string","description":"The path to the file to modify."},
				"old_string":{"type":"string","description":"The exact text to replace. Empty to create a new file."},
				"new_string":{"type":"string","description":"The text to replace it with."},
				"expected_replacements":{"type":"integer","minimum":1,"description":"Number of replacements expected; defaults to 1."}},
				"required":["file_path","old_string","new_string"]}`),
		},
		{
			Name: "write_file", DisplayName: "WriteFile", Kind: events.KindEdit, Category: CategoryFilesystem,
			Aliases:     []string{"file_write", "Write"},
			Description: "Writes content to a file, creating it (and its parent directories) or overwriting it.",
			Parameters: schema(`{"type":"object","properties":{
				"file_path":{"type":"string","description":"The path to the file to write to."},
				"content":{"type":"string","description":"The content to write."}},
				"required":["file_path","content"]}`),
		},
		{
			Name: "read_many_files", DisplayName: "ReadManyFiles", Kind: events.KindRead, Category: CategoryFilesystem, ReadOnly: true,
			Description: "Reads the content of several files given by paths or glob patterns and returns them concatenated, each under a separator naming the file.",
			Parameters: schema(`{"type":"object","properties":{
				"paths":{"type":"array","items":{"type":"string"},"minItems":1,"description":"Paths or glob patterns, relative to the workspace root."},
				"include":{"type":"array","items":{"type":"string"},"description":"Additional glob patterns to include."},
				"exclude":{"type":"array","items":{"type":"string"},"description":"Glob patterns of files to leave out."}},
				"required":["paths"]}`),
		},
		{
			Name: "run_shell_command", DisplayName: "Shell", Kind: events.KindExecute, Category: CategoryExecution,
			Aliases:     []string{"run_command", "execute", "Bash"},
			Description: "Executes a command with bash -c in its own process group. Returns stdout, stderr, exit code and signal. Every process the command starts ends with the call, even one that leaves the process group (setsid, nohup, a double fork): when bash exits, at the deadline, or when the call is cancelled. To keep a process running (a server, a watcher), use run_in_background: the command and what it starts then run until they end or kill_shell stops them, and their output is fetched with shell_output.",
			Parameters: schema(`{"type":"object","properties":{
				"command":{"type":"string","description":"The exact bash command to execute."},
				"description":{"type":"string","description":"A brief description of the command for the user."},
				"directory":{"type":"string","description":"The directory to run in, relative to the workspace root; defaults to the root."},
				"run_in_background":{"type":"boolean","description":"Run the command in the background."}},
				"required":["command"]}`),
		},
		{
			Name: "shell_output", DisplayName: "ShellOutput", Kind: events.KindRead, Category: CategoryExecution, ReadOnly: true,
			Aliases:     []string{"BashOutput"},
			Description: "Returns the output a background shell command produced since the last call, and whether it is still running.",
			Parameters: schema(`{"type":"object","properties":{
				"shell_id":{"type":"string","description":"The shell_id run_shell_command returned."}},
				"required":["shell_id"]}`),
		},
		{
			Name: "kill_shell", DisplayName: "KillShell", Kind: events.KindExecute, Category: CategoryExecution,
			Aliases:     []string{"KillShell"},
			Description: "Stops a background shell command and every process it started.",
			Parameters: schema(`{"type":"object","properties":{
				"shell_id":{"type":"string","description":"The shell_id run_shell_command returned."}},
				"required":["shell_id"]}`),
		},
	}
}

// Tools are the built-in tools, confined to ws, their shell commands run
// by shells.
func Tools(ws *Workspace, shells *Shells) []tool.Tool {
	var out []tool.Tool
	for _, spec := range Specs() {
		f := fileTool{spec: spec, ws: ws}
		var t tool.Tool
		switch spec.Name {
		case "list_directory":
			t = &listDirectory{f}
		case "read_file":
			t = &readFile{f}
		case "search_file_content":
			t = &searchFileContent{f}
		case "glob":
			t = &glob{f}
		case "replace":
			t = &replace{f}
		case "write_file":
			t = &writeFile{f}
		case "read_many_files":
			t = &readManyFiles{f}
		case "run_shell_command":
			t = &runShell{spec: spec, shells: shells}
		case "shell_output":
			t = &backgroundTool{spec: spec, shells: shells, act: readBackground}
		case "kill_shell":
			t = &backgroundTool{spec: spec, shells: shells, act: killBackground}
		default:
			panic("builtin: no implementation for " + spec.Name)
		}
		out = append(out, t)
	}
	return out
}

func schema(s string) json.RawMessage { return json.RawMessage(s) }
