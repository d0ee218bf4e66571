package main

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/tools/txtar"
)

// FuzzDecodeChat: whatever the model endpoint sends, decoding gives a
// message or an error, and a message's tool calls can be answered.
func FuzzDecodeChat(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txtar"))
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range txtar.Parse(data).Files {
			f.Add(file.Data)
		}
	}
	f.Add([]byte(`{"choices":[{"message":{"tool_calls":[{"id":"","function":{"name":"x"}}]}}]}`))
	f.Add([]byte(`{"choices":[]}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := decodeChat(raw)
		if err != nil {
			return
		}
		for _, c := range m.ToolCalls {
			if c.ID == "" || c.Function.Name == "" {
				t.Fatalf("accepted a tool call without id or name: %+v", c)
			}
		}
	})
}
