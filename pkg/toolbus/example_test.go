package toolbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/pkg/toolbus"
)

func Example_invoke() {
	f, err := startFleet()
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()

	c, err := toolbus.Connect(ctx, f.URL, toolbus.WithIdentity(toolbus.Identity{ID: "agent:example", Session: "s1"}))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	res, err := c.Invoke(ctx, "read_file", map[string]any{"file_path": "README.md"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.LLMContent)

	// A call the policy denies has a result too, for the model to read.
	res, err = c.Invoke(ctx, "run_shell_command", json.RawMessage(`{"command":"ls && rm -rf /"}`))
	fmt.Println(errors.Is(err, toolbus.ErrPolicyDenied), res.Error.Type, strings.Contains(res.LLMContent, "recursive removal of /"))
	// Output:
	// # hello
	// true POLICY_DENIED true
}

func Example_declarations() {
	f, err := startFleet()
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	c, err := toolbus.Connect(ctx, f.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	decls, err := c.Declarations(ctx, toolbus.OpenAI)
	if err != nil {
		log.Fatal(err)
	}
	var first struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(decls[0], &first); err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.Type, first.Function.Name)

	// The name a model answers with maps back to the catalogue name.
	name, ok, err := c.ToolNameFor(ctx, first.Function.Name)
	fmt.Println(name, ok, err)
	// Output:
	// function list_directory
	// list_directory true <nil>
}

func ExampleClient_Cancel() {
	f, err := startFleet()
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	// The default policy asks a person before running a command.
	if _, err := f.approveAll(events.ProceedOnce, ""); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	c, err := toolbus.Connect(ctx, f.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	started := make(chan struct{})
	var once bool
	done := make(chan error, 1)
	go func() {
		_, err := c.Invoke(ctx, "run_shell_command", map[string]string{"command": "echo started; sleep 300"},
			toolbus.WithInvocationID("long-call"),
			toolbus.WithProgress(func(string) {
				if !once {
					once = true
					close(started)
				}
			}))
		done <- err
	}()
	<-started
	if err := c.Cancel(ctx, "long-call", "the user changed their mind"); err != nil {
		log.Fatal(err)
	}
	err = <-done
	var te *toolbus.ToolError
	fmt.Println(errors.As(err, &te), te.Type, strings.Contains(te.Message, "the user changed their mind"))
	// Output:
	// true CANCELLED true
}

func ExampleClient_ReadOutput() {
	// Results are capped at 100 characters in this fleet.
	f, err := startFleet(func(c *executor.Config) { c.MaxContent = 100 })
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if err := os.WriteFile(filepath.Join(f.Workspace, "big.txt"), []byte(strings.Repeat("0123456789", 1000)), 0o644); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	c, err := toolbus.Connect(ctx, f.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	res, err := c.Invoke(ctx, "read_file", map[string]string{"file_path": "big.txt"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Truncated, res.OutputRef == "TOOLBUS_OUTPUTS/"+res.InvocationID)
	r, err := c.ReadOutput(ctx, res.InvocationID)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	whole, err := io.ReadAll(r)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(whole))
	// Output:
	// true true
	// 10000
}

// Each model API has its own shape of a tool declaration; the name a
// model answers with, in any of them, is what Invoke takes.
func ExampleClient_Declarations() {
	f, err := startFleet()
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	c, err := toolbus.Connect(ctx, f.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for _, format := range []toolbus.Format{toolbus.Gemini, toolbus.Anthropic, toolbus.MCP} {
		decls, err := c.Declarations(ctx, format)
		if err != nil {
			log.Fatal(err)
		}
		var first map[string]json.RawMessage
		if err := json.Unmarshal(decls[0], &first); err != nil {
			log.Fatal(err)
		}
		var name string
		json.Unmarshal(first["name"], &name)
		fmt.Println(format, name, slices.Sorted(maps.Keys(first)))
	}
	// Output:
	// gemini list_directory [description name parameters]
	// anthropic list_directory [description input_schema name]
	// mcp list_directory [description inputSchema name title]
}
