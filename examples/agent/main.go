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

const usage = `agent offers the tools of a toolbus fleet to a model behind an OpenAI
chat-completions API, runs the tool calls the model makes through the fleet
(policy, confirmation and audit included), and prints the model's answer.

Usage:
  agent [flags] PROMPT...

Examples:
  OPENAI_API_KEY=sk-... agent --model gpt-4.1-mini "What does README.md say?"
  agent --model-url http://127.0.0.1:11434/v1 --model qwen3 "List the Go files"

Flags:
`

// errUsage marks a mistake in the command line: exit code 2.
var errUsage = errors.New("usage")

func main() {
	err := run(os.Args[1:])
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
		// Asked for: the usage went to stdout.
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	natsURL := fs.String("nats", envOr("TOOLBUS_NATS", "nats://127.0.0.1:4222"), "NATS URL of the toolbus fleet (env TOOLBUS_NATS)")
	modelURL := fs.String("model-url", envOr("OPENAI_BASE_URL", "https://api.openai.com/v1"), "base URL of an OpenAI chat-completions API (env OPENAI_BASE_URL)")
	model := fs.String("model", "gpt-4.1-mini", "model name")
	agentID := fs.String("agent", "agent:example", "the identity the fleet's policy and audit see")
	session := fs.String("session", "", "session id recorded with every call")
	creds := fs.String("creds", "", "NATS credentials file")
	turns := fs.Int("max-turns", 10, "most model requests before giving up")
	quiet := fs.Bool("quiet", false, "do not trace tool calls on stderr")
	if help(args) {
		// Help that was asked for goes to stdout; the flag package
		// prints it with a parse error, on stderr.
		fs.SetOutput(os.Stdout)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: give the prompt as arguments", errUsage)
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

// help says whether args ask for help before anything the flag package
// would stop at.
func help(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help", "--h":
			return true
		case "--":
			return false
		}
	}
	return false
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
