package mcp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/mcpsession"
	"github.com/toolbus/toolbus/internal/testkit/npmpeer"
)

// newFeatureServer is an MCP server with prompts, resources and a
// template of resources, each with fields mcp-go's types do not know
// (which must pass through as sent); options given come after its own.
func newFeatureServer(options ...server.ServerOption) *server.MCPServer {
	s := server.NewMCPServer("features", "1.0", append([]server.ServerOption{server.WithPromptCapabilities(true), server.WithResourceCapabilities(false, true),
		server.WithCompletions(), server.WithPromptCompletionProvider(names{}), server.WithResourceCompletionProvider(names{})}, options...)...)
	s.AddPrompt(mcp.NewPrompt("greeting", mcp.WithPromptDescription("greets someone"),
		mcp.WithArgument("name", mcp.ArgumentDescription("who"), mcp.RequiredArgument())),
		func(_ context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return mcp.NewGetPromptResult("a greeting", []mcp.PromptMessage{
				mcp.NewPromptMessage(mcp.RoleUser, mcp.TextContent{Type: "text", Text: "Say hello to " + req.Params.Arguments["name"],
					Annotated: mcp.Annotated{Annotations: &mcp.Annotations{Audience: []mcp.Role{mcp.RoleUser}}}}),
				mcp.NewPromptMessage(mcp.RoleAssistant, mcp.NewImageContent("aGVsbG8=", "image/png")),
			}), nil
		})
	s.AddResource(mcp.NewResource("notes://readme", "readme", mcp.WithResourceDescription("the readme"), mcp.WithMIMEType("text/markdown")),
		func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, MIMEType: "text/markdown", Text: "# Read me\n",
				Meta: map[string]any{"x-origin": "test"}}}, nil
		})
	s.AddResource(mcp.NewResource("notes://logo", "logo", mcp.WithMIMEType("image/png")),
		func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.BlobResourceContents{URI: req.Params.URI, MIMEType: "image/png", Blob: "iVBORw0KGgo="}}, nil
		})
	s.AddResource(mcp.NewResource("file:///home/ada/.ssh/id_rsa", "key"),
		func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, Text: "-----BEGIN OPENSSH PRIVATE KEY-----"}}, nil
		})
	s.AddResourceTemplate(mcp.NewResourceTemplate("notes://day/{n}", "day", mcp.WithTemplateDescription("the notes of a day")),
		func(_ context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
			return []mcp.ResourceContents{mcp.TextResourceContents{URI: req.Params.URI, Text: "notes of " + req.Params.URI}}, nil
		})
	return s
}

// names completes a prompt's argument or a template's variable from a
// list of names, saying where it was asked.
type names struct{}

func (names) complete(where, value string) (*mcp.Completion, error) {
	var out []string
	for _, n := range []string{"Ada", "Alan", "Grace"} {
		if strings.HasPrefix(n, value) {
			out = append(out, n+" ("+where+")")
		}
	}
	return &mcp.Completion{Values: out, Total: len(out)}, nil
}

func (n names) CompletePromptArgument(_ context.Context, prompt string, arg mcp.CompleteArgument, _ mcp.CompleteContext) (*mcp.Completion, error) {
	return n.complete(prompt+"/"+arg.Name, arg.Value)
}

func (n names) CompleteResourceArgument(_ context.Context, uri string, arg mcp.CompleteArgument, _ mcp.CompleteContext) (*mcp.Completion, error) {
	return n.complete(uri+"/"+arg.Name, arg.Value)
}

// featureFleet is a fleet hosting newFeatureServer's features, trusted or
// not, a facade in front of it and an MCP client of the facade.
func featureFleet(t *testing.T, trust bool) (direct, through *mcpclient.Client) {
	t.Helper()
	direct, through, _ = featureFleetAt(t, trust)
	return direct, through
}

// featureFleetAt is featureFleet, also returning the facade's URL.
func featureFleetAt(t *testing.T, trust bool) (direct, through *mcpclient.Client, facadeURL string) {
	t.Helper()
	direct, through, facadeURL, _ = featureFleetOf(t, newFeatureServer(), nil, trust)
	return direct, through, facadeURL
}

