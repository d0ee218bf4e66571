package mcp_test

// Tool fidelity through the facade: a backend MCP server's tools and
// results reach an MCP client of `toolbus mcp serve` as the server sent
// them. The tests are differential: the same request goes to the backend
// directly and through the facade (backend → MCP manager → catalogue and
// bus → facade), over streamable HTTP both, and the two answers are
// compared as JSON, apart from what the comparison's normalisers name.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	toolmcp "github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

// rawTools are the tools/list entries of rawBackend, as a server that is
// not written with mcp-go may send them: keys mcp-go's types do not have
// (annotations' x-vendor-cost, an icon's x-extra), a _meta number past
// 2^53, an outputSchema with keywords mcp-go's schema type drops.
var rawTools = []string{
	`{"name":"raw_weather","title":"Weather","description":"The weather now.",
	  "inputSchema":{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"city":{"type":"string","minLength":1}},"required":["city"],"additionalProperties":false},
	  "outputSchema":{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","properties":{"temp":{"type":"number","multipleOf":0.5},"when":{"type":"string","format":"date-time"}},"required":["temp"]},
	  "annotations":{"title":"Weather (annotations)","readOnlyHint":true,"openWorldHint":true,"x-vendor-cost":{"tier":2}},
	  "icons":[{"src":"https://raw.test/w.svg","mimeType":"image/svg+xml","sizes":["any"],"theme":"dark","x-extra":1}],
	  "_meta":{"raw.test/id":"w-1","raw.test/n":12345678901234567890}}`,
	`{"name":"raw_mixed","description":"Every kind of block.","inputSchema":{"type":"object"}}`,
	`{"name":"raw_fail","inputSchema":{"type":"object"},"annotations":{"destructiveHint":false}}`,
	`{"name":"raw_structured","inputSchema":{"type":"object"},"outputSchema":{"type":"object","properties":{"n":{"type":"integer"}}}}`,
}

// rawResults are what rawBackend answers to tools/call, by tool.
var rawResults = map[string]string{
	"raw_weather": `{"content":[{"type":"text","text":"{\"temp\":21.5,\"when\":\"2026-11-26T10:00:00Z\"}"}],
		"structuredContent":{"temp":21.50,"when":"2026-11-26T10:00:00Z","big":12345678901234567890},"_meta":{"raw.test/trace":"abc"}}`,
	"raw_mixed": `{"content":[
		{"type":"text","text":"Operation completed successfully","annotations":{"priority":0.7,"audience":["user"]},"_meta":{"raw.test/k":"v"}},
		{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png","annotations":{"priority":0.5,"audience":["user"],"lastModified":"2025-01-12T15:00:58Z"}},
		{"type":"resource_link","uri":"test://static/resource/1","name":"Blob Resource 1","title":"One","size":1024},
		{"type":"resource_link","uri":"test://static/resource/2","name":"Text Resource 2","description":"Resource 2: plaintext resource","mimeType":"text/plain","annotations":{"audience":["assistant"]}},
		{"type":"resource","resource":{"uri":"test://static/resource/3","mimeType":"text/plain","text":"Resource 3: plain text","_meta":{"raw.test/r":true}},"annotations":{"priority":0.25}},
		{"type":"resource","resource":{"uri":"test://static/resource/4","mimeType":"application/octet-stream","blob":"AAECAw=="},"_meta":{"raw.test/b":[1,2]}},
		{"type":"text","text":"the end"}
	]}`,
	"raw_fail": `{"content":[{"type":"text","text":"Error: Operation failed","annotations":{"priority":1,"audience":["user","assistant"]}},
		{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}],"isError":true}`,
	"raw_structured": `{"content":[],"structuredContent":{"n":7}}`,
}

// rawBackend is an MCP server over streamable HTTP that answers with the
// JSON above as it is: what a server sends, byte for byte, with no
// library of ours in between.
func rawBackend(t *testing.T) string {
	t.Helper()
	tools := "[" + strings.Join(rawTools, ",") + "]"
	var sessions atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPost:
		case http.MethodDelete:
			return
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name            string `json:"name"`
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if len(req.ID) == 0 {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		var result string
		switch req.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", fmt.Sprintf("raw-%d", sessions.Add(1)))
			result = fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"1"}}`, req.Params.ProtocolVersion)
		case "ping":
			result = `{}`
		case "tools/list":
			result = `{"tools":` + tools + `}`
		case "tools/call":
			result = rawResults[req.Params.Name]
		}
		w.Header().Set("Content-Type", "application/json")
		if result == "" {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no %s here"}}`, req.ID, req.Method)
			return
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, result)
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp"
}

