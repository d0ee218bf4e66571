// Package policy carries the default toolbus policy, the .rego files of
// this directory, into the binaries, so that an executor started with no
// policy directory still enforces it.
package policy

import (
	"embed"
	"io/fs"
)

//go:embed *.rego
var files embed.FS

// Default returns the default policy set: file name → Rego source.
func Default() map[string]string {
	out := map[string]string{}
	entries, _ := fs.ReadDir(files, ".")
	for _, e := range entries {
		data, _ := fs.ReadFile(files, e.Name())
		out[e.Name()] = string(data)
	}
	return out
}
