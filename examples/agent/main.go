// Command agent is a small agent loop over toolbus: it offers the tools of
// a fleet to a model behind an OpenAI chat-completions API, runs the tool
// calls the model makes through the fleet (policy, confirmation and audit
// included), and prints the model's final answer.
//
//	go run ./examples/agent --model-url https://api.openai.com/v1 --model gpt-4.1-mini "What does README.md say?"
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/pkg/toolbus"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	natsURL := fs.String("nats", envOr("TOOLBUS_NATS", "nats://127.0.0.1:4222"), "NATS URL of the toolbus fleet (env TOOLBUS_NATS)")
	modelURL := fs.String("model-url", envOr("OPENAI_BASE_URL", "https://api.openai.com/v1"), "base URL of an OpenAI chat-completions API (env OPENAI_BASE_URL)")
	model := fs.String("model", "gpt-4.1-mini", "model name")
	agentID := fs.String("agent", "agent:example", "the identity the fleet's policy and audit see")
	session := fs.String("session", "", "session id recorded with every call")
	creds := fs.String("creds", "", "NATS credentials file")
	turns := fs.Int("max-turns", 10, "most model requests before giving up")
	quiet := fs.Bool("quiet", false, "do not trace tool calls on stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("give the prompt as arguments")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := []toolbus.Option{toolbus.WithIdentity(toolbus.Identity{ID: *agentID, Agent: "examples/agent", Session: *session}), toolbus.WithName("examples/agent")}
	if *creds != "" {
		opts = append(opts, toolbus.WithCredentials(*creds))
	}
	connectCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := toolbus.Connect(connectCtx, *natsURL, opts...)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	loop := &Loop{Tools: c, ModelURL: *modelURL, Model: *model, APIKey: os.Getenv("OPENAI_API_KEY"), MaxTurns: *turns}
	if !*quiet {
		loop.Trace = os.Stderr
	}
	answer, err := loop.Run(ctx, strings.Join(fs.Args(), " "))
	if err != nil {
		return err
	}
	fmt.Println(answer)
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
