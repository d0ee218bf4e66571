// Package console is the web console: an HTTP server that is a view over
// an approve.Approver and the fleet's allowlist. It shows the pending
// confirmation requests live (server-sent events), answers them with the
// outcomes the protocol knows, lists recent decisions, and revokes
// remembered approvals.
//
// Everything it shows comes from agents, which may be prompt-injected, so
// the page treats every field as text, and the server admits only holders
// of its token (sent as a header, never a cookie: see auth), refuses state
// changes from any other origin, and sends a Content-Security-Policy that
// allows no inline script.
//
// The console is an approver executors send calls to only while a person
// can see them: while at least one page holds its live event stream open
// (see Config.Approver). A console listening with no page open counts for
// nothing, and a call the policy asks about is denied at once instead of
// waiting for an answer nobody would give.
package console

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/redact"
)

// DefaultListen is where the console listens unless told otherwise. When
// that port is taken, Start falls back to a free port on loopback (see
// Config.Listen).
const DefaultListen = "127.0.0.1:7878"

// MinTokenLength is the shortest token Start accepts, so that a configured
// token cannot be guessed in a few tries.
const MinTokenLength = 16

// heartbeat is how often an idle event stream gets a comment, so that
// proxies and browsers keep it open.
const heartbeat = 15 * time.Second

// ReloadGrace is how long a console's approver should stay present after
// its last page stopped watching (approve.Config.Linger): a page that
// reloads, or reconnects after its stream broke off, is back within it,
// and a call made in between waits instead of being denied.
const ReloadGrace = 5 * time.Second

//go:embed assets
var assets embed.FS

// Config configures a console server.
type Config struct {
	// Approver is the seat the console answers from. Required. Start it
	// with approve.Config.PresentWhileHeld (and Linger ReloadGrace) for
	// the console to be present only while a page watches it: each
	// open event stream holds it present.
	Approver *approve.Approver
	// Allowlist is the fleet's allowlist bucket (executor.OpenAllowlistBucket).
	// Required.
	Allowlist jetstream.KeyValue
	// JetStream is what Allowlist was opened through: the console reads
	// the bucket with direct gets and follows its republished changes
	// (bus.Watch), no consumer. Required.
	JetStream jetstream.JetStream
	// Listen is the address to listen on. Empty means DefaultListen, or a
	// free loopback port when DefaultListen is taken.
	Listen string
	// Listener, when set, is listened on instead of Listen (see Listen):
	// the console's address is then known before it starts. The console
	// closes it.
	Listener net.Listener
	// Token grants access; empty means one is generated. At least
	// MinTokenLength characters.
	Token string
	// OIDC, when set, signs people in with the organization's OpenID
	// provider, and the token then answers nothing (see OIDC).
	OIDC   *OIDC
	Logger *slog.Logger
	// Redact hides the secrets of the requests answered (see newState);
	// nil means redact.Default.
	Redact *redact.Redactor
}

// Server serves the console until Close.
type Server struct {
	cfg   Config
	log   *slog.Logger
	ln    net.Listener
	srv   *http.Server
	auth  *auth
	allow *allowWatch

	stopping chan struct{} // closed by Close: event streams end
	stopOnce sync.Once
	served   chan struct{} // closed when Serve returns
}

// Start validates cfg, listens, and serves in the background until Close.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	ln := cfg.Listener
	fail := func(err error) (*Server, error) {
		if ln != nil {
			ln.Close()
		}
		return nil, err
	}
	if cfg.Approver == nil {
		return fail(errors.New("console: no approver given"))
	}
	if cfg.Allowlist == nil || cfg.JetStream == nil {
		return fail(errors.New("console: no allowlist bucket given"))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Redact == nil {
		cfg.Redact = redact.Default
	}
	if cfg.Token == "" {
		t, err := newToken()
		if err != nil {
			return fail(err)
		}
		cfg.Token = t
	} else if len(cfg.Token) < MinTokenLength {
		return fail(fmt.Errorf("console: the token is %d characters; at least %d are needed", len(cfg.Token), MinTokenLength))
	}
	if ln == nil {
		var err error
		if ln, err = Listen(cfg.Listen, cfg.Logger); err != nil {
			return nil, err
		}
	}
	allow, err := watchAllowlist(ctx, cfg.JetStream, cfg.Allowlist, cfg.Logger)
	if err != nil {
		return fail(err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, ln: ln, allow: allow,
		stopping: make(chan struct{}), served: make(chan struct{})}
	addr := ln.Addr().(*net.TCPAddr)
	if !addr.IP.IsLoopback() {
		cfg.Logger.Warn("console: listening beyond loopback over plain HTTP: the token and the session cross the network in clear; put it behind TLS", "addr", addr.String())
	}
	s.auth = newAuth(cfg.Token, addr)
	if cfg.OIDC != nil {
		if s.auth.signin, err = newSignin(ctx, *cfg.OIDC, BaseURL(addr), cfg.Logger); err != nil {
			allow.stop()
			return fail(err)
		}
	}
	s.srv = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("console: serving stopped", "err", err)
		}
	}()
	return s, nil
}

// Listen binds the console's address addr, as Start does with
// Config.Listen: the default address (addr empty) falls back to a free
// loopback port when taken, an address the user chose does not. log may
// be nil.
func Listen(addr string, log *slog.Logger) (net.Listener, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if addr == "" {
		ln, err := net.Listen("tcp", DefaultListen)
		if err == nil {
			return ln, nil
		}
		log.Info("console: the default address is taken; using a free port", "addr", DefaultListen, "err", err)
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("console: listen on %s: %w (choose another address, or 127.0.0.1:0 for any free port)", addr, err)
	}
	return ln, nil
}

func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("console: generate a token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Addr is the address the console listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// BaseURL is the console's address without the token.
func (s *Server) BaseURL() string { return BaseURL(s.ln.Addr()) }

// BaseURL is the address, without the token, of a console listening on
// addr (a *net.TCPAddr, as Listen gives).
func BaseURL(addr net.Addr) string {
	a := addr.(*net.TCPAddr)
	host := a.IP.String()
	if a.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(a.Port)) + "/"
}

// URL is the address a person opens. The token is in the fragment, which
// the browser never sends anywhere: the page's script takes it into the
// tab's sessionStorage, of the console's origin alone, and takes it out
// of the address bar and the history (see auth).
// With sign-in by OIDC it is BaseURL: the page signs the person in.
func (s *Server) URL() string {
	if s.auth.signin != nil {
		return s.BaseURL()
	}
	return s.BaseURL() + "#token=" + url.QueryEscape(s.cfg.Token)
}

// SignsIn reports whether people sign in with the organization's OpenID
// provider (Config.OIDC).
func (s *Server) SignsIn() bool { return s.auth.signin != nil }

// Token is the access token, for Authorization: Bearer.
func (s *Server) Token() string { return s.cfg.Token }

// Close ends the event streams, waits for the other requests to finish
// (until ctx ends) and stops following the allowlist.
func (s *Server) Close(ctx context.Context) error {
	s.stopOnce.Do(func() { close(s.stopping) })
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	<-s.served
	s.allow.stop()
	return err
}
