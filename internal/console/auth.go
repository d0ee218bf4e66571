package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"strconv"
	"strings"
	"unicode"
)

// contentSecurityPolicy allows the console's own files and nothing else:
// no inline script or style, so markup an agent smuggles into a request
// could not run even if it reached the DOM as markup.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// auth decides who may use the console: whoever shows the token as
// Authorization: Bearer, the page included.
//
// There is no cookie. A cookie is bound to a host, not to a port, so the
// browser would hand the console's session to any page an agent serves on
// another loopback port, and that page's server could act with it. The
// page keeps the token in its tab's sessionStorage, which belongs to the
// console's origin (scheme, host and port) alone, and sends it as a
// header, which the browser never adds on its own: a request that did not
// come from the console's own script carries no credential at all.
type auth struct {
	token []byte
	// hosts are the Host headers accepted, nil when any is: on loopback
	// only the listen address's own names are, so a page on a rebound
	// DNS name cannot talk to the console from the browser.
	hosts map[string]bool
	// signin, when set, signs people in with the organization's OpenID
	// provider: the bearer must then be a session of a signed-in person,
	// and the token grants nothing.
	signin *signin
}

func newAuth(token string, addr *net.TCPAddr) *auth {
	port := strconv.Itoa(addr.Port)
	a := &auth{token: []byte(token)}
	if addr.IP.IsLoopback() {
		a.hosts = map[string]bool{}
		for _, h := range []string{addr.IP.String(), "127.0.0.1", "localhost", "::1"} {
			a.hosts[net.JoinHostPort(h, port)] = true
		}
	}
	return a
}

// bearer reports whether the request carries the token as
// Authorization: Bearer; with sign-in, a live session's id, which it
// returns.
func (a *auth) bearer(r *http.Request) (*session, bool) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if a.signin != nil {
		ss := a.signin.lookup(tok)
		return ss, ok && ss != nil
	}
	return nil, ok && equal(tok, string(a.token))
}

// person is who answered as the console records it: the name the person
// gave in the page, cut to a line of printing characters, with the id of
// the token they showed; everyone with the token is the console's member
// on the bus, so the name is theirs to give, and the token's id says
// through which token it came.
func (a *auth) person(name string) string {
	name = strings.Join(strings.FieldsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }), " ")
	if len(name) > maxPersonName {
		name = strings.ToValidUTF8(name[:maxPersonName], "")
	}
	id := a.tokenID()
	if name == "" {
		return "someone with console token " + id
	}
	return name + " (console token " + id + ")"
}

// maxPersonName bounds the name a person gives in the page.
const maxPersonName = 64

// tokenID names the token without giving it away: the first 8 hex digits
// of its SHA-256.
func (a *auth) tokenID() string {
	sum := sha256.Sum256(a.token)
	return hex.EncodeToString(sum[:4])
}

// equal compares in constant time, so a guess learns nothing from timing.
func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// headers sets the security headers and checks the Host; it writes the
// refusal and returns false for a Host the console does not answer to.
func (a *auth) headers(w http.ResponseWriter, r *http.Request) bool {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if a.hosts != nil && !a.hosts[strings.ToLower(r.Host)] {
		http.Error(w, "toolbus console: unexpected Host header; open the console by the address it printed", http.StatusForbidden)
		return false
	}
	return true
}

// public wraps the handlers of the page and its files, which hold nothing
// of the queue and are served to anyone who reaches the console: the page
// must load before its script can show the token it keeps. A ?token= that
// is there must be the token, so a wrong address says so at once.
func (a *auth) public(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.headers(w, r) {
			return
		}
		if q := r.URL.Query(); a.signin == nil && q.Has("token") && !equal(q.Get("token"), string(a.token)) {
			http.Error(w, "toolbus console: wrong token", http.StatusForbidden)
			return
		}
		next(w, r)
	})
}

// guard wraps every handler of the API: the security headers, the Host
// check, and the bearer. State-changing handlers check more (see
// sameOrigin).
func (a *auth) guard(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.headers(w, r) {
			return
		}
		ss, ok := a.bearer(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolbus console"`)
			if a.signin != nil {
				// The page offers the sign-in when it reads this.
				w.Header().Set("X-Toolbus-Sign-In", "oidc")
				http.Error(w, "toolbus console: not signed in, or the sign-in expired; sign in with the organization's provider", http.StatusUnauthorized)
				return
			}
			http.Error(w, "toolbus console: not signed in; open the address with #token= that toolbus printed at start", http.StatusUnauthorized)
			return
		}
		if ss != nil {
			r = r.WithContext(context.WithValue(r.Context(), sessionKey{}, ss))
		}
		next(w, r)
	})
}

// sameOrigin refuses a state-changing request that a browser says comes
// from another origin (Sec-Fetch-Site, Origin). The bearer alone already
// keeps other pages out, since no browser adds it on its own and a
// cross-origin script may not send it without a preflight the console
// never grants; this is a second wall, should a token ever reach a page
// of another origin. Scripts, which send neither header, pass. It writes
// the refusal and returns false.
func (a *auth) sameOrigin(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "toolbus console: POST only", http.StatusMethodNotAllowed)
		return false
	}
	site := r.Header.Get("Sec-Fetch-Site")
	origin := r.Header.Get("Origin")
	switch {
	case site != "" && site != "same-origin":
		http.Error(w, "toolbus console: cross-site request refused", http.StatusForbidden)
		return false
	case origin != "" && origin != "http://"+r.Host:
		http.Error(w, "toolbus console: request from another origin refused", http.StatusForbidden)
		return false
	}
	return true
}