// goBackend is an mcp-go server that declares and returns every field of
// MCP's its types have: title, outputSchema, annotations, icons, _meta;
// structuredContent, annotated content, links, embedded resources.
func goBackend() *server.MCPServer {
	s := server.NewMCPServer("fidelity-go", "1.0", server.WithToolCapabilities(true))
	weather := mcp.NewTool("go_weather", mcp.WithToolTitle("Weather"), mcp.WithDescription("The weather now."),
		mcp.WithString("city", mcp.Required(), mcp.MinLength(1)), mcp.WithTitleAnnotation("Weather (annotations)"),
		mcp.WithReadOnlyHintAnnotation(true), mcp.WithOpenWorldHintAnnotation(true))
	weather.RawOutputSchema = json.RawMessage(`{"type":"object","properties":{"temp":{"type":"number","multipleOf":0.5}},"required":["temp"]}`)
	weather.Icons = []mcp.Icon{{Src: "https://go.test/w.png", MIMEType: "image/png", Sizes: []string{"48x48"}, Theme: mcp.IconThemeLight}}
	weather.Meta = &mcp.Meta{AdditionalFields: map[string]any{"go.test/id": "w-1"}}
	s.AddTool(weather, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res := mcp.NewToolResultStructured(map[string]any{"temp": 21.5}, `{"temp":21.5}`)
		res.Meta = &mcp.Meta{AdditionalFields: map[string]any{"go.test/trace": "abc"}}
		return res, nil
	})
	priority, size := 0.7, int64(1024)
	s.AddTool(mcp.NewTool("go_mixed"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			mcp.TextContent{Type: "text", Text: "Operation completed successfully",
				Annotated: mcp.Annotated{Annotations: &mcp.Annotations{Priority: &priority, Audience: []mcp.Role{mcp.RoleUser}}},
				Meta:      &mcp.Meta{AdditionalFields: map[string]any{"go.test/k": "v"}}},
			mcp.ImageContent{Type: "image", Data: "iVBORw0KGgo=", MIMEType: "image/png",
				Annotated: mcp.Annotated{Annotations: &mcp.Annotations{LastModified: "2025-01-12T15:00:58Z"}}},
			mcp.ResourceLink{Type: "resource_link", URI: "test://static/resource/1", Name: "Blob Resource 1", Title: "One",
				Description: "a blob", MIMEType: "application/octet-stream", Size: &size},
			mcp.EmbeddedResource{Type: "resource", Resource: mcp.TextResourceContents{URI: "test://static/resource/3", MIMEType: "text/plain",
				Text: "Resource 3", Meta: map[string]any{"go.test/r": true}},
				Annotated: mcp.Annotated{Annotations: &mcp.Annotations{Audience: []mcp.Role{mcp.RoleAssistant}}}},
			mcp.EmbeddedResource{Type: "resource", Resource: mcp.BlobResourceContents{URI: "test://static/resource/4", MIMEType: "application/pdf", Blob: "AAECAw=="}},
		}}, nil
	})
	s.AddTool(mcp.NewTool("go_fail"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res := mcp.NewToolResultError("it broke")
		res.Content = append(res.Content, mcp.NewImageContent("iVBORw0KGgo=", "image/png"))
		return res, nil
	})
	// Past the limits: a structuredContent of more characters than a
	// result keeps, and a text resource larger than a result carries.
	s.AddTool(mcp.NewTool("go_big_structured"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return mcp.NewToolResultStructured(map[string]any{"rows": strings.Repeat("r", 100_000)}, "many rows"), nil
	})
	s.AddTool(mcp.NewTool("go_big_resource"), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.NewTextContent("the log:"),
			mcp.NewEmbeddedResource(mcp.TextResourceContents{URI: "file:///big.log", MIMEType: "text/plain", Text: bigLog})}}, nil
	})
	return s
}

// bigLog is a text resource larger than the parts a result carries
// itself.
var bigLog = strings.Repeat("a line of the log\n", 20_000)

