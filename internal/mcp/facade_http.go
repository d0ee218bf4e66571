package mcp

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mcpserver "github.com/mark3labs/mcp-go/server"
)

// HTTPPath is where the facade's streamable-HTTP endpoint answers.
const HTTPPath = "/mcp"

// HTTPConfig secures the facade's HTTP endpoint.
type HTTPConfig struct {
	// Addr is the address the endpoint listens on: on loopback only its
	// own names are accepted as Host and Origin (DNS rebinding).
	Addr *net.TCPAddr
	// Tokens are the clients admitted, each by its bearer token
	// (Authorization: Bearer), on loopback too: any process of the
	// host reaches a loopback port, a confined tool process included.
	// A request without a token of theirs gets 401. Nil admits nobody,
	// and so does a source that fails.
	Tokens func() (*Tokens, error)
}

// HTTPHandler serves the facade over streamable HTTP at HTTPPath, behind
// the Host, Origin and credential checks of cfg. Each request runs as
// the client its token names; a session belongs to the client that
// opened it, and another client naming it is refused as if it did not
// exist.
func (f *Facade) HTTPHandler(cfg HTTPConfig) http.Handler {
	sessions := &clientSessions{owner: map[string]string{}, held: map[string]int{}}
	// Stateful: a session keeps its client's name and capabilities, and
	// list_changed reaches it on its GET stream.
	inner := mcpserver.NewStreamableHTTPServer(f.srv, mcpserver.WithEndpointPath(HTTPPath),
		mcpserver.WithSessionIdManagerResolver(sessions), mcpserver.WithSessionIdleTTL(sessionIdle))
	f.mu.Lock()
	f.endpoints = append(f.endpoints, inner)
	f.mu.Unlock()
	var hosts map[string]bool
	if cfg.Addr != nil && cfg.Addr.IP.IsLoopback() {
		port := strconv.Itoa(cfg.Addr.Port)
		hosts = map[string]bool{}
		for _, h := range []string{cfg.Addr.IP.String(), "127.0.0.1", "localhost", "::1"} {
			hosts[strings.ToLower(net.JoinHostPort(h, port))] = true
		}
	}
	var tokenErr atomic.Bool // the failure to read the tokens was logged
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hosts != nil && !hosts[strings.ToLower(r.Host)] {
			http.Error(w, "toolbus mcp: unexpected Host header", http.StatusForbidden)
			return
		}
		// A browser page of another site must not drive the endpoint: an
		// Origin, when sent, must be the endpoint's own.
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || !strings.EqualFold(u.Host, r.Host) || (hosts != nil && !hosts[strings.ToLower(u.Host)]) {
				http.Error(w, "toolbus mcp: request from another origin refused", http.StatusForbidden)
				return
			}
		}
		var tokens *Tokens
		if cfg.Tokens != nil {
			var err error
			if tokens, err = cfg.Tokens(); err != nil && tokenErr.CompareAndSwap(false, true) {
				f.log.Error("mcp facade: the clients' tokens cannot be read; only the others are admitted", "err", err)
			} else if err == nil {
				tokenErr.Store(false)
			}
		}
		client, ok := tokens.Client(bearer(r.Header.Get("Authorization")))
		if !ok && r.Method == http.MethodDelete {
			// A DELETE ends the session it names, which is all it can do:
			// the session id (128 random bits, known to its client alone)
			// is its credential. mcp-go's client sends no other.
			client, ok = sessions.ownerOf(r.Header.Get(mcpserver.HeaderKeySessionID))
		}
		if !ok {
			// RFC 6750 §3, as the MCP authorization spec has it.
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolbus mcp"`)
			http.Error(w, "toolbus mcp: a bearer token of a client is required (Authorization: Bearer …; docs/mcp.md)", http.StatusUnauthorized)
			return
		}
		// mcp-go checks the session of a POST, not of a GET stream or a
		// DELETE: a session id of another client's opens nothing here.
		if id := r.Header.Get(mcpserver.HeaderKeySessionID); id != "" && !sessions.owns(id, client) {
			http.Error(w, "toolbus mcp: no such session", http.StatusNotFound)
			return
		}
		inner.ServeHTTP(w, r.WithContext(WithClient(r.Context(), client)))
	})
}

// bearer is the token of an Authorization header's Bearer credentials;
// the scheme is case-insensitive (RFC 9110 §11.1).
func bearer(header string) string {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// clientSessions are the MCP sessions of an HTTP endpoint, each bound to
// the client that opened it. Its ids are 128 bits from crypto/rand. It
// is the endpoint's SessionIdManagerResolver: each request gets a
// manager that knows its client, so that a session id, if another client
// learnt it, names nothing for that client.
type clientSessions struct {
	mu    sync.Mutex
	owner map[string]string // session id → client
	held  map[string]int    // client → its sessions
}

// maxSessions bounds the sessions an endpoint keeps, and
// maxClientSessions those of one client, so that one client cannot take
// them all; past either none is dropped to make room: a new session gets
// no id, and its client is served as a client without sessions is, one
// request at a time.
const (
	maxSessions       = 4096
	maxClientSessions = 256
)

// sessionIdle is how long a session nobody uses is kept.
const sessionIdle = time.Hour

var errSessionUnknown = errors.New("no such session")

// ownerOf is the client of session id.
func (s *clientSessions) ownerOf(id string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	owner, ok := s.owner[id]
	return owner, ok
}

// owns reports whether session id is client's.
func (s *clientSessions) owns(id, client string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	owner, ok := s.owner[id]
	return ok && owner == client
}

func (s *clientSessions) ResolveSessionIdManager(r *http.Request) mcpserver.SessionIdManager {
	m := sessionManager{s: s}
	if r != nil {
		m.client, m.scoped = r.Context().Value(clientKey{}).(string)
	}
	return m
}

// sessionManager is the sessions' manager for one request: of its
// client (scoped), or of the server itself (a request-less sweep).
type sessionManager struct {
	s      *clientSessions
	client string
	scoped bool
}

func (m sessionManager) Generate() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	id := "mcp-session-" + base64.RawURLEncoding.EncodeToString(b[:])
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	if len(m.s.owner) >= maxSessions || m.s.held[m.client] >= maxClientSessions {
		return ""
	}
	m.s.owner[id] = m.client
	m.s.held[m.client]++
	return id
}

func (m sessionManager) Validate(id string) (bool, error) {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	owner, ok := m.s.owner[id]
	if !ok || (m.scoped && owner != m.client) {
		// Another client's session and no session look alike.
		return false, errSessionUnknown
	}
	return false, nil
}

func (m sessionManager) Terminate(id string) (bool, error) {
	m.s.mu.Lock()
	defer m.s.mu.Unlock()
	if owner, ok := m.s.owner[id]; ok && (!m.scoped || owner == m.client) {
		delete(m.s.owner, id)
		if m.s.held[owner]--; m.s.held[owner] <= 0 {
			delete(m.s.held, owner)
		}
	}
	return false, nil
}
