package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	mcpserver "github.com/mark3labs/mcp-go/server"
	"github.com/yosida95/uritemplate/v3"

	"github.com/toolbus/toolbus/internal/catalog"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
)

// The facade serves the prompts and resources of the fleet's MCP servers
// (features.go) as its own: prompts/list and resources/list (templates
// too) from the catalogue, and each get or read as a call of the entry,
// which the policy judges and the audit records as any call. A prompt is
// listed under its own name, or, when another server's prompt took it,
// under "<server>__<name>" (the naming rule of MCP tools); a resource
// under its URI, as its server gave it, since content refers to it there.

// featureLists is what Refresh last gave the server of each list, so that
// an unchanged list is not set again (each set tells every client).
type featureLists struct {
	prompts, resources string
	// The catalogue entries of the prompts by the name they are listed
	// under, and of the templates by their URI template: what a
	// completion names.
	promptEntries, templateEntries map[string]string
	// The entries of the resources served, by URI, and of the templates,
	// in the catalogue's order: what a subscription names.
	resourceRefs map[string]featureRef
	templateRefs []templateRef
}

// featureRef is a catalogue entry of a resource and its server.
type featureRef struct{ entry, server string }

// templateRef is a resource template's entry, with its template.
type templateRef struct {
	featureRef
	template *uritemplate.Template
}

// refreshFeatures gives the server the catalogue's prompts, resources and
// resource templates, each list only when it changed. The caller holds
// f.mu.
func (f *Facade) refreshFeatures(cat *catalog.Catalog) {
	var key strings.Builder
	var prompts []mcpserver.ServerPrompt
	promptEntries, templateEntries := map[string]string{}, map[string]string{}
	resourceRefs, templateRefs := map[string]featureRef{}, []templateRef(nil)
	for _, t := range cat.Features(events.KindPrompt) {
		var p mcp.Prompt
		if err := json.Unmarshal(t.MCPFeature, &p); err != nil {
			f.log.Warn("mcp facade: a prompt is left out", "prompt", t.Name, "err", err)
			continue
		}
		p.Name = promptListName(t.Name)
		promptEntries[p.Name] = t.Name
		prompts = append(prompts, mcpserver.ServerPrompt{Prompt: p, Handler: f.getPrompt(t.Name)})
		fmt.Fprintf(&key, "%s\x00%d\x00%d\x00", t.Name, t.Seq, t.UpdatedAt.UnixNano())
	}
	if key.String() != f.features.prompts {
		f.features.prompts = key.String()
		f.srv.SetPrompts(prompts...)
	}

	key.Reset()
	var resources []mcpserver.ServerResource
	var templates []mcpserver.ServerResourceTemplate
	seen := map[string]bool{}
	for _, t := range cat.Features(events.KindResource) {
		var d struct {
			URI         string `json:"uri"`
			URITemplate string `json:"uriTemplate"`
		}
		if err := json.Unmarshal(t.MCPFeature, &d); err != nil {
			f.log.Warn("mcp facade: a resource is left out", "resource", t.Name, "err", err)
			continue
		}
		if d.URI != "" {
			if seen[d.URI] {
				// Two servers offer one URI: the first in the catalogue's
				// order keeps it.
				f.log.Warn("mcp facade: a resource URI is offered twice; the first is served", "resource", t.Name, "uri", d.URI)
				continue
			}
			seen[d.URI] = true
			var r mcp.Resource
			if err := json.Unmarshal(t.MCPFeature, &r); err != nil {
				f.log.Warn("mcp facade: a resource is left out", "resource", t.Name, "err", err)
				continue
			}
			resources = append(resources, mcpserver.ServerResource{Resource: r, Handler: f.readResource(t.Name)})
			resourceRefs[d.URI] = featureRef{t.Name, t.Server}
		} else {
			var rt mcp.ResourceTemplate
			if err := json.Unmarshal(t.MCPFeature, &rt); err != nil || rt.URITemplate == nil {
				f.log.Warn("mcp facade: a resource template is left out", "resource", t.Name, "err", err)
				continue
			}
			templates = append(templates, mcpserver.ServerResourceTemplate{Template: rt, Handler: mcpserver.ResourceTemplateHandlerFunc(f.readResource(t.Name))})
			if _, taken := templateEntries[d.URITemplate]; !taken {
				templateEntries[d.URITemplate] = t.Name
			}
			if tmpl, err := uritemplate.New(d.URITemplate); err == nil {
				templateRefs = append(templateRefs, templateRef{featureRef{t.Name, t.Server}, tmpl})
			}
		}
		fmt.Fprintf(&key, "%s\x00%d\x00%d\x00", t.Name, t.Seq, t.UpdatedAt.UnixNano())
	}
	f.features.promptEntries, f.features.templateEntries = promptEntries, templateEntries
	f.features.resourceRefs, f.features.templateRefs = resourceRefs, templateRefs
	if key.String() != f.features.resources {
		f.features.resources = key.String()
		f.srv.SetResources(resources...)
		f.srv.SetResourceTemplates(templates...)
	}
}

