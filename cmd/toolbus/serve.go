package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	defaultpolicy "github.com/toolbus/toolbus/policy"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/mcp"
	"github.com/toolbus/toolbus/internal/policy"
)

// mcpTokenEnv holds a bearer token the MCP endpoint admits, as the
// client "default", beside its tokens file's clients.
const mcpTokenEnv = "TOOLBUS_MCP_TOKEN"

// defaultClient is the client a token given on the command line or in
// $TOOLBUS_MCP_TOKEN is, and the one `toolbus up` makes a token for.
const defaultClient = "default"

// mcpTokensFile and mcpTokenFile are, in `toolbus up`'s data directory,
// its MCP clients' tokens (NAME SHA256 lines) and the default client's
// token itself, for a client's configuration to read; both 0600.
const (
	mcpTokensFile = "mcp-tokens"
	mcpTokenFile  = "mcp-token"
)

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

  # Over HTTP, each client with a token of its own (toolbus mcp token add NAME).
  toolbus mcp serve --listen 127.0.0.1:7879 --tokens ~/.local/state/toolbus/mcp-tokens`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	agent := fs.String("agent", "", "agent id every caller is named by (default: the MCP client's name)")
	session := fs.String("session", "", "session id every caller is named by (default: the MCP session)")
	workspace := fs.String("workspace", "", "the workspace the file and shell tools act on, as the executors name it (default $TOOLBUS_WORKSPACE, else the one there is)")
	policyDir := fs.String("policy", "", "directory of .rego files that decides which tools a caller is listed (default: the pushed policy, else the default policy)")
	listen := fs.String("listen", "", "serve streamable HTTP on this address instead of stdio")
	token := fs.String("token", "", "a bearer token --listen admits, as the client \""+defaultClient+"\" (default $"+mcpTokenEnv+"; one is made and printed when neither it nor --tokens is given)")
	tokens := fs.String("tokens", "", "tokens file of the clients --listen admits, each by its own token (toolbus mcp token add)")
	noElicit := fs.Bool("no-elicitation", false, "never ask the MCP client's user to confirm a call; only approvers on tool.confirm answer (the policy's elicitation_allowed decides otherwise)")
	logLevel := fs.String("log-level", "warn", "debug, info, warn or error (logs go to stderr)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *workspace == "" {
			*workspace = os.Getenv("TOOLBUS_WORKSPACE")
		}
		return runMCPServe(busURLFor(cmd), mcpServeOptions{agent: *agent, session: *session, workspace: *workspace, policyDir: *policyDir,
			listen: *listen, token: *token, tokens: *tokens, noElicitation: *noElicit, logLevel: *logLevel})
	}
	return cmd
}

// mcpServeOptions are the command line of `toolbus mcp serve`.
type mcpServeOptions struct {
	agent, session, workspace, policyDir, listen, token, tokens, logLevel string
	noElicitation                                                         bool
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
	// Over stdio it serves the one process that started it, as a client
	// of its own under the facade, when it may speak as the facade.
	seed, client := cli.FacadeSeed(natsURL), ""
	if o.listen == "" {
		client = stdioClient()
	}
	b, err := cli.ConnectAs(ctx, natsURL, "toolbus-mcp-serve", seed, log)
	if err != nil {
		return err
	}
	defer cli.Close(b)
	// Only a facade may name a client of its own: anyone else (the agent,
	// as a process that cannot read the facade's seed connects) calls
	// as itself, since the bus would drop its client's subjects.
	if client != "" && b.Principal() != "" {
		if ok, err := b.MayPublish(ctx, events.InvokeSubject(events.ClientPrincipal(b.Principal(), client))); !ok || err != nil {
			client = ""
		}
	}

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
	fac, err := mcp.StartFacade(ctx, mcp.FacadeConfig{Conn: b.Conn(), JS: b.JetStream(), Principal: b.Principal(), Client: client, Workspace: o.workspace, Agent: o.agent, Session: o.session,
		User: id.User, Host: id.Host, Policy: current.Load, NoElicitation: o.noElicitation, Version: readBuildInfo().Version, Logger: log})
	if err != nil {
		return err
	}
	defer fac.Close()
	// The list follows the fleet's pushed policy (and --policy), as the
	// executors do, and by the same trust list: during a staged rollout,
	// the revision that decides this principal's calls.
	signers, err := cli.PolicySigners("", natsURL)
	if err != nil {
		return err
	}
	w, err := policy.Watch(ctx, b.JetStream(), policy.WatchConfig{Dir: o.policyDir, Own: pol, Signers: signers, Logger: log,
		Apply: func(en *policy.Enforced) { current.Store(en.For(b.Principal(), o.workspace)); fac.Refresh() }})
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
	made := ""
	if o.token == "" && o.tokens == "" {
		made = mcp.NewToken()
		o.token = made
	}
	source := endpointTokens(o.tokens, o.token)
	if _, err := source(); err != nil {
		return err
	}
	ep, err := startMCPEndpoint(fac, o.listen, source, log)
	if err != nil {
		return err
	}
	ep.token = made
	defer ep.stop()
	fmt.Printf("toolbus mcp serve: %s\n", ep.describe())
	<-ctx.Done()
	return nil
}

// mcpEndpoint is the facade served over streamable HTTP.
type mcpEndpoint struct {
	srv *http.Server
	url string
	// token is one made for this run, to print; tokenFile, where the
	// default client's token is kept; tokensFile, the clients' digests.
	token, tokenFile, tokensFile string
	done                         chan error
}

// endpointTokens is the clients an endpoint admits: those of the tokens
// file path (when named), and token's as the default client (when set).
func endpointTokens(path, token string) func() (*mcp.Tokens, error) {
	var extra func(*mcp.Tokens) (*mcp.Tokens, error)
	if token != "" {
		extra = func(t *mcp.Tokens) (*mcp.Tokens, error) { return t.With(defaultClient, token) }
	}
	if path == "" {
		t, err := (*mcp.Tokens)(nil).With(defaultClient, token)
		return func() (*mcp.Tokens, error) { return t, err }
	}
	f := &mcp.TokensFile{Path: path, Extra: extra}
	return f.Tokens
}

// startMCPEndpoint serves fac on listen to the clients tokens admits, on
// loopback too: any process of the host can reach a loopback port.
func startMCPEndpoint(fac *mcp.Facade, listen string, tokens func() (*mcp.Tokens, error), log *slog.Logger) (*mcpEndpoint, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("mcp endpoint: %w", err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ep := &mcpEndpoint{url: "http://" + ln.Addr().String() + mcp.HTTPPath, done: make(chan error, 1),
		srv: &http.Server{Handler: fac.HTTPHandler(mcp.HTTPConfig{Addr: addr, Tokens: tokens}), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}}
	go func() { ep.done <- ep.srv.Serve(ln) }()
	return ep, nil
}

// describe is the endpoint's address and how a client authenticates.
func (ep *mcpEndpoint) describe() string {
	switch {
	case ep.token != "":
		return ep.url + " (Authorization: Bearer " + ep.token + ")"
	case ep.tokenFile != "":
		more := "toolbus mcp token add NAME"
		if ep.tokensFile != filepath.Join(cli.DefaultDataDir(), mcpTokensFile) {
			more += " --tokens " + ep.tokensFile
		}
		return ep.url + " (Authorization: Bearer <the token in " + ep.tokenFile + ">; more clients: " + more + ")"
	}
	return ep.url + " (Authorization: Bearer <a client's token>)"
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
// default port, or a free loopback port when that is taken. Its clients
// are those of DATA/mcp-tokens, the default one's token kept in
// DATA/mcp-token (made when missing), and $TOOLBUS_MCP_TOKEN's.
func upMCPEndpoint(ctx context.Context, b *bus.Bus, dataDir, listen string, pol func() *policy.Policy, log *slog.Logger) (*mcp.Facade, *mcpEndpoint, error) {
	tokensPath, tokenPath := filepath.Join(dataDir, mcpTokensFile), filepath.Join(dataDir, mcpTokenFile)
	if err := ensureDefaultToken(tokensPath, tokenPath); err != nil {
		return nil, nil, fmt.Errorf("mcp endpoint: %w", err)
	}
	envToken := os.Getenv(mcpTokenEnv)
	source := endpointTokens(tokensPath, envToken)
	if _, err := source(); err != nil {
		return nil, nil, fmt.Errorf("mcp endpoint: %w", err)
	}
	id := cli.Identity("agent")
	fac, err := mcp.StartFacade(ctx, mcp.FacadeConfig{Conn: b.Conn(), JS: b.JetStream(), Principal: b.Principal(), User: id.User, Host: id.Host, Policy: pol, Version: readBuildInfo().Version, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	addr := listen
	if addr == "" {
		addr = defaultMCPListen
	}
	ep, err := startMCPEndpoint(fac, addr, source, log)
	if err != nil && listen == "" {
		ep, err = startMCPEndpoint(fac, "127.0.0.1:0", source, log)
	}
	if err != nil {
		fac.Close()
		return nil, nil, err
	}
	// A token the environment gave is printed, as the one given on the
	// command line is: whoever set it knows it already.
	ep.token, ep.tokenFile, ep.tokensFile = envToken, tokenPath, tokensPath
	return fac, ep, nil
}

// ensureDefaultToken makes sure the default client has a token, kept in
// tokenPath (0600), whose digest tokensPath holds: a new one when either
// is missing or they do not match.
func ensureDefaultToken(tokensPath, tokenPath string) error {
	if data, err := os.ReadFile(tokenPath); err == nil {
		if t, err := mcp.LoadTokens(tokensPath); err == nil {
			if c, ok := t.Client(strings.TrimSpace(string(data))); ok && c == defaultClient {
				return nil
			}
		}
	}
	token, err := mcp.AddToken(tokensPath, defaultClient)
	if err != nil {
		return err
	}
	return writePrivate(tokenPath, token+"\n")
}

// writePrivate writes data to path, readable by its owner only.
func writePrivate(path, data string) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// stdioClient names the one process a stdio facade serves: "stdio-" and
// 64 random bits, new for every process, so that two agents' stdio
// facades are two clients, each with its own bounds and answers, whatever
// the names their MCP clients give themselves.
func stdioClient() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return fmt.Sprintf("stdio-%x", b)
}

// newMCPTokenCommand is `toolbus mcp token`: the clients the MCP endpoint
// of `toolbus up` (or `mcp serve --tokens`) admits, each by a token of
// its own.
func newMCPTokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Give an MCP client a token of its own, take it back, or list the clients",
		Long: `Every client of the MCP endpoint authenticates with a bearer token of its
