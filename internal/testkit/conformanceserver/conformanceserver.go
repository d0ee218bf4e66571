// Package conformanceserver is an MCP server (mcp-go) that implements what
// the server scenarios of the MCP conformance suite
// (@modelcontextprotocol/conformance, `conformance server --url`) ask of
// the server under test: the test_* tools, resources, prompts,
// completion and logging, as each scenario's description specifies them.
// Tests run the suite against it directly and through toolbus, which
// hosts it as an MCP server and serves its tools again, so that the two
// runs can be compared.
//
// It follows mcp-go's own examples/conformance server, with the tool of
// the json-schema-2020-12 scenario added.
//
// Only tests import this package.
package conformanceserver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
)

// Path is where Start's server answers MCP.
const Path = "/mcp"

// The data the scenarios ask for: a 1x1 PNG and a short WAV.
const (
	testImage = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	testAudio = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
)

// notificationGap is the pause the logging and progress scenarios ask
// for between two notifications (the suite's "~50ms"), so that a client
// receives them as separate messages during the call.
const notificationGap = 50 * time.Millisecond

// New returns the server, with every tool, resource and prompt the
// scenarios call.
func New() *mcpserver.MCPServer {
	s := mcpserver.NewMCPServer("toolbus-conformance-server", "1.0.0",
		mcpserver.WithToolCapabilities(true),
		mcpserver.WithResourceCapabilities(true, true),
		mcpserver.WithPromptCapabilities(true),
		mcpserver.WithCompletions(),
		mcpserver.WithLogging(),
		mcpserver.WithElicitation(),
		mcpserver.WithRecovery())
	s.EnableSampling()
	addContentTools(s)
	addClientRequestTools(s)
	addNotifyingTools(s)
	addResources(s)
	addPrompts(s)
	return s
}

// Server is a running server; URL is its streamable-HTTP endpoint.
type Server struct {
	URL string
}

// Start serves New over streamable HTTP on a loopback port until the
// test ends: stateful sessions, so that sampling and elicitation requests
// reach the client; mcp-go's DNS-rebinding protection left on, as a
// server on loopback should have it. The transport's log (every sampling
// response it delivers, at info) goes to stderr from warnings up.
func Start(t testing.TB) *Server {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h := mcpserver.NewStreamableHTTPServer(New(), mcpserver.WithEndpointPath(Path), mcpserver.WithStateful(true),
		mcpserver.WithStreamableHTTPLogger(log))
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return &Server{URL: ts.URL + Path}
}

// noArgs declares a tool without arguments.
func noArgs(name, description string) mcp.Tool {
	return mcp.NewTool(name, mcp.WithDescription(description))
}

func addContentTools(s *mcpserver.MCPServer) {
	s.AddTool(noArgs("test_simple_text", "Returns a simple text response"),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("This is a simple text response for testing."), nil
		})
	s.AddTool(noArgs("test_image_content", "Returns an image"),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewImageContent(testImage, "image/png")}}, nil
		})
	s.AddTool(noArgs("test_audio_content", "Returns audio"),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewAudioContent(testAudio, "audio/wav")}}, nil
		})
	s.AddTool(noArgs("test_embedded_resource", "Returns an embedded text resource"),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewEmbeddedResource(mcp.TextResourceContents{
				URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource content.",
			})}}, nil
		})
	s.AddTool(noArgs("test_multiple_content_types", "Returns text, an image and an embedded resource"),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				mcp.NewTextContent("Multiple content types test:"),
				mcp.NewImageContent(testImage, "image/png"),
				mcp.NewEmbeddedResource(mcp.TextResourceContents{
					URI: "test://mixed-content-resource", MIMEType: "application/json", Text: `{"test":"data","value":123}`,
				}),
			}}, nil
		})
	s.AddTool(noArgs("test_error_handling", "Always returns a tool error"),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultError("This tool intentionally returns an error for testing"), nil
		})
	// SEP-1613: the schema must reach clients with $schema, $defs and
	// additionalProperties as written.
	s.AddTool(mcp.NewToolWithRawSchema("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", []byte(`{
		"$schema": "https://json-schema.org/draft/2020-12/schema",
		"type": "object",
		"$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
		"properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
		"additionalProperties": false
	}`)),
		func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(fmt.Sprintf("received %s", req.Params.RawArguments)), nil
		})
}

