package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/console"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
)

// consoleTokenEnv configures the console's token without putting it on a
// command line, where other users of the machine could read it.
const consoleTokenEnv = "TOOLBUS_CONSOLE_TOKEN"

func newConsoleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console for a fleet's bus",
		Long: `Serves the web console for the bus: approvers answer the calls the policy
asks about, and revoke allowlist entries. The page needs the access token
the command prints; with --oidc-issuer, people sign in with the
organization's OpenID provider instead, and each answer names the person.
'toolbus up' serves one of its own.

While a page is open the console holds an approver's seat, as the approver
--as names: a call the policy asks about then waits for an answer instead of
being denied at once.`,
		Example: `  toolbus console
  TOOLBUS_CONSOLE_TOKEN=s3cret toolbus console --listen 0.0.0.0:4380 --as approver:alice

  # People sign in with the organization's OpenID provider (docs/approvals.md).
  toolbus console --listen 127.0.0.1:4380 --oidc-issuer https://id.example.com/realms/eng \
    --oidc-client-id toolbus-console --oidc-client-secret-file /etc/toolbus/oidc-secret

  # A signed notice to a webhook for each call that waits, linking to it here.
  toolbus console --webhook https://hooks.example/toolbus --webhook-secret-file /etc/toolbus/webhook-secret \
    --webhook-link https://toolbus.example.com/`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	listen := fs.String("listen", "", "address the console listens on (default "+console.DefaultListen+", else a free loopback port)")
	token := fs.String("token", "", "access token (default $"+consoleTokenEnv+", else a new random one)")
	as := fs.String("as", "", "approver identity (default approver:USER@HOST)")
	logLevel := goFlags(fs, cli.LogFlag)
	metricsAddr := goFlags(fs, cli.MetricsFlag)
	hook := addWebhookFlags(fs)
	signin := addOIDCFlags(fs)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := hook.check(); err != nil {
			return usageError{err}
		}
		if err := signin.check(); err != nil {
			return usageError{err}
		}
		return runConsole(busURLFor(cmd), *listen, *token, *as, *logLevel, *metricsAddr, hook, signin.cfg)
	}
	return cmd
}

func runConsole(natsURL, listen, token, as, logLevel, metricsAddr string, hook *webhookFlags, signin *console.OIDC) error {
	log, err := cli.Logger(logLevel)
	if err != nil {
		return usageError{err}
	}
	if token == "" {
		token = os.Getenv(consoleTokenEnv)
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	d, err := cli.StartDaemon(ctx, "console", metricsAddr, natsURL, log)
	if errors.Is(err, cli.ErrStopped) {
		log.Info("console stopped", "err", err)
		return nil
	} else if err != nil {
		return err
	}
	defer d.Close()
	b := d.Bus
	c, err := startConsole(ctx, b, cli.ApproverPrincipal(b.Principal(), natsURL, as), console.Config{Listen: listen, Token: token, OIDC: signin}, as, log)
	if err != nil {
		return err
	}
	defer c.stop()
	// The console's approver is followed read-only: the webhook makes
	// nobody present, and answers nothing.
	stopHook, err := hook.start(c.approver, c.server.BaseURL(), log)
	if err != nil {
		return err
	}
	defer stopHook()
	fmt.Printf("toolbus console\n  console:   %s\n  approver:  %s\n", c.server.URL(), c.approver.Identity().ID)
	if signin != nil {
		fmt.Printf("  sign-in:   %s (people sign in with it; the token answers nothing)\n", signin.Issuer)
	}
	if *hook.url != "" {
		fmt.Printf("  webhook:   %s\n", *hook.url)
	}
	fmt.Println("Press Ctrl-C to stop.")
	<-ctx.Done()
	fmt.Println("toolbus: stopping")
	return nil
}

// runningConsole is a console with the approver seat it answers from.
type runningConsole struct {
	approver *approve.Approver
	server   *console.Server
}

// startConsole takes an approver's seat on b as the identity as, proven
// as principal ("" for a claim), and serves the console over it where cc
// says (Listen or Listener, which it closes on failure; Token). The seat
// is present only while a page watches: a console nobody looks at must
// not hold calls for minutes.
func startConsole(ctx context.Context, b *bus.Bus, principal string, cc console.Config, as string, log *slog.Logger) (*runningConsole, error) {
	fail := func(err error) (*runningConsole, error) {
		if cc.Listener != nil {
			cc.Listener.Close()
		}
		return nil, err
	}
	open := executor.OpenAllowlistBucket
	if b.Principal() != "" {
		open = executor.AwaitAllowlistBucket // an approver's identity reads it only
		log.Info("console: waiting for an executor to make the allowlist bucket; it listens after")
	}
	kv, err := open(ctx, b.JetStream())
	if err != nil {
		return fail(fmt.Errorf("console: the allowlist: %w", err))
	}
	a, err := approve.Start(ctx, b.Conn(), b.JetStream(), approve.Config{Identity: cli.ApproverIdentity(as), Principal: principal,
		Via: events.ViaConsole, Who: cli.ConsoleSigner(),
		PresentWhileHeld: true, Linger: console.ReloadGrace, Logger: log})
	if err != nil {
		return fail(err)
	}
	cc.Approver, cc.Allowlist, cc.JetStream, cc.Logger = a, kv, b.JetStream(), log
	s, err := console.Start(ctx, cc)
	if err != nil {
		a.Stop()
		return nil, err
	}
	return &runningConsole{approver: a, server: s}, nil
}

// stop closes the page's streams, lets answers in flight finish for a few
// seconds, and leaves the approver's seat.
func (c *runningConsole) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := c.server.Close(ctx)
	c.approver.Stop()
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("console: answers still in flight were cut off: %w", err)
	}
	return err
}
