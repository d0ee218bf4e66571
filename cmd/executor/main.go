// Command executor runs a toolbus executor against a bus given by --nats:
// it hosts the built-in tools over a workspace, takes invocations from
// tool.invoke and enforces the policy pushed to the fleet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/toolbus/toolbus/internal/builtin"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/policy"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

func main() {
	fs := flag.NewFlagSet("executor", flag.ExitOnError)
	natsURL := cli.NATSFlag(fs)
	workspace := fs.String("workspace", ".", "directory the built-in tools are confined to")
	workspaceName := fs.String("workspace-name", "", "what callers name this workspace by (toolbus call --workspace); default: its directory")
	policyDir := fs.String("policy", "", "directory of .rego files to enforce and follow (default: the built-in policy)")
	timeout := fs.Duration("timeout", executor.DefaultTimeout, "deadline of a call")
	confirmTimeout := fs.Duration("confirm-timeout", executor.DefaultConfirmTimeout, "how long an approver may take")
	id := fs.String("id", "", "executor id (default executor@HOST)")
	outputs := cli.AddOutputFlags(fs)
	mcpFlags := cli.AddMCPFlags(fs, nil)
	hookFlags := cli.AddHookFlags(fs, mcpFlags.Settings)
	logLevel := cli.LogFlag(fs)
	metricsAddr := cli.MetricsFlag(fs)
	fs.Parse(os.Args[1:])
	if err := run(*natsURL, *workspace, *workspaceName, *policyDir, *id, *timeout, *confirmTimeout, outputs, mcpFlags, hookFlags, *logLevel, *metricsAddr); err != nil {
		fmt.Fprintln(os.Stderr, "executor:", err)
		os.Exit(1)
	}
}

func run(natsURL, workspace, workspaceName, policyDir, id string, timeout, confirmTimeout time.Duration, outputs *cli.OutputFlags, mcpFlags *cli.MCPFlags, hookFlags *cli.HookFlags, logLevel, metricsAddr string) error {
	log, err := cli.Logger(logLevel)
	if err != nil {
		return err
	}
	ws, err := builtin.NewWorkspace(workspace)
	if err != nil {
		return err
	}
	defer ws.Close()
	files, err := policy.DirFiles(policyDir, policy.Files(defaultpolicy.Default()))
	if err != nil {
		return err
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	pol, err := policy.Compile(ctx, files)
	if err != nil {
		return err
	}
	b, err := cli.Connect(ctx, natsURL, "toolbus-executor", log)
	if err != nil {
		return err
	}
	defer cli.Close(b)
	identity := cli.Identity("executor")
	if id != "" {
		identity.ID = id
	} else if b.Principal() != "" {
		identity.ID = b.Principal()
	}
	m, stopMetrics, err := cli.StartMetrics(metricsAddr, "executor", b, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	shells := builtin.NewShells(ws)
	defer shells.Close()
	cfg := executor.Config{Observer: m,
		Identity: identity, IdentitiesEnforced: b.Principal() != "", Tools: builtin.Tools(ws, shells), Policy: pol, PolicyDir: policyDir,
		Workspace: ws.Root(), WorkspaceName: workspaceName, Timeout: timeout, ConfirmTimeout: confirmTimeout, Logger: log}
	outputs.Apply(&cfg)
	settingsFiles, err := cli.ReadSettings(*mcpFlags.Settings, *hookFlags.ClaudeSettings, *mcpFlags.MCPConfig)
	if err != nil {
		return err
	}
	if err := cli.ApplyHooks(&cfg, settingsFiles, log); err != nil {
		return err
	}
	ex, err := executor.Start(ctx, b.Conn(), b.JetStream(), cfg)
	if err != nil {
		return err
	}
	servers, err := cli.StartMCP(ctx, b, ex, identity, settingsFiles, log)
	if err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return errors.Join(err, ex.Stop(stopCtx))
	}
	if servers != nil {
		m.WatchMCP(servers.Manager.Status)
	}
	// The tools of the settings' discovery command run in this
	// executor's workspace, so it hosts them.
	discovered, err := cli.StartDiscovery(ctx, b, ex, identity, settingsFiles.Gemini, ws.Root(), cfg.Tools, log)
	if err != nil {
		stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, ex.Stop(stopCtx))
		servers.Stop()
		return err
	}
	log.Info("executor running", "id", identity.ID, "bus", natsURL, "workspace", ws.Root(), "policy", pol.Revision())
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = ex.Stop(stopCtx)
	servers.Stop() // after the calls, which may use them
	discovered.Stop()
	return err
}