// promptListName is the name a prompt's catalogue entry is listed under:
// the entry's name without the prefix of prompts' own names.
func promptListName(entry string) string {
	return strings.Replace(entry, promptPrefix, "", 1)
}

// getPrompt gets the prompt of catalogue entry name for a client.
func (f *Facade) getPrompt(name string) mcpserver.PromptHandlerFunc {
	return func(ctx context.Context, req mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		args := req.Params.Arguments
		if args == nil {
			args = map[string]string{}
		}
		data, err := json.Marshal(args)
		if err != nil {
			return nil, err
		}
		res, ask, err := f.callFeature(ctx, name, data, events.OpRun, &heldRequest{req.Params.MultiRoundTripParams, req.Params.Meta})
		if err != nil {
			return nil, err
		}
		if ask != nil {
			return &mcp.GetPromptResult{Result: mcp.Result{ResultType: mcp.ResultTypeInputRequired, Meta: ask.meta()}, MultiRoundTripResult: *ask.ask}, nil
		}
		var raw struct {
			Meta        *mcp.Meta `json:"_meta"`
			Description string    `json:"description"`
			Messages    []struct {
				Role    mcp.Role        `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(res.MCPResult, &raw); err != nil {
			return nil, fmt.Errorf("toolbus: the prompt's result does not decode: %w", err)
		}
		out := &mcp.GetPromptResult{Description: raw.Description, Messages: make([]mcp.PromptMessage, 0, len(raw.Messages))}
		out.Meta = raw.Meta
		for _, m := range raw.Messages {
			out.Messages = append(out.Messages, mcp.PromptMessage{Role: m.Role, Content: rawContent{raw: m.Content}})
		}
		return out, nil
	}
}

// readResource reads a resource of catalogue entry name for a client.
func (f *Facade) readResource(name string) mcpserver.ResourceHandlerFunc {
	return func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		data, err := json.Marshal(map[string]string{"uri": req.Params.URI})
		if err != nil {
			return nil, err
		}
		res, ask, err := f.callFeature(ctx, name, data, events.OpRun, &heldRequest{req.Params.MultiRoundTripParams, req.Params.Meta})
		if err != nil {
			return nil, err
		}
		if ask != nil {
			return []mcp.ResourceContents{askingContents{reply: *ask}}, nil
		}
		var raw struct {
			Contents []json.RawMessage `json:"contents"`
		}
		if err := json.Unmarshal(res.MCPResult, &raw); err != nil {
			return nil, fmt.Errorf("toolbus: the resource's result does not decode: %w", err)
		}
		out := make([]mcp.ResourceContents, len(raw.Contents))
		for i, c := range raw.Contents {
			out[i] = rawResourceContents{raw: c}
		}
		return out, nil
	}
}

// completions answers completion/complete for the prompts and resource
// templates the facade serves, as a call of the entry (events.OpComplete).
type completions struct{ f *Facade }

func (c completions) CompletePromptArgument(ctx context.Context, prompt string, arg mcp.CompleteArgument, cctx mcp.CompleteContext) (*mcp.Completion, error) {
	c.f.mu.Lock()
	entry, ok := c.f.features.promptEntries[prompt]
	c.f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("toolbus: no prompt %q", prompt)
	}
	return c.f.complete(ctx, entry, arg, cctx)
}

func (c completions) CompleteResourceArgument(ctx context.Context, uri string, arg mcp.CompleteArgument, cctx mcp.CompleteContext) (*mcp.Completion, error) {
	c.f.mu.Lock()
	entry, ok := c.f.features.templateEntries[uri]
	c.f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("toolbus: no resource template %q", uri)
	}
	return c.f.complete(ctx, entry, arg, cctx)
}

// complete asks the server of catalogue entry name for the completions of
// arg.
func (f *Facade) complete(ctx context.Context, name string, arg mcp.CompleteArgument, cctx mcp.CompleteContext) (*mcp.Completion, error) {
	data, err := json.Marshal(map[string]any{"argument": arg, "context": cctx})
	if err != nil {
		return nil, err
	}
	// completion/complete has no input-required result: a client of
	// 2026-07-28 leaves an approval of it to the approvers.
	res, _, err := f.callFeature(ctx, name, data, events.OpComplete, nil)
	if err != nil {
		return nil, err
	}
	var out mcp.CompleteResult
	if err := json.Unmarshal(res.MCPResult, &out); err != nil {
		return nil, fmt.Errorf("toolbus: the completion does not decode: %w", err)
	}
	return &out.Completion, nil
}

// callFeature calls catalogue entry name with args for a client, to run
// it or for op, as its tools are called (the policy, a person when it
// asks, the audit), and returns the result that carries the server's
// answer, or why there is none. The person in front of the client may be
// asked, as for a tool: with elicitation/create for a client of protocol
// 2025-11-25 or before, and for one of 2026-07-28 with an input-required
// reply (ask) to the request held, when the request can carry one.
func (f *Facade) callFeature(ctx context.Context, name string, args json.RawMessage, op events.Operation, held *heldRequest) (*events.Result, *heldReply, error) {
	inv := &events.Invocation{Header: events.Header{Sender: f.caller(ctx)}, Tool: name, Args: args, Workspace: f.cfg.Workspace, Op: op}
	var res *events.Result
	var err error
	canAsk := !f.cfg.NoElicitation && canElicit(ctx)
	switch {
	case canAsk && mcpserver.IsModernRequest(ctx) && held != nil:
		reply, herr := f.callModern(ctx, *held, inv, nil)
		switch {
		case herr != nil:
			return nil, nil, herr
		case reply.ask != nil:
			return nil, &reply, nil
		case reply.res == nil:
			return nil, nil, errors.New(reply.failure)
		}
		res = reply.res
	default:
		watch := &invoke.Watch{}
		if canAsk && !mcpserver.IsModernRequest(ctx) {
			ask, wait := f.askingWatch(ctx, inv)
			defer wait()
			watch.Confirm = ask
		}
		res, err = f.invoker(inv.Sender).InvokeAs(ctx, inv, watch)
	}
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("toolbus: %w", err)
	case res.Error != nil:
		return nil, nil, fmt.Errorf("%s: %s", res.Error.Type, res.Error.Message)
	case len(res.MCPResult) == 0:
		return nil, nil, fmt.Errorf("toolbus: %s answered with no MCP result", name)
	}
	return res, nil, nil
}

// hooks are the facade's hooks into mcp-go's server.
func (f *Facade) hooks() *mcpserver.Hooks {
	h := &mcpserver.Hooks{}
	f.subscriptionHooks(h)
	askingHooks(h)
	return h
}

// askingContents stands for the input-required reply of a resources/read:
// mcp-go's resource handlers return contents, not a result, so the
// handler returns this one content, and askingHooks' hook after the read
// makes the result the reply it carries.
type askingContents struct {
	mcp.TextResourceContents
	reply heldReply
}

// askingHooks makes a resources/read result whose one content is
// askingContents the input-required reply it carries.
func askingHooks(h *mcpserver.Hooks) {
	h.AddAfterReadResource(func(_ context.Context, _ any, _ *mcp.ReadResourceRequest, res *mcp.ReadResourceResult) {
		if res == nil || len(res.Contents) != 1 {
			return
		}
		ask, ok := res.Contents[0].(askingContents)
		if !ok {
			return
		}
		res.Contents = nil
		res.ResultType = mcp.ResultTypeInputRequired
		res.Meta = ask.reply.meta()
		res.MultiRoundTripResult = *ask.reply.ask
	})
}

// rawContent is a content block as the server sent it. mcp.Content can only
// be one of mcp-go's types: embedding one satisfies it, and MarshalJSON
// gives the server's bytes, whatever fields they hold.
type rawContent struct {
	mcp.TextContent
	raw json.RawMessage
}

func (c rawContent) MarshalJSON() ([]byte, error) { return c.raw, nil }

// rawResourceContents is one content of a resource as the server sent it,
// as rawContent is for content blocks.
type rawResourceContents struct {
	mcp.TextResourceContents
	raw json.RawMessage
}

func (c rawResourceContents) MarshalJSON() ([]byte, error) { return c.raw, nil }
