package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
)

// callFailed carries a failed call's error type to the exit code.
type callFailed struct{ res *events.Result }

func (c callFailed) Error() string {
	return fmt.Sprintf("%s: %s", c.res.Error.Type, c.res.Error.Message)
}

func runCall(args []string) error {
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	natsURL := cli.NATSFlag(fs)
	argsJSON := fs.String("args", "{}", "the arguments, a JSON object")
	asJSON := fs.Bool("json", false, "print the whole result as JSON")
	timeout := fs.Duration("timeout", 0, "give up (and cancel the call) after this long; default: the executor's deadline")
	stream := fs.Bool("stream", false, "print output to stderr as the tool produces it")
	id := fs.String("id", "", "the invocation id (default: a new unique one), for `toolbus cancel`")
	workspace := fs.String("workspace", os.Getenv("TOOLBUS_WORKSPACE"), "the workspace a file or shell tool acts on, as its executors name it (env TOOLBUS_WORKSPACE; default: the one there is)")
	rest, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError{errors.New("call takes one tool name")}
	}
	if !json.Valid([]byte(*argsJSON)) {
		return usageError{fmt.Errorf("--args is not valid JSON: %s", *argsJSON)}
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	if *timeout > 0 {
		// The executor enforces the deadline and reports TIMEOUT itself,
		// having stopped the tool; the command waits a little longer for
		// that result before giving up on its own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout+3*time.Second)
		defer cancel()
	}
	log, _ := cli.Logger("warn")
	connectCtx, cancelConnect := context.WithTimeout(ctx, 30*time.Second)
	b, err := cli.Connect(connectCtx, *natsURL, "toolbus-call", log)
	cancelConnect()
	if err != nil {
		return err
	}
	defer cli.Close(b)
	client := invoke.NewClient(b.Conn(), cli.Identity("cli"), b.Principal())
	defer client.Close()
	if err := client.Ping(ctx); err != nil {
		return err
	}
	var progress func(string)
	if *stream {
		progress = func(s string) { fmt.Fprint(os.Stderr, s) }
	}
	inv := &events.Invocation{Header: events.Header{ID: *id}, Tool: rest[0], Args: json.RawMessage(*argsJSON), Workspace: *workspace}
	if *timeout > 0 {
		inv.TimeoutMillis = timeout.Milliseconds()
	}
	res, err := client.Invoke(ctx, inv, progress)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := writeJSON(os.Stdout, res); err != nil {
			return err
		}
	} else if res.Error == nil {
		fmt.Print(res.LLMContent)
		if len(res.LLMContent) > 0 && res.LLMContent[len(res.LLMContent)-1] != '\n' {
			fmt.Println()
		}
	}
	if res.Error != nil {
		return callFailed{res}
	}
	return nil
}
