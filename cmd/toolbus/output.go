package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/invoke"
)

func newOutputCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "output ID",
		Short: "Write a call's whole stored output",
		Long: `Writes the whole output of a call whose result was cut (a result says
"[Output truncated: ... The whole output is in the object store at ID]"), as
the executor stored it: ID is the call's invocation id, or the name the
result gives. Only the caller that made the call may read it; an output is
kept for the executor's --output-store-ttl (a day by default).`,
		Example: `  toolbus call read_file --args '{"file_path": "big.log"}'
  toolbus output 3YJ2u0Gk8w0R9ymqSbqS0A > big.log
  toolbus output 3YJ2u0Gk8w0R9ymqSbqS0A --out big.log`,
		Args: cobra.ExactArgs(1),
	}
	out := cmd.Flags().String("out", "", "write to `FILE` instead of stdout")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx, stop := cli.SignalContext()
		defer stop()
		return writeOutput(ctx, busURLFor(cmd), args[0], *out)
	}
	return cmd
}

// writeOutput writes the stored output name to path ("" for stdout).
func writeOutput(ctx context.Context, natsURL, name, path string) error {
	log, _ := cli.Logger("warn")
	connectCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	b, err := cli.Connect(connectCtx, natsURL, "toolbus-output", log)
	cancel()
	if err != nil {
		return err
	}
	defer cli.Close(b)
	client := invoke.NewClient(b.Conn(), cli.Identity("cli"), b.Principal())
	defer client.Close()
	r, err := client.ReadOutput(ctx, name)
	if errors.Is(err, invoke.ErrNoOutput) {
		return fmt.Errorf("%w named %s: it expired, was never stored (the result was whole), or is another caller's", invoke.ErrNoOutput, name)
	}
	if err != nil {
		return err
	}
	defer r.Close()
	var w io.Writer = os.Stdout
	if path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	if _, err := io.Copy(w, r); err != nil {
		return fmt.Errorf("output %s: %w", name, err)
	}
	if f, ok := w.(*os.File); ok && path != "" {
		return f.Close()
	}
	return nil
}
