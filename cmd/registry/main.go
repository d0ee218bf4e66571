// Command registry runs the toolbus registry against a bus given by --nats:
// it answers tool.register and keeps the catalogue bucket.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/registry"
	"github.com/toolbus/toolbus/internal/settings"
)

func main() {
	fs := flag.NewFlagSet("registry", flag.ExitOnError)
	natsURL := cli.NATSFlag(fs)
	settingsPath := fs.String("settings", "", "Gemini CLI settings.json with tools.core / tools.exclude")
	logLevel := cli.LogFlag(fs)
	metricsAddr := cli.MetricsFlag(fs)
	fs.Parse(os.Args[1:])
	if err := run(*natsURL, *settingsPath, *logLevel, *metricsAddr); err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
}

func run(natsURL, settingsPath, logLevel, metricsAddr string) error {
	log, err := cli.Logger(logLevel)
	if err != nil {
		return err
	}
	f, err := settings.Read(settingsPath, settings.GeminiSettings)
	if err != nil {
		return err
	}
	regSettings, err := registry.SettingsFrom(f.Tools)
	if err != nil {
		return fmt.Errorf("settings %s: %w", settingsPath, err)
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	d, err := cli.StartDaemon(ctx, "registry", metricsAddr, natsURL, log)
	if errors.Is(err, cli.ErrStopped) {
		log.Info("registry stopped", "err", err)
		return nil
	} else if err != nil {
		return err
	}
	defer d.Close()
	b := d.Bus
	svc, err := registry.Start(ctx, b.Conn(), b.JetStream(), registry.Config{
		Settings: regSettings, Identity: cli.Identity("registry"), Logger: log})
	if err != nil {
		return err
	}
	log.Info("registry running", "bus", natsURL)
	<-ctx.Done()
	return svc.Stop()
}