// addClientRequestTools adds the tools that ask the client something:
// sampling and elicitation.
func addClientRequestTools(s *mcpserver.MCPServer) {
	s.AddTool(mcp.NewTool("test_sampling", mcp.WithDescription("Asks the client's LLM for a response"),
		mcp.WithString("prompt", mcp.Description("The prompt to send to the LLM"), mcp.Required())),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			res, err := s.RequestSampling(ctx, mcp.CreateMessageRequest{
				Request: mcp.Request{Method: string(mcp.MethodSamplingCreateMessage)},
				CreateMessageParams: mcp.CreateMessageParams{
					Messages:  []mcp.SamplingMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent(req.GetString("prompt", ""))}},
					MaxTokens: 100,
				},
			})
			if err != nil {
				return mcp.NewToolResultError("sampling failed: " + err.Error()), nil
			}
			text := fmt.Sprintf("%v", res.Content)
			if c, ok := res.Content.(mcp.TextContent); ok {
				text = c.Text
			}
			return mcp.NewToolResultText("LLM response: " + text), nil
		})
	elicit := func(ctx context.Context, message string, schema map[string]any) (*mcp.CallToolResult, error) {
		res, err := s.RequestElicitation(ctx, mcp.ElicitationRequest{
			Request: mcp.Request{Method: string(mcp.MethodElicitationCreate)},
			Params:  mcp.ElicitationParams{Message: message, RequestedSchema: schema},
		})
		if err != nil {
			return mcp.NewToolResultError("elicitation failed: " + err.Error()), nil
		}
		return mcp.NewToolResultText(fmt.Sprintf("Elicitation completed: action=%s, content=%v", res.Action, res.Content)), nil
	}
	s.AddTool(mcp.NewTool("test_elicitation", mcp.WithDescription("Asks the user for information"),
		mcp.WithString("message", mcp.Description("The message to show the user"), mcp.Required())),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return elicit(ctx, req.GetString("message", ""), map[string]any{
				"type": "object",
				"properties": map[string]any{
					"username": map[string]any{"type": "string", "description": "User's response"},
					"email":    map[string]any{"type": "string", "description": "User's email address"},
				},
				"required": []string{"username", "email"},
			})
		})
	s.AddTool(noArgs("test_elicitation_sep1034_defaults", "Asks the user with a default for every primitive type"),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return elicit(ctx, "Provide your information", map[string]any{
				"type": "object",
				"properties": map[string]any{
					"name":     map[string]any{"type": "string", "description": "User name", "default": "John Doe"},
					"age":      map[string]any{"type": "integer", "description": "User age", "default": 30},
					"score":    map[string]any{"type": "number", "description": "User score", "default": 95.5},
					"status":   map[string]any{"type": "string", "description": "User status", "enum": []string{"active", "inactive", "pending"}, "default": "active"},
					"verified": map[string]any{"type": "boolean", "description": "Verification status", "default": true},
				},
			})
		})
	option := func(value, title string) map[string]any { return map[string]any{"const": value, "title": title} }
	s.AddTool(noArgs("test_elicitation_sep1330_enums", "Asks the user with every kind of enum"),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return elicit(ctx, "Select options", map[string]any{
				"type": "object",
				"properties": map[string]any{
					"untitledSingle": map[string]any{"type": "string", "enum": []string{"option1", "option2", "option3"}},
					"titledSingle":   map[string]any{"type": "string", "oneOf": []any{option("value1", "First Option"), option("value2", "Second Option")}},
					"legacyEnum":     map[string]any{"type": "string", "enum": []string{"opt1", "opt2", "opt3"}, "enumNames": []string{"Option One", "Option Two", "Option Three"}},
					"untitledMulti":  map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": []string{"option1", "option2", "option3"}}},
					"titledMulti":    map[string]any{"type": "array", "items": map[string]any{"anyOf": []any{option("value1", "First Choice"), option("value2", "Second Choice")}}},
				},
			})
		})
}

