// Command bus runs the toolbus bus alone: an embedded nats-server with
// JetStream and the audit stream, for a fleet whose other parts connect to
// it with --nats.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/cli"
)

func main() {
	fs := flag.NewFlagSet("bus", flag.ExitOnError)
	dataDir := fs.String("data", cli.DefaultDataDir(), "directory for the bus's data (created if missing)")
	listen := fs.String("listen", bus.DefaultListen, "address to listen on")
	logLevel := cli.LogFlag(fs)
	auditOpts := cli.AuditFlags(fs)
	fs.Parse(os.Args[1:])
	log, err := cli.Logger(*logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bus:", err)
		os.Exit(2)
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	cfg := bus.Config{Listen: *listen, DataDir: *dataDir, Name: "toolbus-bus", Logger: log}
	if err := auditOpts.Apply(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bus:", err)
		os.Exit(2)
	}
	b, err := bus.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bus:", err)
		os.Exit(1)
	}
	stopCheckpoints, err := auditOpts.StartCheckpoints(b, *dataDir, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bus:", err)
		cli.Close(b)
		os.Exit(1)
	}
	log.Info("bus listening", "url", b.URL(), "data", *dataDir)
	<-ctx.Done()
	stopCheckpoints()
	if err := cli.Close(b); err != nil {
		log.Error("bus did not stop cleanly", "err", err)
		os.Exit(1)
	}
}
