// Command executor runs a toolbus executor against a bus given by --nats:
// it hosts the built-in tools over a workspace, takes invocations from
// tool.invoke and enforces the policy pushed to the fleet.
package main

import (
	"context"
	"errors"
	"flag"

	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/settings"
)

func main() { cli.Main("executor", run) }

func run(args []string) error {
	fs := flag.NewFlagSet("executor", flag.ContinueOnError)
	natsURL := cli.NATSFlag(fs)
	workspace := fs.String("workspace", ".", "directory the built-in tools are confined to")
	workspaceName := fs.String("workspace-name", "", "what callers name this workspace by (toolbus call --workspace); default: its directory")
	policyDir := fs.String("policy", "", "directory of .rego files to enforce and follow (default: the built-in policy)")
	timeout := fs.Duration("timeout", executor.DefaultTimeout, "deadline of a call")
	confirmTimeout := fs.Duration("confirm-timeout", executor.DefaultConfirmTimeout, "how long an approver may take")
	id := fs.String("id", "", "executor id (default $"+cli.ExecutorIDEnv+", else the fleet member's name, else executor@HOST-RANDOM)")
	outputs := cli.AddOutputFlags(fs)
	mcpFlags := cli.AddMCPFlags(fs, nil)
	hookFlags := cli.AddHookFlags(fs, mcpFlags.Settings)
	logLevel := cli.LogFlag(fs)
	metricsAddr := cli.MetricsFlag(fs)
	toolFlags := cli.AddToolFlags(fs, true)
	signers := cli.PolicySignersFlag(fs)
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return cli.UsageError{Err: err}
	}
	log, err := cli.Logger(*logLevel)
	if err != nil {
		return cli.UsageError{Err: err}
	}
	connect, err := toolFlags.Connect()
	if err != nil {
		return err
	}
	if err := toolFlags.CheckConfinement(); err != nil {
		return err
	}
	files, err := settings.ReadFiles(*mcpFlags.Settings, *hookFlags.ClaudeSettings, *mcpFlags.MCPConfig)
	if err != nil {
		return err
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	d, err := cli.StartDaemon(ctx, "executor", *metricsAddr, *natsURL, log)
	if errors.Is(err, cli.ErrStopped) {
		log.Info("executor stopped", "err", err)
		return nil
	} else if err != nil {
		return err
	}
	defer d.Close()
	m, b := d.Metrics, d.Bus
	identity := cli.ExecutorIdentity(*id, b.Principal())
	cfg := executor.Config{Identity: identity, Observer: m, WorkspaceName: *workspaceName,
		Timeout: *timeout, ConfirmTimeout: *confirmTimeout, Logger: log}
	if cfg.PolicySigners, err = signers(*natsURL); err != nil {
		return err
	}
	if cfg.PolicySigners == nil {
		log.Warn("no list of policy signers: this executor enforces no pushed policy (--policy-signers)")
	}
	outputs.Apply(&cfg)
	var reserved []uint16
	if p, ok := executornode.PortOf(*metricsAddr); ok {
		reserved = append(reserved, p)
	}
	node, err := executornode.Start(ctx, executornode.Config{Bus: b, Executor: cfg, Workspace: *workspace, PolicyDir: *policyDir, Settings: files,
		Secrets: cli.ToolSecrets(*workspace), Connect: connect, Reserved: reserved, AnyPort: toolFlags.AnyPort()})
	if err != nil {
		return err
	}
	if node.MCP != nil {
		m.WatchMCP(node.MCP.Manager.Status)
	}
	node.ReportReadiness(m)
	log.Info("executor running", "id", identity.ID, "bus", *natsURL, "workspace", node.Workspace.Root(), "policy", node.Executor.Policy().Revision())
	<-ctx.Done()
	return node.Close(context.Background())
}
