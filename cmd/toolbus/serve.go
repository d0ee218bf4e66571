package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	defaultpolicy "github.com/toolbus/toolbus/policy"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/policy"
)

// mcpTokenEnv holds the bearer token of the MCP endpoint when no --token
// is given.
const mcpTokenEnv = "TOOLBUS_MCP_TOKEN"

// defaultMCPListen is where `toolbus up` serves MCP unless told otherwise.
const defaultMCPListen = "127.0.0.1:7879"

func newMCPServeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the fleet's tools as one MCP server, over stdio or HTTP",
		Long: `Serves the fleet's tools as one MCP server: over stdio for an agent that
starts it, or over streamable HTTP (--listen) as a daemon for a fleet. Every
call goes through the bus, judged by the policy and recorded in the audit
trail; the list of tools follows the policy a caller is judged by.`,
		Example: `  # In an agent's MCP settings: {"command": "toolbus", "args": ["mcp", "serve"]}
  toolbus mcp serve --agent claude-code

  # Over HTTP, with a token.
  TOOLBUS_MCP_TOKEN=s3cret toolbus mcp serve --listen 127.0.0.1:7879`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	agent := fs.String("agent", "", "agent id every caller is named by (default: the MCP client's name)")
	session := fs.String("session", "", "session id every caller is named by (default: the MCP session)")
	workspace := fs.String("workspace", "", "the workspace the file and shell tools act on, as the executors name it (default $TOOLBUS_WORKSPACE, else the one there is)")
	policyDir := fs.String("policy", "", "directory of .rego files that decides which tools a caller is listed (default: the pushed policy, else the default policy)")
	listen := fs.String("listen", "", "serve streamable HTTP on this address instead of stdio")
	token := fs.String("token", "", "bearer token for --listen (default $"+mcpTokenEnv+"; generated when listening beyond loopback)")
	noElicit := fs.Bool("no-elicitation", false, "never ask the MCP client's user to confirm a call; only approvers on tool.confirm answer (the policy's elicitation_allowed decides otherwise)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error (logs go to stderr)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *workspace == "" {
			*workspace = os.Getenv("TOOLBUS_WORKSPACE")
		}
		return runMCPServe(busURLFor(cmd), mcpServeOptions{agent: *agent, session: *session, workspace: *workspace, policyDir: *policyDir,
			listen: *listen, token: *token, noElicitation: *noElicit, logLevel: *logLevel})
	}
	return cmd
}

// mcpServeOptions are the command line of `toolbus mcp serve`.
type mcpServeOptions struct {
	agent, session, workspace, policyDir, listen, token, logLevel string
	noElicitation                                                 bool
}

// runMCPServe is `toolbus mcp serve`: the fleet's tools as one MCP server,
// over stdio for an agent that starts it, or over HTTP (--listen) as a
// daemon for a fleet.
func runMCPServe(natsURL string, o mcpServeOptions) error {
	log, err := cli.Logger(o.logLevel)
	if err != nil {
		return usageError{err}
	}
	ctx, stop := cli.SignalContext()
	defer stop()
	b, err := cli.Connect(ctx, natsURL, "toolbus-mcp-serve", log)
	if err != nil {
		return err
	}
	defer cli.Close(b)

	var current atomic.Pointer[policy.Policy]
	files, err := policy.DirFiles(o.policyDir, policy.Files(defaultpolicy.Default()))
	if err != nil {
		return err
	}
	pol, err := policy.Compile(ctx, files)
	if err != nil {
		return err
	}
	current.Store(pol)
	id := cli.Identity("agent")
	fac, err := mcp.StartFacade(ctx, mcp.FacadeConfig{Conn: b.Conn(), JS: b.JetStream(), Principal: b.Principal(), Workspace: o.workspace, Agent: o.agent, Session: o.session,
		User: id.User, Host: id.Host, Policy: current.Load, NoElicitation: o.noElicitation, Version: readBuildInfo().Version, Logger: log})
	if err != nil {
		return err
	}
	defer fac.Close()
	// The list follows the fleet's pushed policy (and --policy), as the
	// executors do.
	w, err := policy.Watch(ctx, b.JetStream(), policy.WatchConfig{Dir: o.policyDir, Current: pol.Revision(), Logger: log,
		Apply: func(p *policy.Policy) { current.Store(p); fac.Refresh() }})
	if err != nil {
		return err
	}
	defer w.Stop()

	if o.listen == "" {
		return fac.ServeStdio(ctx, os.Stdin, os.Stdout)
	}
	if o.token == "" {
		o.token = os.Getenv(mcpTokenEnv)
	}
	ep, err := startMCPEndpoint(fac, o.listen, o.token, log)
	if err != nil {
		return err
	}
	defer ep.stop()
	fmt.Printf("toolbus mcp serve: %s\n", ep.describe())
	<-ctx.Done()
	return nil
}

// mcpEndpoint is the facade served over streamable HTTP.
type mcpEndpoint struct {
	srv   *http.Server
	url   string
	token string
	done  chan error
}

// startMCPEndpoint serves fac on listen. On loopback a token is optional;
// anywhere else one is required, and made when none is given.
func startMCPEndpoint(fac *mcp.Facade, listen, token string, log *slog.Logger) (*mcpEndpoint, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("mcp endpoint: %w", err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	if !addr.IP.IsLoopback() && token == "" {
		raw := make([]byte, 32)
		if _, err := rand.Read(raw); err != nil {
			ln.Close()
			return nil, err
		}
		token = base64.RawURLEncoding.EncodeToString(raw)
	}
	ep := &mcpEndpoint{url: "http://" + ln.Addr().String() + mcp.HTTPPath, token: token, done: make(chan error, 1),
		srv: &http.Server{Handler: fac.HTTPHandler(mcp.HTTPConfig{Addr: addr, Token: token}), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}}
	go func() { ep.done <- ep.srv.Serve(ln) }()
	return ep, nil
}

// describe is the endpoint's address, with the token when it has one.
func (ep *mcpEndpoint) describe() string {
	if ep.token == "" {
		return ep.url
	}
	return ep.url + " (Authorization: Bearer " + ep.token + ")"
}

func (ep *mcpEndpoint) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := ep.srv.Shutdown(ctx)
	if serr := <-ep.done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// upMCPEndpoint starts the endpoint `toolbus up` serves: listen, or the
// default port, or a free loopback port when that is taken.
func upMCPEndpoint(ctx context.Context, b *bus.Bus, listen string, pol func() *policy.Policy, log *slog.Logger) (*mcp.Facade, *mcpEndpoint, error) {
	id := cli.Identity("agent")
	fac, err := mcp.StartFacade(ctx, mcp.FacadeConfig{Conn: b.Conn(), JS: b.JetStream(), Principal: b.Principal(), User: id.User, Host: id.Host, Policy: pol, Version: readBuildInfo().Version, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	addr := listen
	if addr == "" {
		addr = defaultMCPListen
	}
	ep, err := startMCPEndpoint(fac, addr, os.Getenv(mcpTokenEnv), log)
	if err != nil && listen == "" {
		ep, err = startMCPEndpoint(fac, "127.0.0.1:0", os.Getenv(mcpTokenEnv), log)
	}
	if err != nil {
		fac.Close()
		return nil, nil, err
	}
	return fac, ep, nil
}