// serveFacade serves a facade of the fleet on b over streamable HTTP on
// loopback, and returns its endpoint.
func serveFacade(t *testing.T, b *bus.Bus) string {
	t.Helper()
	conn := bustest.Connect(t, b)
	fac, err := toolmcp.StartFacade(context.Background(), toolmcp.FacadeConfig{Conn: conn.Conn(), JS: conn.JetStream(), Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(fac.HTTPHandler(toolmcp.HTTPConfig{Addr: ln.Addr().(*net.TCPAddr), Tokens: clientTokens(t, "tester", testToken)}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		fac.Close()
	})
	return srv.URL + toolmcp.HTTPPath
}

// rawRequest sends method with params on c's transport, under an id of
// its own, and returns the result's JSON as it came.
func rawRequest(t *testing.T, c *mcpclient.Client, method string, params any) json.RawMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := mcp.NewRequestId(fmt.Sprintf("fidelity-%d", rawIDs.Add(1)))
	resp, err := c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: id, Method: method, Params: params})
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if resp.Error != nil {
		t.Fatalf("%s: %v", method, resp.Error.AsError())
	}
	return resp.Result
}

var rawIDs atomic.Int64

// listedTools is a tools/list result's entries by name, as JSON values.
func listedTools(t *testing.T, c *mcpclient.Client) map[string]map[string]any {
	t.Helper()
	var page struct {
		Tools []map[string]any `json:"tools"`
	}
	decode(t, rawRequest(t, c, "tools/list", map[string]any{}), &page)
	out := map[string]map[string]any{}
	for _, tl := range page.Tools {
		out[tl["name"].(string)] = tl
	}
	return out
}

// decode decodes data into v keeping numbers as they were written.
func decode(t *testing.T, data []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
}

// sameJSON fails the test when got and want differ as JSON values.
func sameJSON(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("%s through the facade:\n%s\nstraight from the server:\n%s", what, g, w)
	}
}

