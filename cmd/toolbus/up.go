package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/registry"
)

// projectSettings is where Gemini CLI keeps a project's settings; `toolbus
// up` reads it when present, so an existing project works unchanged.
var projectSettings = filepath.Join(".gemini", "settings.json")

func runUp(args []string) error {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	dataDir := fs.String("data", cli.DefaultDataDir(), "directory for the bus's data (created if missing)")
	listen := fs.String("listen", bus.DefaultListen, "address the bus listens on")
	settingsPath := fs.String("settings", "", "Gemini CLI settings.json with tools.core / tools.exclude (default: "+projectSettings+" if present)")
	logLevel := cli.LogFlag(fs)
	if rest, err := parse(fs, args); err != nil {
		return err
	} else if len(rest) > 0 {
		return usageError{fmt.Errorf("up takes no arguments, got %q", rest)}
	}
	log, err := cli.Logger(*logLevel)
	if err != nil {
		return usageError{err}
	}
	if *settingsPath == "" {
		if _, err := os.Stat(projectSettings); err == nil {
			*settingsPath = projectSettings
		}
	}
	settings, err := registry.LoadSettings(*settingsPath)
	if err != nil {
		return err
	}

	ctx, stop := cli.SignalContext()
	defer stop()

	b, err := bus.Open(ctx, bus.Config{Listen: *listen, DataDir: *dataDir, Name: "toolbus-up", Logger: log})
	if err != nil {
		return err
	}
	defer cli.Close(b)

	reg, err := registry.Start(ctx, b.Conn(), b.JetStream(), registry.Config{
		Settings: settings, Identity: cli.Identity("registry"), Logger: log})
	if err != nil {
		return err
	}
	defer reg.Stop()

	if err := registerBuiltins(ctx, b); err != nil {
		return err
	}

	fmt.Printf("toolbus is up\n  bus:      %s\n  data:     %s\n  tools:    %d registered, %d active\n",
		b.URL(), *dataDir, reg.Registry().Catalog().Len(), len(reg.Registry().Catalog().AllToolNames()))
	if *settingsPath != "" {
		fmt.Printf("  settings: %s\n", *settingsPath)
	}
	fmt.Println("Press Ctrl-C to stop.")
	<-ctx.Done()
	fmt.Println("toolbus: stopping")
	return nil
}

// registerBuiltins declares the built-in tools this process hosts,
// replacing whatever an earlier run of it declared.
func registerBuiltins(ctx context.Context, b *bus.Bus) error {
	id := cli.Identity("executor")
	reply, err := registry.NewClient(b.Conn(), id).Register(ctx, &events.RegisterRequest{
		Provider: id.ID, Source: events.SourceBuiltin, Replace: true, Tools: builtin.Specs()})
	if err != nil {
		return fmt.Errorf("register built-in tools: %w", err)
	}
	var errs []error
	for _, o := range reply.Tools {
		if o.Error != "" {
			errs = append(errs, fmt.Errorf("built-in tool %s: %s", o.Requested, o.Error))
		}
	}
	return errors.Join(errs...)
}
