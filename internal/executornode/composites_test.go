package executornode_test

import (
	"context"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/settings"
)

// A composite that would take a built-in tool's name, or one defined in
// both settings files, stops the node from starting, naming the file and
// the key: it would replace that tool for every agent.
func TestACompositeTakesNoOtherToolsName(t *testing.T) {
	t.Parallel()
	parse := func(t *testing.T, path, data string, f settings.Format) *settings.File {
		t.Helper()
		file, err := settings.Parse([]byte(data), path, f)
		if err != nil {
			t.Fatal(err)
		}
		return file
	}
	def := func(name string) string {
		return `{"toolbus": {"composites": {"` + name + `": {"description": "d", "steps": [{"tool": "list_directory", "args": {"dir_path": "."}}]}}}}`
	}
	for _, tc := range []struct {
		name           string
		gemini, claude string
		want           string
	}{
		{"a built-in's name", def("read_file"), `{}`, "settings g.json: toolbus.composites.read_file: the name is taken by a built-in tool"},
		{"in both files", def("look"), def("look"), "settings c.json: toolbus.composites.look: the name is taken by a composite of g.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(t)
			cfg.Settings = &settings.Files{Gemini: parse(t, "g.json", tc.gemini, settings.GeminiSettings),
				Claude: parse(t, "c.json", tc.claude, settings.ClaudeSettings), MCPConfig: &settings.File{}}
			n, err := executornode.Start(context.Background(), cfg)
			if err == nil {
				n.Close(context.Background())
				t.Fatal("the node started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q, want %q", err, tc.want)
			}
		})
	}
}