own (Authorization: Bearer TOKEN), on loopback too, and is a principal of its
own under the facade (facade/NAME): its own pending confirmations, limits and
sessions, and its user's answers count for its calls only. The tokens file
keeps each client's name and the SHA-256 of its token; the token itself is
printed once, by add.`,
		Example: "  toolbus mcp token add claude-code\n  toolbus mcp token list\n  toolbus mcp token remove claude-code",
	}
	file := cmd.PersistentFlags().String("tokens", "", "the tokens file (default: "+mcpTokensFile+" in toolbus up's data directory)")
	path := func() string {
		if *file != "" {
			return *file
		}
		return filepath.Join(cli.DefaultDataDir(), mcpTokensFile)
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "add NAME",
		Short: "Make a token for client NAME (replacing its earlier one) and print it",
		Example: `  # A token of its own for the agent's MCP client, kept outside the workspace.
  toolbus mcp token add claude-code > ~/.config/toolbus/claude-code.token`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := os.MkdirAll(filepath.Dir(path()), 0o700); err != nil {
				return err
			}
			token, err := mcp.AddToken(path(), args[0])
			if err != nil {
				return usageError{err}
			}
			fmt.Println(token)
			return nil
		},
	}, &cobra.Command{
		Use:     "remove NAME",
		Short:   "Take client NAME's token back: its next request is refused",
		Example: `  toolbus mcp token remove claude-code`,
		Args:    cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			found, err := mcp.RemoveToken(path(), args[0])
			if err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("%s has no token in %s", args[0], path())
			}
			return nil
		},
	}, &cobra.Command{
		Use:   "list",
		Short: "List the clients that have a token",
		Example: `  toolbus mcp token list
  toolbus mcp token list --tokens /etc/toolbus/mcp-tokens`,
		Args: noArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			t, err := mcp.LoadTokens(path())
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, c := range t.Clients() {
				fmt.Println(c)
			}
			return nil
		},
	})
	return cmd
}
