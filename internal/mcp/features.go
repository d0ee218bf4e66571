package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	mcptransport "github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/yosida95/uritemplate/v3"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/tool"
)

// What an MCP server offers beside tools, prompts and resources, is hosted
// the way its tools are: an entry each in the catalogue (kind prompt or
// resource, named by the rules of MCP tools in a namespace of their own,
// "prompt.<name>" and "resource.<name>"), and a get or a read is a call,
// which routing, the policy, confirmation and the audit treat as any
// other. The facade serves them to MCP clients as prompts and resources
// (facade_features.go); no tool list shows them.
//
// The server's declaration and its result travel as it sent them
// (ToolSpec.MCPFeature, Result.MCPResult), read and requested on the
// session's transport directly, so that nothing mcp-go does not know of
// is lost on the way.

// Prefixes of the entries' own names: a prompt and a tool of one server
// may share a name.
const (
	promptPrefix   = "prompt."
	resourcePrefix = "resource."
)

// maxMCPResult is the most bytes of a prompt's or a resource's result a
// call carries: one message holds the result on the bus.
const maxMCPResult = 256 << 10

// features are what a server offers beside tools, as hosted entries.
func (s *server) features(ctx context.Context, sess *session) (entries []tool.Tool, warnings []string, err error) {
	caps := sess.client.GetServerCapabilities()
	if caps.Prompts != nil {
		raws, err := sess.listRaw(ctx, string(mcp.MethodPromptsList), "prompts")
		if err != nil {
			return nil, nil, fmt.Errorf("list prompts: %w", err)
		}
		for _, raw := range raws {
			p, err := newServerPrompt(s, raw)
			if err != nil {
				warnings = append(warnings, err.Error())
				continue
			}
			entries = append(entries, p)
		}
	}
	if caps.Resources != nil {
		names := map[string]bool{}
		raws, err := sess.listRaw(ctx, string(mcp.MethodResourcesList), "resources")
		if err != nil {
			return nil, nil, fmt.Errorf("list resources: %w", err)
		}
		for _, raw := range raws {
			r, err := newServerResource(s, raw, false, names)
			if err != nil {
				warnings = append(warnings, err.Error())
				continue
			}
			entries = append(entries, r)
		}
		raws, err = sess.listRaw(ctx, string(mcp.MethodResourcesTemplatesList), "resourceTemplates")
		if err != nil {
			return nil, nil, fmt.Errorf("list resource templates: %w", err)
		}
		for _, raw := range raws {
			r, err := newServerResource(s, raw, true, names)
			if err != nil {
				warnings = append(warnings, err.Error())
				continue
			}
			entries = append(entries, r)
		}
	}
	return entries, warnings, nil
}

// serverPrompt is one prompt of an MCP server, as an executor hosts it.
type serverPrompt struct {
	srv  *server
	name string // the prompt's name on the server
	spec events.ToolSpec
}

// newServerPrompt declares raw, a prompt the server listed: its arguments
// become a schema of string properties, those the server requires
// required.
func newServerPrompt(srv *server, raw json.RawMessage) (*serverPrompt, error) {
	var p mcp.Prompt
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, fmt.Errorf("a prompt of the prompts/list result does not decode: %w", err)
	}
	if p.Name == "" {
		return nil, errors.New("a prompt of the prompts/list result has no name")
	}
	props := map[string]any{}
	required := []string{}
	for _, a := range p.Arguments {
		prop := map[string]any{"type": "string"}
		if a.Description != "" {
			prop["description"] = a.Description
		}
		props[a.Name] = prop
		if a.Required {
			required = append(required, a.Name)
		}
	}
	params, err := json.Marshal(map[string]any{"type": "object", "properties": props, "required": required})
	if err != nil {
		return nil, fmt.Errorf("prompt %q: arguments: %w", p.Name, err)
	}
	display := p.Title
	if display == "" {
		display = p.Name
	}
	return &serverPrompt{srv: srv, name: p.Name, spec: events.ToolSpec{
		Name:        promptPrefix + p.Name,
		DisplayName: fmt.Sprintf("%s (%s MCP prompt)", display, srv.cfg.Name),
		Description: p.Description,
		Kind:        events.KindPrompt,
		Parameters:  params,
		ReadOnly:    true,
		MCPFeature:  raw,
	}}, nil
}

