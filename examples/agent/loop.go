package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/toolbus/toolbus/pkg/toolbus"
)

// Loop is an agent loop over an OpenAI chat-completions endpoint: it
// offers the fleet's tools to the model, runs every tool call the model
// answers with through toolbus, and feeds the results back, until the
// model answers with text.
type Loop struct {
	Tools *toolbus.Client
	// ModelURL is the API's base URL; requests go to ModelURL +
	// "/chat/completions".
	ModelURL string
	Model    string
	// APIKey is sent as a bearer token when set.
	APIKey string
	// HTTP defaults to http.DefaultClient.
	HTTP *http.Client
	// MaxTurns bounds the model requests of one Run (default 10).
	MaxTurns int
	// Trace, when set, receives a line per tool call.
	Trace io.Writer
}

// message is a chat-completions message, as sent and as received.
type message struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatRequest struct {
	Model    string            `json:"model"`
	Messages []message         `json:"messages"`
	Tools    []json.RawMessage `json:"tools,omitempty"`
}

type chatResponse struct {
	Choices []struct {
		Message      message `json:"message"`
		FinishReason string  `json:"finish_reason"`
	} `json:"choices"`
}

// ErrTooManyTurns is returned when the model still asks for tools after
// MaxTurns requests.
var ErrTooManyTurns = errors.New("the model did not answer with text within the turn limit")

// Run sends prompt to the model and returns its final text answer.
func (l *Loop) Run(ctx context.Context, prompt string) (string, error) {
	decls, err := l.Tools.Declarations(ctx, toolbus.OpenAI)
	if err != nil {
		return "", fmt.Errorf("tool declarations: %w", err)
	}
	msgs := []message{{Role: "user", Content: &prompt}}
	turns := l.MaxTurns
	if turns <= 0 {
		turns = 10
	}
	for range turns {
		reply, err := l.complete(ctx, chatRequest{Model: l.Model, Messages: msgs, Tools: decls})
		if err != nil {
			return "", err
		}
		msgs = append(msgs, reply)
		if len(reply.ToolCalls) == 0 {
			if reply.Content == nil {
				return "", errors.New("the model answered with neither text nor tool calls")
			}
			return *reply.Content, nil
		}
		for _, call := range reply.ToolCalls {
			out, err := l.run(ctx, call)
			if err != nil {
				return "", err
			}
			msgs = append(msgs, message{Role: "tool", ToolCallID: call.ID, Content: &out})
		}
	}
	return "", ErrTooManyTurns
}

// run executes one tool call and returns what the model is told. A
// failed call — denied, refused, unknown tool, bad arguments — is told to
// the model, which may try otherwise; only a call that could not be made
// at all (the bus is gone) ends the loop.
func (l *Loop) run(ctx context.Context, call toolCall) (string, error) {
	args := json.RawMessage(call.Function.Arguments)
	if strings.TrimSpace(call.Function.Arguments) == "" {
		args = json.RawMessage("{}")
	}
	if !json.Valid(args) {
		return fmt.Sprintf("Error: the arguments are not valid JSON: %s", call.Function.Arguments), nil
	}
	res, err := l.Tools.Invoke(ctx, call.Function.Name, args)
	if l.Trace != nil {
		status := "ok"
		if err != nil {
			status = err.Error()
		}
		fmt.Fprintf(l.Trace, "tool %s %s: %s\n", call.Function.Name, call.Function.Arguments, status)
	}
	if res == nil {
		if errors.Is(err, toolbus.ErrInvalidParams) {
			return "Error: " + err.Error(), nil
		}
		return "", fmt.Errorf("tool %s: %w", call.Function.Name, err)
	}
	if res.Error != nil {
		return fmt.Sprintf("Error (%s): %s", res.Error.Type, res.LLMContent), nil
	}
	return res.LLMContent, nil
}

// complete sends one chat-completions request and returns the model's
// message.
func (l *Loop) complete(ctx context.Context, body chatRequest) (message, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return message{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(l.ModelURL, "/")+"/chat/completions", bytes.NewReader(data))
	if err != nil {
		return message{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if l.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+l.APIKey)
	}
	hc := l.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return message{}, fmt.Errorf("model request: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return message{}, fmt.Errorf("model response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return message{}, fmt.Errorf("model API answered %s: %.500s", resp.Status, raw)
	}
	return decodeChat(raw)
}

// decodeChat reads the model's message out of a chat-completions
// response, which comes from the network and is not trusted.
func decodeChat(raw []byte) (message, error) {
	var cr chatResponse
	if err := json.Unmarshal(raw, &cr); err != nil {
		return message{}, fmt.Errorf("model response does not decode: %w", err)
	}
	if len(cr.Choices) == 0 {
		return message{}, errors.New("model response has no choices")
	}
	m := cr.Choices[0].Message
	for i, c := range m.ToolCalls {
		if c.ID == "" || c.Function.Name == "" {
			return message{}, fmt.Errorf("model response: tool call %d has no id or no name", i)
		}
	}
	return m, nil
}