// featureFleetOf is featureFleetAt with backend as the server, its HTTP
// handler wrapped in wrap when not nil, also returning the fleet.
func featureFleetOf(t *testing.T, backend *server.MCPServer, wrap func(http.Handler) http.Handler, trust bool) (direct, through *mcpclient.Client, facadeURL string, f *fleet) {
	t.Helper()
	url := httpServer(t, backend, wrap)
	f = startFleet(t, parse(t, fmt.Sprintf(`{"mcpServers": {"notes": {"httpUrl": %q, "trust": %v}}}`, url, trust)))
	f.waitState(t, "notes", events.MCPConnected)
	facadeURL = serveFacade(t, f.bus)
	through = connectHTTP(t, facadeURL, "", "features-client")
	direct = connectHTTP(t, url, "", "features-client")
	// Until the facade lists what the server offers.
	if !testkit.Poll(30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err1 := through.ListPrompts(ctx, mcp.ListPromptsRequest{})
		r, err2 := through.ListResources(ctx, mcp.ListResourcesRequest{})
		return err1 == nil && err2 == nil && len(p.Prompts) == 1 && len(r.Resources) == 3
	}) {
		t.Fatal("the facade never listed the server's prompt and resources")
	}
	return direct, through, facadeURL, f
}

// A client of protocol 2026-07-28 of another implementation, the
// TypeScript SDK's, gets the same prompts and resources through the facade
// as mcp-go's client gets from the server itself.
func TestFacadeServesPromptsAndResourcesToATypeScriptModernClient(t *testing.T) {
	t.Parallel()
	node := npmpeer.Node(t)
	sdk := npmpeer.Require(t, npmpeer.ModernClient)
	direct, _, url := featureFleetAt(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "testdata/modern-client.mjs", sdk, url, "features", "greeting", `{"name":"Ada"}`, "notes://readme")
	cmd.Env = append(os.Environ(), "TOOLBUS_TEST_TOKEN="+testToken)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the TypeScript client: %v\n%s", err, stderr.String())
	}
	var got struct {
		Prompts, Resources, Prompt, Resource json.RawMessage
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the TypeScript client's output does not decode: %v\n%s", err, out)
	}
	prompts, err := direct.ListPrompts(ctx, mcp.ListPromptsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	resources, err := direct.ListResources(ctx, mcp.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	req := mcp.GetPromptRequest{}
	req.Params.Name, req.Params.Arguments = "greeting", map[string]string{"name": "Ada"}
	prompt, err := direct.GetPrompt(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	read, err := readURI(ctx, "notes://readme")(direct)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		got  json.RawMessage
		want any
	}{
		{"prompts/list", got.Prompts, prompts.Prompts},
		{"resources/list", got.Resources, resources.Resources},
		{"prompts/get", got.Prompt, prompt.Messages},
		{"resources/read", got.Resource, read},
	} {
		var g, w any
		if err := json.Unmarshal(c.got, &g); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(asJSON(t, c.want)), &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s: the TypeScript client got %s through toolbus, the server gives %s", c.what, c.got, asJSON(t, c.want))
		}
	}
}