// Spec implements tool.Tool.
func (p *serverPrompt) Spec() events.ToolSpec { return p.spec }

// Origin implements tool.Origin.
func (p *serverPrompt) Origin() (events.Source, string, bool) {
	return events.SourceMCP, p.srv.cfg.Name, p.srv.cfg.Trust
}

// Timeout implements tool.Timeouter.
func (p *serverPrompt) Timeout() time.Duration { return p.srv.cfg.Timeout }

// Run implements tool.Tool: prompts/get with the call's arguments.
func (p *serverPrompt) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	var args map[string]string
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return tool.Failed(events.ErrInvalidParams, "a prompt's arguments are strings: "+err.Error()), nil
	}
	return p.srv.request(ctx, string(mcp.MethodPromptsGet), map[string]any{"name": p.name, "arguments": args}, promptText)
}

// Operate implements tool.Operator: completion/complete of one of the
// prompt's arguments.
func (p *serverPrompt) Operate(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	if call.Op != events.OpComplete {
		return tool.Failed(events.ErrInvalidParams, fmt.Sprintf("a prompt takes no %s", call.Op)), nil
	}
	return p.srv.complete(ctx, map[string]any{"type": "ref/prompt", "name": p.name}, call.Args)
}

// serverResource is one resource, or one template of resources, of an MCP
// server, as an executor hosts it. Its one argument is the URI to read:
// the resource's own (a schema constant), or one its template matches.
type serverResource struct {
	srv      *server
	uri      string                // a resource's URI
	template *uritemplate.Template // a template's; nil for a resource
	spec     events.ToolSpec
}