// addNotifyingTools adds the tools that send notifications while they
// run: log messages and progress.
//
// Each pauses once more after its last notification. mcp-go v1.2.1 loses
// a notification sent just before a tool returns about half the time
// (mcp-go's own conformance baseline lists these two scenarios as
// expected failures): a session's notifications go to whichever of its
// streams takes them first, the call's POST stream or the client's GET
// stream, where one that comes after the call's result is too late; and
// the POST stream's forwarder drops one it took while the result was
// being written. With the pause, the last notification is written before
// the result is.
func addNotifyingTools(s *mcpserver.MCPServer) {
	s.AddTool(noArgs("test_tool_with_logging", "Sends three log messages while it runs"),
		func(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
				if i > 0 {
					if err := pause(ctx); err != nil {
						return nil, err
					}
				}
				n := mcp.NewLoggingMessageNotification(mcp.LoggingLevelInfo, "conformance-server", msg)
				if err := s.SendLogMessageToClient(ctx, n); err != nil {
					return nil, err
				}
			}
			if err := pause(ctx); err != nil {
				return nil, err
			}
			return mcp.NewToolResultText("Tool with logging executed successfully"), nil
		})
	s.AddTool(noArgs("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100 when asked for progress"),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var token mcp.ProgressToken
			if req.Params.Meta != nil {
				token = req.Params.Meta.ProgressToken
			}
			for i, progress := range []int{0, 50, 100} {
				if i > 0 {
					if err := pause(ctx); err != nil {
						return nil, err
					}
				}
				if token == nil {
					continue
				}
				params := map[string]any{"progressToken": token, "progress": progress, "total": 100}
				if err := s.SendNotificationToClient(ctx, string(mcp.MethodNotificationProgress), params); err != nil {
					return nil, err
				}
			}
			if err := pause(ctx); err != nil {
				return nil, err
			}
			return mcp.NewToolResultText("Tool with progress executed successfully"), nil
		})
}

// pause waits notificationGap, or until ctx ends.
func pause(ctx context.Context) error {
	t := time.NewTimer(notificationGap)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func addResources(s *mcpserver.MCPServer) {
	s.AddResource(mcp.NewResource("test://static-text", "static-text",
		mcp.WithResourceDescription("A static text resource"), mcp.WithMIMEType("text/plain")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: "test://static-text", MIMEType: "text/plain",
				Text: "This is the content of the static text resource."}}, nil
		})
	s.AddResource(mcp.NewResource("test://static-binary", "static-binary",
		mcp.WithResourceDescription("A static binary resource"), mcp.WithMIMEType("image/png")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.BlobResourceContents{URI: "test://static-binary", MIMEType: "image/png", Blob: testImage}}, nil
		})
	s.AddResource(mcp.NewResource("test://watched-resource", "watched-resource",
		mcp.WithResourceDescription("A resource to subscribe to"), mcp.WithMIMEType("text/plain")),
		func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: "test://watched-resource", MIMEType: "text/plain",
				Text: "Watched resource content"}}, nil
		})
	s.AddResourceTemplate(mcp.NewResourceTemplate("test://template/{id}/data", "template",
		mcp.WithTemplateDescription("A resource template with a parameter"), mcp.WithTemplateMIMEType("application/json")),
		func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			id := strings.TrimSuffix(strings.TrimPrefix(req.Params.URI, "test://template/"), "/data")
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "application/json",
				Text: fmt.Sprintf(`{"id":%q,"templateTest":true,"data":"Data for ID: %s"}`, id, id)}}, nil
		})
}

func addPrompts(s *mcpserver.MCPServer) {
	text := func(s string) []mcp.PromptMessage {
		return []mcp.PromptMessage{{Role: mcp.RoleUser, Content: mcp.NewTextContent(s)}}
	}
	s.AddPrompt(mcp.NewPrompt("test_simple_prompt", mcp.WithPromptDescription("A simple prompt without arguments")),
		func(context.Context, mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: text("This is a simple prompt for testing.")}, nil
		})
	s.AddPrompt(mcp.NewPrompt("test_prompt_with_arguments", mcp.WithPromptDescription("A prompt with required arguments"),
		mcp.WithArgument("arg1", mcp.ArgumentDescription("First test argument"), mcp.RequiredArgument()),
		mcp.WithArgument("arg2", mcp.ArgumentDescription("Second test argument"), mcp.RequiredArgument())),
		func(_ context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			a := req.Params.Arguments
			return &mcp.GetPromptResult{Messages: text(fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", a["arg1"], a["arg2"]))}, nil
		})
	s.AddPrompt(mcp.NewPrompt("test_prompt_with_embedded_resource", mcp.WithPromptDescription("A prompt with an embedded resource"),
		mcp.WithArgument("resourceUri", mcp.ArgumentDescription("URI of the resource to embed"), mcp.RequiredArgument())),
		func(_ context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: append([]mcp.PromptMessage{{Role: mcp.RoleUser,
				Content: mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: req.Params.Arguments["resourceUri"], MIMEType: "text/plain",
					Text: "Embedded resource content for testing."})}},
				text("Please process the embedded resource above.")...)}, nil
		})
	s.AddPrompt(mcp.NewPrompt("test_prompt_with_image", mcp.WithPromptDescription("A prompt with an image")),
		func(context.Context, mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: append([]mcp.PromptMessage{{Role: mcp.RoleUser,
				Content: mcp.NewImageContent(testImage, "image/png")}}, text("Please analyze the image above.")...)}, nil
		})
}