// asJSON is v encoded, for comparing what two servers answered.
func asJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// The prompts and resources of a trusted server reach an MCP client of
// the facade as the server gave them: the same lists, the same results,
// annotations and _meta included, as a client of the server itself gets.
// A URI no resource or template of the fleet names is not found.
func TestFacadeServesTheServersPromptsAndResources(t *testing.T) {
	t.Parallel()
	direct, through := featureFleet(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, c := range []struct {
		what string
		get  func(c *mcpclient.Client) (any, error)
	}{
		{"prompts/list", func(c *mcpclient.Client) (any, error) {
			r, err := c.ListPrompts(ctx, mcp.ListPromptsRequest{})
			if r != nil {
				return r.Prompts, err
			}
			return nil, err
		}},
		{"resources/list", func(c *mcpclient.Client) (any, error) {
			r, err := c.ListResources(ctx, mcp.ListResourcesRequest{})
			if r != nil {
				return r.Resources, err
			}
			return nil, err
		}},
		{"resources/templates/list", func(c *mcpclient.Client) (any, error) {
			r, err := c.ListResourceTemplates(ctx, mcp.ListResourceTemplatesRequest{})
			if r != nil {
				return r.ResourceTemplates, err
			}
			return nil, err
		}},
		{"prompts/get", func(c *mcpclient.Client) (any, error) {
			req := mcp.GetPromptRequest{}
			req.Params.Name, req.Params.Arguments = "greeting", map[string]string{"name": "Ada"}
			r, err := c.GetPrompt(ctx, req)
			if r != nil {
				return map[string]any{"description": r.Description, "messages": r.Messages}, err
			}
			return nil, err
		}},
		{"completion/complete of a prompt's argument", complete(ctx, mcp.PromptReference{Type: "ref/prompt", Name: "greeting"}, "name", "A")},
		{"completion/complete of a template's variable", complete(ctx, mcp.ResourceReference{Type: "ref/resource", URI: "notes://day/{n}"}, "n", "G")},
		{"resources/read text", readURI(ctx, "notes://readme")},
		{"resources/read blob", readURI(ctx, "notes://logo")},
		{"resources/read of a template", readURI(ctx, "notes://day/7")},
	} {
		want, err := c.get(direct)
		if err != nil {
			t.Fatalf("%s directly: %v", c.what, err)
		}
		got, err := c.get(through)
		if err != nil {
			t.Errorf("%s through toolbus: %v", c.what, err)
			continue
		}
		if w, g := asJSON(t, want), asJSON(t, got); w != g {
			t.Errorf("%s through toolbus differs:\n got %s\nwant %s", c.what, g, w)
		}
	}
	if _, err := readURI(ctx, "notes://nowhere")(through); err == nil {
		t.Error("a URI nothing names was read")
	}
	// No tool list shows them.
	for _, name := range toolNames(t, through) {
		if strings.Contains(name, "prompt.") || strings.Contains(name, "resource.") {
			t.Errorf("tools/list shows %s", name)
		}
	}
}

func complete(ctx context.Context, ref any, arg, value string) func(c *mcpclient.Client) (any, error) {
	return func(c *mcpclient.Client) (any, error) {
		req := mcp.CompleteRequest{}
		req.Params.Ref = ref
		req.Params.Argument = mcp.CompleteArgument{Name: arg, Value: value}
		r, err := c.Complete(ctx, req)
		if r != nil {
			return r.Completion, err
		}
		return nil, err
	}
}

func readURI(ctx context.Context, uri string) func(c *mcpclient.Client) (any, error) {
	return func(c *mcpclient.Client) (any, error) {
		req := mcp.ReadResourceRequest{}
		req.Params.URI = uri
		r, err := c.ReadResource(ctx, req)
		if r != nil {
			return r.Contents, err
		}
		return nil, err
	}
}

// A get or a read is a call the policy judges: a resource that names a
// key file is denied whatever the server's trust, and the features of a
// server that is not trusted ask, which with no approver is a refusal.
func TestFacadeJudgesReadsAndGets(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, trusted := featureFleet(t, true)
	_, err := readURI(ctx, "file:///home/ada/.ssh/id_rsa")(trusted)
	if err == nil || !strings.Contains(err.Error(), "POLICY_DENIED") {
		t.Errorf("a key file read as a resource of a trusted server: %v", err)
	}

	_, untrusted := featureFleet(t, false)
	if _, err := readURI(ctx, "notes://readme")(untrusted); err == nil || !strings.Contains(err.Error(), "POLICY_DENIED") || !strings.Contains(err.Error(), "not trusted") {
		t.Errorf("a resource of a server that is not trusted, no approver: %v", err)
	}
	req := mcp.GetPromptRequest{}
	req.Params.Name, req.Params.Arguments = "greeting", map[string]string{"name": "Ada"}
	if _, err := untrusted.GetPrompt(ctx, req); err == nil || !strings.Contains(err.Error(), "POLICY_DENIED") {
		t.Errorf("a prompt of a server that is not trusted, no approver: %v", err)
	}
}

// The person in front of a client of protocol 2026-07-28 is asked about a
// get or a read the policy asks about, as about a tool: with an
// input-required result of prompts/get or resources/read, whose retry
// carries the answer. An accept gets what the server itself gives; a
// decline refuses with the person's reason; a retry that carries the
// state of one request for another is refused.
func TestFacadeAsksAModernClientsUserForReadsAndGets(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	direct, _, url := featureFleetAt(t, false)
	user := &userAtClient{answer: respond(mcp.ElicitationResponseActionAccept, nil)}
	tr, err := transport.NewStreamableHTTP(url, transport.WithHTTPLogger(bustest.Quiet()), transport.WithHTTPHeaders(testAuth))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpclient.NewClient(tr, mcpclient.WithElicitationHandler(user))
	mcpsession.InitializeModern(t, c, "modern-reader", "1.0")

	prompt := mcp.GetPromptRequest{}
	prompt.Params.Name, prompt.Params.Arguments = "greeting", map[string]string{"name": "Ada"}
	got, err := c.GetPrompt(ctx, prompt)
	if err != nil {
		t.Fatalf("an accepted prompt get: %v", err)
	}
	want, err := direct.GetPrompt(ctx, prompt)
	if err != nil {
		t.Fatal(err)
	}
	if asJSON(t, got.Messages) != asJSON(t, want.Messages) {
		t.Errorf("the accepted prompt's messages: %s, want %s", asJSON(t, got.Messages), asJSON(t, want.Messages))
	}
	readme := func(c *mcpclient.Client) (*mcp.ReadResourceResult, error) {
		req := mcp.ReadResourceRequest{}
		req.Params.URI = "notes://readme"
		return c.ReadResource(ctx, req)
	}
	read, err := readme(c)
	if err != nil {
		t.Fatalf("an accepted resource read: %v", err)
	}
	wantRead, err := readme(direct)
	if err != nil {
		t.Fatal(err)
	}
	if asJSON(t, read.Contents) != asJSON(t, wantRead.Contents) || read.NeedsInput() {
		t.Errorf("the accepted read: %s, want %s", asJSON(t, read), asJSON(t, wantRead.Contents))
	}
	shown := user.shown()
	if len(shown) != 2 || !strings.Contains(shown[0], "greeting") || !strings.Contains(shown[1], "notes://readme") {
		t.Errorf("the user was shown %q; want the prompt's question, then the resource's", shown)
	}

	user.answer = respond(mcp.ElicitationResponseActionDecline, map[string]any{"reason": "not the readme"})
	if _, err := readme(c); err == nil || !strings.Contains(err.Error(), "declined: not the readme") {
		t.Errorf("a declined read: %v", err)
	}

	// The state of a question about the prompt, sent back with a read.
	res := modernPost(t, url, "modern-reader", "prompts/get", map[string]any{"name": "greeting", "arguments": map[string]any{"name": "Ada"}},
		map[string]any{"elicitation": map[string]any{}})
	result, _ := res["result"].(map[string]any)
	state, _ := result["requestState"].(string)
	if result["resultType"] != "input_required" || state == "" {
		t.Fatalf("a modern prompt get that asks: %v", res)
	}
	res = modernPost(t, url, "modern-reader", "resources/read", map[string]any{"uri": "notes://readme", "requestState": state,
		"inputResponses": map[string]any{"toolbus_approval": map[string]any{"action": "accept"}}}, map[string]any{"elicitation": map[string]any{}})
	if e, _ := res["error"].(map[string]any); e == nil || !strings.Contains(fmt.Sprint(e["message"]), "integrity check") {
		t.Errorf("a read that carries a prompt get's state: %v", res)
	}
}