// newServerResource declares raw, a resource (or, with template, a
// resource template) the server listed. names holds the entry names the
// server's resources took so far: two of one name get names told apart by
// their URI's digest.
func newServerResource(srv *server, raw json.RawMessage, template bool, names map[string]bool) (*serverResource, error) {
	var d struct {
		Name        string `json:"name"`
		Title       string `json:"title"`
		Description string `json:"description"`
		URI         string `json:"uri"`
		URITemplate string `json:"uriTemplate"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("a resource of the server does not decode: %w", err)
	}
	r := &serverResource{srv: srv, uri: d.URI}
	uriSchema := map[string]any{"type": "string", "description": "the URI of the resource to read"}
	what, where := "resource", d.URI
	if template {
		what, where = "resource template", d.URITemplate
		t, err := uritemplate.New(d.URITemplate)
		if err != nil {
			return nil, fmt.Errorf("resource template %q: %w", d.URITemplate, err)
		}
		r.template = t
		uriSchema["description"] = "the URI to read, which the template " + d.URITemplate + " matches"
	} else {
		if d.URI == "" {
			return nil, fmt.Errorf("a resource %q of the server has no uri", d.Name)
		}
		uriSchema["const"] = d.URI
	}
	name := d.Name
	if name == "" {
		name = where
	}
	own := resourcePrefix + name
	if names[own] {
		sum := sha256.Sum256([]byte(where))
		own += "." + hex.EncodeToString(sum[:4])
	}
	names[own] = true
	params, err := json.Marshal(map[string]any{"type": "object", "properties": map[string]any{"uri": uriSchema}, "required": []string{"uri"}})
	if err != nil {
		return nil, err
	}
	display := d.Title
	if display == "" {
		display = name
	}
	r.spec = events.ToolSpec{
		Name:        own,
		DisplayName: fmt.Sprintf("%s (%s MCP %s)", display, srv.cfg.Name, what),
		Description: d.Description,
		Kind:        events.KindResource,
		Parameters:  params,
		ReadOnly:    true,
		MCPFeature:  raw,
	}
	return r, nil
}

// Spec implements tool.Tool.
func (r *serverResource) Spec() events.ToolSpec { return r.spec }

// Origin implements tool.Origin.
func (r *serverResource) Origin() (events.Source, string, bool) {
	return events.SourceMCP, r.srv.cfg.Name, r.srv.cfg.Trust
}

// Timeout implements tool.Timeouter.
func (r *serverResource) Timeout() time.Duration { return r.srv.cfg.Timeout }

// ValidateArgs implements tool.Validator: a template reads only the URIs
// it matches, so that what the policy judged is what the server reads.
func (r *serverResource) ValidateArgs(raw json.RawMessage) error {
	if r.template == nil {
		return nil // the schema's constant holds it to the resource's URI
	}
	var args struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return err
	}
	if r.template.Match(args.URI) == nil {
		return fmt.Errorf("the URI %q is not one the template %s names", args.URI, r.template.Raw())
	}
	return nil
}

// Paths implements tool.PathNamer: a file: URI names a file, which the
// policy's rules on sensitive paths judge as they judge a read_file.
func (r *serverResource) Paths(args map[string]any) []string {
	uri, _ := args["uri"].(string)
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || u.Path == "" {
		return nil
	}
	return []string{u.Path}
}

// Run implements tool.Tool: resources/read of the call's URI.
func (r *serverResource) Run(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	var args struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return tool.Failed(events.ErrInvalidParams, err.Error()), nil
	}
	return r.srv.request(ctx, string(mcp.MethodResourcesRead), map[string]any{"uri": args.URI}, resourceText)
}

// Operate implements tool.Operator: completion/complete of one of the
// template's variables (a resource has none), and the caller's
// subscription to the updates of the call's URI, and its end
// (subscriptions.go).
func (r *serverResource) Operate(ctx context.Context, call *tool.Call) (*tool.Output, error) {
	switch call.Op {
	case events.OpComplete:
		if r.template == nil {
			return tool.Failed(events.ErrInvalidParams, fmt.Sprintf("the resource %s has no arguments to complete", r.uri)), nil
		}
		return r.srv.complete(ctx, map[string]any{"type": "ref/resource", "uri": r.template.Raw()}, call.Args)
	case events.OpSubscribe, events.OpUnsubscribe:
		var args struct {
			URI string `json:"uri"`
		}
		if err := json.Unmarshal(call.Args, &args); err != nil {
			return tool.Failed(events.ErrInvalidParams, err.Error()), nil
		}
		if call.Op == events.OpSubscribe {
			return r.srv.subs.subscribe(ctx, r.srv, args.URI, call.Caller)
		}
		return r.srv.subs.unsubscribe(ctx, r.srv, args.URI, call.Caller), nil
	}
	return tool.Failed(events.ErrInvalidParams, fmt.Sprintf("a resource takes no %s", call.Op)), nil
}

// complete sends completion/complete for ref, with the argument and
// context of args (MCP's completion params).
func (s *server) complete(ctx context.Context, ref map[string]any, args json.RawMessage) (*tool.Output, error) {
	var p struct {
		Argument json.RawMessage `json:"argument"`
		Context  json.RawMessage `json:"context"`
	}
	if err := json.Unmarshal(args, &p); err != nil || len(p.Argument) == 0 {
		return tool.Failed(events.ErrInvalidParams, "a completion names the argument to complete"), nil
	}
	params := map[string]any{"ref": ref, "argument": p.Argument}
	if len(p.Context) > 0 {
		params["context"] = p.Context
	}
	return s.request(ctx, string(mcp.MethodCompletionComplete), params, func(raw json.RawMessage) string { return string(raw) })
}

// request sends method with params to the server's current session and
// makes its result the output, as sent, with text for people from text.
// An error the server answers is the call's failure, with its message.
func (s *server) request(ctx context.Context, method string, params map[string]any, text func(json.RawMessage) string) (*tool.Output, error) {
	sess := s.current()
	if sess == nil {
		return tool.Failed(events.ErrExecutionFailed, s.unavailable()), nil
	}
	token := sess.newToken()
	params["_meta"] = map[string]any{"progressToken": token}
	defer sess.track(token, nil)()
	result, err := sess.rawRequest(ctx, method, params)
	var rpc *serverError
	switch {
	case errors.As(err, &rpc):
		out := tool.Failed(events.ErrMCPToolError, fmt.Sprintf("%s to MCP server %q: error %d: %s", method, s.cfg.Name, rpc.Code, rpc.Message))
		out.Err.MCPCode = rpc.Code
		return out, nil
	case err != nil && ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case err != nil:
		s.check(sess)
		return tool.Failed(events.ErrExecutionFailed, fmt.Sprintf("%s to MCP server %q failed: %v", method, s.cfg.Name, sess.explainIfDead(err))), nil
	case len(result) > maxMCPResult:
		return tool.Failed(events.ErrExecutionFailed, fmt.Sprintf("the %s result of MCP server %q is %d bytes; toolbus carries at most %d", method, s.cfg.Name, len(result), maxMCPResult)), nil
	}
	t := text(result)
	return &tool.Output{LLMContent: t, ReturnDisplay: t, MCPResult: result}, nil
}

// serverError is an error a server answered a request with.
type serverError struct{ mcp.JSONRPCErrorDetails }

func (e *serverError) Error() string { return fmt.Sprintf("error %d: %s", e.Code, e.Message) }

// rawRequest sends one request on the session's transport and returns its
// result as the server wrote it, or the server's error as a *serverError.
func (s *session) rawRequest(ctx context.Context, method string, params any) (json.RawMessage, error) {
	id := mcp.NewRequestId(fmt.Sprintf("toolbus-%s-%d", method, s.nextListID.Add(1)))
	resp, err := s.client.GetTransport().SendRequest(ctx, mcptransport.JSONRPCRequest{
		JSONRPC: mcp.JSONRPC_VERSION, ID: id, Method: method, Params: params})
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, &serverError{mcp.JSONRPCErrorDetails{Code: resp.Error.Code, Message: resp.Error.Message, Data: resp.Error.Data}}
	}
	return resp.Result, nil
}

// listRaw lists every page of method's result, whose entries are under
// key, each as the server wrote it.
func (s *session) listRaw(ctx context.Context, method, key string) ([]json.RawMessage, error) {
	var out []json.RawMessage
	seen := map[string]bool{}
	cursor := ""
	for {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		result, err := s.rawRequest(ctx, method, params)
		if err != nil {
			return nil, err
		}
		var page map[string]json.RawMessage
		if err := json.Unmarshal(result, &page); err != nil {
			return nil, fmt.Errorf("the %s result does not decode: %w", method, err)
		}
		var entries []json.RawMessage
		if raw, ok := page[key]; ok {
			if err := json.Unmarshal(raw, &entries); err != nil {
				return nil, fmt.Errorf("the %s result's %s do not decode: %w", method, key, err)
			}
		}
		out = append(out, entries...)
		var next string
		if raw, ok := page["nextCursor"]; ok {
			_ = json.Unmarshal(raw, &next)
		}
		if next == "" {
			return out, nil
		}
		if seen[next] {
			return nil, fmt.Errorf("%s gave the cursor %q twice", method, next)
		}
		seen[next] = true
		cursor = next
	}
}

// promptText is a prompts/get result for people: each message's role and
// text, other content named.
func promptText(raw json.RawMessage) string {
	var r struct {
		Description string `json:"description"`
		Messages    []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(raw, &r) != nil {
		return string(raw)
	}
	var b strings.Builder
	if r.Description != "" {
		b.WriteString(r.Description + "\n")
	}
	for _, m := range r.Messages {
		fmt.Fprintf(&b, "[%s] %s\n", m.Role, contentText(m.Content))
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// resourceText is a resources/read result for people: each text content,
// each blob named with its type and size.
func resourceText(raw json.RawMessage) string {
	var r struct {
		Contents []struct {
			URI      string  `json:"uri"`
			MIMEType string  `json:"mimeType"`
			Text     *string `json:"text"`
			Blob     string  `json:"blob"`
		} `json:"contents"`
	}
	if json.Unmarshal(raw, &r) != nil {
		return string(raw)
	}
	var parts []string
	for _, c := range r.Contents {
		if c.Text != nil {
			parts = append(parts, *c.Text)
			continue
		}
		parts = append(parts, fmt.Sprintf("[%s %s, %d bytes of base64]", c.URI, c.MIMEType, len(c.Blob)))
	}
	return strings.Join(parts, "\n")
}

// contentText is one content block for people: its text, or its type.
func contentText(raw json.RawMessage) string {
	var c struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return string(raw)
	}
	if c.Type == "text" {
		return c.Text
	}
	return "[" + c.Type + "]"
}
