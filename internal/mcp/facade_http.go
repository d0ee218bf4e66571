package mcp

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	mcpserver "github.com/mark3labs/mcp-go/server"
)

// HTTPPath is where the facade's streamable-HTTP endpoint answers.
const HTTPPath = "/mcp"

// HTTPConfig secures the facade's HTTP endpoint.
type HTTPConfig struct {
	// Addr is the address the endpoint listens on: on loopback only its
	// own names are accepted as Host and Origin (DNS rebinding), and a
	// token is optional; elsewhere a token is required.
	Addr *net.TCPAddr
	// Token, when set, must come as Authorization: Bearer.
	Token string
}

// HTTPHandler serves the facade over streamable HTTP at HTTPPath, behind
// the Host, Origin and token checks of cfg.
func (f *Facade) HTTPHandler(cfg HTTPConfig) http.Handler {
	// Stateful: a session keeps its client's name and capabilities, and
	// list_changed reaches it on its GET stream.
	inner := mcpserver.NewStreamableHTTPServer(f.srv, mcpserver.WithEndpointPath(HTTPPath), mcpserver.WithStateful(true))
	var hosts map[string]bool
	if cfg.Addr != nil && cfg.Addr.IP.IsLoopback() {
		port := strconv.Itoa(cfg.Addr.Port)
		hosts = map[string]bool{}
		for _, h := range []string{cfg.Addr.IP.String(), "127.0.0.1", "localhost", "::1"} {
			hosts[strings.ToLower(net.JoinHostPort(h, port))] = true
		}
	}
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
		if cfg.Token != "" {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(cfg.Token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="toolbus mcp"`)
				http.Error(w, "toolbus mcp: a bearer token is required", http.StatusUnauthorized)
				return
			}
		}
		inner.ServeHTTP(w, r)
	})
}