// asListed is a backend's tools/list entry as the facade lists it. The
// facade does not list:
//   - execution: toolbus runs no call as a task (a tool that must be one
//     is not hosted at all), so no taskSupport is offered;
//   - annotation and icon keys MCP does not define (x-vendor-cost): the
//     catalogue keeps them, but mcp-go's Tool has no room for them.
//
// And mcp-go writes annotations always, {} when there are none.
func asListed(entry map[string]any) map[string]any {
	out := maps(entry)
	delete(out, "execution")
	if a, ok := out["annotations"].(map[string]any); ok {
		out["annotations"] = only(a, "title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
	} else {
		out["annotations"] = map[string]any{}
	}
	if icons, ok := out["icons"].([]any); ok {
		kept := make([]any, len(icons))
		for i, icon := range icons {
			kept[i] = only(icon.(map[string]any), "src", "mimeType", "sizes", "theme")
		}
		out["icons"] = kept
	}
	return out
}

// withoutToolbusMeta is a facade's result without toolbus's own _meta
// keys (toolbus/invocationId...), and without _meta when none is left.
func withoutToolbusMeta(res map[string]any) map[string]any {
	out := maps(res)
	if meta, ok := out["_meta"].(map[string]any); ok {
		meta = maps(meta)
		for k := range meta {
			if strings.HasPrefix(k, "toolbus/") {
				delete(meta, k)
			}
		}
		out["_meta"] = meta
		if len(meta) == 0 {
			delete(out, "_meta")
		}
	}
	return out
}

// withEmptyContent is a backend's result with "content":[] where it has
// none: mcp-go writes the array always.
func withEmptyContent(res map[string]any) map[string]any {
	out := maps(res)
	if out["content"] == nil {
		out["content"] = []any{}
	}
	return out
}

func maps(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func only(m map[string]any, keys ...string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

// call is a tool and its arguments.
type call struct{ name, args string }

// differential lists the tools, and makes each of calls, straight on the
// backend at backendURL and through the facade, and compares. The tools
// in unhosted are the backend's that toolbus does not host.
func differential(t *testing.T, backendURL, facadeURL string, calls []call, unhosted ...string) {
	t.Helper()
	direct := connectHTTP(t, backendURL, "", "fidelity-direct")
	facade := connectHTTP(t, facadeURL, "", "fidelity-facade")
	want := listedTools(t, direct)
	for _, name := range unhosted {
		delete(want, name)
	}
	if len(want) == 0 {
		t.Fatal("the backend lists no tools")
	}
	var got map[string]map[string]any
	testkit.Eventually(t, "the facade lists the backend's tools", func() bool {
		got = listedTools(t, facade)
		for name := range want {
			if got[name] == nil {
				return false
			}
		}
		return true
	})
	for name, entry := range want {
		sameJSON(t, "tools/list entry "+name, got[name], asListed(entry))
	}
	for _, c := range calls {
		params := map[string]any{"name": c.name, "arguments": json.RawMessage(c.args)}
		// A server may put the time in what it returns: the two calls
		// are made again when they straddle a tick of its clock.
		var viaFacade, straight map[string]any
		for try := 0; try < 3; try++ {
			viaFacade, straight = nil, nil
			decode(t, rawRequest(t, facade, "tools/call", params), &viaFacade)
			decode(t, rawRequest(t, direct, "tools/call", params), &straight)
			viaFacade, straight = withoutToolbusMeta(viaFacade), withEmptyContent(straight)
			if reflect.DeepEqual(viaFacade, straight) {
				break
			}
		}
		sameJSON(t, "tools/call "+c.name+" "+c.args, viaFacade, straight)
		// mcp-go's client reads it as it reads the server's.
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = c.name, json.RawMessage(c.args)
		if _, err := facade.CallTool(context.Background(), req); err != nil {
			t.Errorf("%s: mcp-go's client does not read the facade's result: %v", c.name, err)
		}
	}
}

// TestFacadeFidelity: tools and results of a server not written with
// mcp-go and of one written with it reach a client of the facade as the
// server sent them; the catalogue keeps what the facade cannot list.
func TestFacadeFidelity(t *testing.T) {
	t.Parallel()
	raw, goURL := rawBackend(t), httpServer(t, goBackend(), nil)
	f := startFleet(t, parse(t, fmt.Sprintf(`{"mcpServers":{"raw":{"httpUrl":%q,"trust":true},"gosrv":{"httpUrl":%q,"trust":true}}}`, raw, goURL)))
	f.waitState(t, "raw", events.MCPConnected)
	f.waitState(t, "gosrv", events.MCPConnected)
	facade := serveFacade(t, f.bus)

	t.Run("raw", func(t *testing.T) {
		differential(t, raw, facade, []call{{"raw_weather", `{"city":"Paris"}`}, {"raw_mixed", `{}`}, {"raw_fail", `{}`}, {"raw_structured", `{}`}})
		// What mcp-go's types have no room for is in the catalogue.
		tl := f.waitTool(t, "raw_weather")
		for _, want := range []string{`"x-vendor-cost":{"tier":2}`} {
			if !strings.Contains(string(tl.Annotations), want) {
				t.Errorf("the catalogue's annotations %s lack %s", tl.Annotations, want)
			}
		}
		if !strings.Contains(string(tl.Icons), `"x-extra":1`) || !strings.Contains(string(tl.Meta), `12345678901234567890`) {
			t.Errorf("the catalogue's icons %s, _meta %s; want them as sent", tl.Icons, tl.Meta)
		}
	})
	t.Run("mcp-go", func(t *testing.T) {
		differential(t, goURL, facade, []call{{"go_weather", `{"city":"Paris"}`}, {"go_mixed", `{}`}, {"go_fail", `{}`}})
	})
	t.Run("limits", func(t *testing.T) { checkFidelityLimits(t, f, facade) })
}

// checkFidelityLimits: a structuredContent past the output limit is not
// cut but stored, and the result says where; a text resource too large
// for the result travels by reference and comes back whole as text.
func checkFidelityLimits(t *testing.T, f *fleet, facadeURL string) {
	c := connectHTTP(t, facadeURL, "", "fidelity-limits")
	testkit.Eventually(t, "the facade lists go_big_resource", func() bool { return listedTools(t, c)["go_big_resource"] != nil })

	res := f.call(t, "go_big_structured", `{}`, nil)
	if res.StructuredContent != nil || res.StructuredRef == "" || !strings.Contains(res.LLMContent, res.StructuredRef) {
		t.Errorf("big structuredContent: %d bytes kept, ref %q, text %q; want it stored and the text to say where",
			len(res.StructuredContent), res.StructuredRef, res.LLMContent)
	}
	var viaFacade map[string]any
	decode(t, rawRequest(t, c, "tools/call", map[string]any{"name": "go_big_structured", "arguments": map[string]any{}}), &viaFacade)
	meta, _ := viaFacade["_meta"].(map[string]any)
	if _, ok := viaFacade["structuredContent"]; ok || meta["toolbus/structuredContentRef"] == nil ||
		!strings.Contains(fmt.Sprint(viaFacade["content"]), "too large for the result; it is in the object store at") {
		t.Errorf("big structuredContent through the facade: %.300v", viaFacade)
	}

	res = f.call(t, "go_big_resource", `{}`, nil)
	if len(res.Parts) != 2 || res.Parts[1].Ref == "" || !res.Parts[1].RefText || res.Parts[1].Text != "" {
		t.Fatalf("big resource: parts %+v, want its text by reference", res.Parts)
	}
	got := callTool(t, c, "go_big_resource", `{}`)
	if len(got.Content) != 2 {
		t.Fatalf("big resource through the facade: %d blocks, want 2", len(got.Content))
	}
	if r, ok := got.Content[1].(mcp.EmbeddedResource); !ok {
		t.Errorf("big resource through the facade: %T", got.Content[1])
	} else if text, ok := r.Resource.(mcp.TextResourceContents); !ok || text.Text != bigLog {
		t.Errorf("big resource through the facade: %T, want the text resource whole", r.Resource)
	}
}

// TestFacadeCapabilities: the facade says it serves tools, prompts and
// resources, whose lists change, completions and logging; elicitation is
// a client's capability.
func TestFacadeCapabilities(t *testing.T) {
	t.Parallel()
	ff := startFacade(t, nil, "")
	tr, err := transport.NewStreamableHTTP(ff.url, transport.WithHTTPLogger(bustest.Quiet()), transport.WithHTTPHeaders(testAuth))
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := tr.SendRequest(ctx, transport.JSONRPCRequest{JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId(1), Method: "initialize",
		Params: map[string]any{"protocolVersion": mcp.LATEST_LEGACY_PROTOCOL_VERSION, "capabilities": map[string]any{"elicitation": map[string]any{}},
			"clientInfo": map[string]any{"name": "caps", "version": "1"}}})
	if err != nil || resp.Error != nil {
		t.Fatalf("initialize: %v %+v", err, resp)
	}
	var init struct {
		Capabilities json.RawMessage `json:"capabilities"`
	}
	decode(t, resp.Result, &init)
	var got, want any
	decode(t, init.Capabilities, &got)
	// What the facade serves, and elicitation nowhere: it is a client's.
	const served = `{"tools":{"listChanged":true},"prompts":{"listChanged":true},"resources":{"subscribe":true,"listChanged":true},"completions":{},"logging":{}}`
	decode(t, []byte(served), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("capabilities %s, want %s", init.Capabilities, served)
	}
}

// TestFacadeListsAChangedDeclaration: a server that changes a tool's
// declaration (another outputSchema, title) and says its list changed has
// the facade list the tool anew.
func TestFacadeListsAChangedDeclaration(t *testing.T) {
	t.Parallel()
	s := server.NewMCPServer("evolving", "1.0", server.WithToolCapabilities(true))
	declare := func(version string) {
		tl := mcp.NewTool("evolving", mcp.WithToolTitle("Version "+version))
		tl.RawOutputSchema = json.RawMessage(`{"type":"object","properties":{"v` + version + `":{"type":"string"}}}`)
		s.AddTool(tl, func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText(version), nil
		})
	}
	declare("1")
	url := httpServer(t, s, nil)
	f := startFleet(t, parse(t, fmt.Sprintf(`{"mcpServers":{"evolving":{"httpUrl":%q,"trust":true}}}`, url)))
	f.waitState(t, "evolving", events.MCPConnected)
	c := connectHTTP(t, serveFacade(t, f.bus), "", "fidelity-evolving")
	title := func() any {
		if tl := listedTools(t, c)["evolving"]; tl != nil {
			return tl["title"]
		}
		return nil
	}
	testkit.Eventually(t, "the facade lists version 1", func() bool { return title() == "Version 1" })
	declare("2")
	testkit.Eventually(t, "the catalogue has version 2", func() bool { return f.waitTool(t, "evolving").Title == "Version 2" })
	testkit.Eventually(t, "the facade lists version 2", func() bool { return title() == "Version 2" })
	out := listedTools(t, c)["evolving"]["outputSchema"].(map[string]any)["properties"].(map[string]any)
	if _, ok := out["v2"]; !ok {
		t.Errorf("outputSchema's properties %v, want version 2's", out)
	}
}
