package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// contentSecurityPolicy allows the console's own files and nothing else:
// no inline script or style, so markup an agent smuggles into a request
// could not run even if it reached the DOM as markup.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// csrfHeader carries the session's CSRF token on state-changing requests.
const csrfHeader = "X-Toolbus-Csrf"

// auth decides who may use the console. A session is a random id signed
// with the token (HMAC), so sessions need no server-side store and a
// console restarted with the same configured token keeps them; its CSRF
// token is derived from the id the same way.
type auth struct {
	token  []byte
	cookie string
	// hosts are the Host headers accepted, nil when any is: on loopback
	// only the listen address's own names are, so a page on a rebound
	// DNS name cannot talk to the console from the browser.
	hosts map[string]bool
}

func newAuth(token string, addr *net.TCPAddr) *auth {
	port := strconv.Itoa(addr.Port)
	a := &auth{token: []byte(token), cookie: "toolbus_console_" + port}
	if addr.IP.IsLoopback() {
		a.hosts = map[string]bool{}
		for _, h := range []string{addr.IP.String(), "127.0.0.1", "localhost", "::1"} {
			a.hosts[net.JoinHostPort(h, port)] = true
		}
	}
	return a
}

func (a *auth) sign(purpose, sid string) string {
	m := hmac.New(sha256.New, a.token)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(sid))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (a *auth) newSession() (string, error) {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	sid := base64.RawURLEncoding.EncodeToString(b)
	return sid + "." + a.sign("session", sid), nil
}

// session returns the session id of the request's cookie, if it carries a
// valid one.
func (a *auth) session(r *http.Request) (string, bool) {
	c, err := r.Cookie(a.cookie)
	if err != nil {
		return "", false
	}
	sid, mac, ok := strings.Cut(c.Value, ".")
	if !ok || sid == "" || !equal(mac, a.sign("session", sid)) {
		return "", false
	}
	return sid, true
}

func (a *auth) csrf(sid string) string { return a.sign("csrf", sid) }

// bearer reports whether the request carries the token as
// Authorization: Bearer, as a script would.
func (a *auth) bearer(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	return ok && equal(tok, string(a.token))
}

// equal compares in constant time, so a guess learns nothing from timing.
func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// caller is how a request proved it may use the console.
type caller struct {
	session string // the session id; empty for a bearer
	bearer  bool
}

// guard wraps every handler: security headers, the Host check, the token
// exchange, and authentication. State-changing handlers check more (see
// sameOrigin).
func (a *auth) guard(next func(http.ResponseWriter, *http.Request, caller)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			return
		}
		if q := r.URL.Query(); q.Has("token") {
			a.exchange(w, r, q)
			return
		}
		switch {
		case a.bearer(r):
			next(w, r, caller{bearer: true})
		default:
			sid, ok := a.session(r)
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="toolbus console"`)
				http.Error(w, "toolbus console: not signed in; open the address with ?token= that toolbus printed at start", http.StatusUnauthorized)
				return
			}
			next(w, r, caller{session: sid})
		}
	})
}

// exchange trades a valid ?token= for a session cookie and redirects to
// the page without it, so the token leaves the address bar and the
// history.
func (a *auth) exchange(w http.ResponseWriter, r *http.Request, q url.Values) {
	if r.Method != http.MethodGet || !equal(q.Get("token"), string(a.token)) {
		http.Error(w, "toolbus console: wrong token", http.StatusForbidden)
		return
	}
	value, err := a.newSession()
	if err != nil {
		http.Error(w, "toolbus console: cannot start a session", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: a.cookie, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	// Always to the page itself: a path taken from the request could
	// make this an open redirect ("//elsewhere.example").
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// sameOrigin refuses a state-changing request unless it comes from the
// console's own page: the browser says so (Sec-Fetch-Site, Origin), and a
// session also shows its CSRF token, which only a page of this origin
// can read. A bearer is not sent by browsers on their own, so it needs
// no CSRF token, but a browser's cross-site request is refused all the
// same. It writes the refusal and returns false.
func (a *auth) sameOrigin(w http.ResponseWriter, r *http.Request, c caller) bool {
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
	case c.bearer:
		return true
	case site == "" && origin == "":
		http.Error(w, "toolbus console: the request says nothing of its origin; a browser always does (scripts use Authorization: Bearer)", http.StatusForbidden)
		return false
	case !equal(r.Header.Get(csrfHeader), a.csrf(c.session)):
		http.Error(w, "toolbus console: missing or wrong CSRF token; reload the page", http.StatusForbidden)
		return false
	}
	return true
}
