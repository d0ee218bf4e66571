package console

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/toolbus/toolbus/internal/events"
)

// OIDC configures sign-in with the organization's OpenID provider: each
// person signs in by the authorization code flow with PKCE, and every
// answer they send carries who the verified ID token says they are
// (events.Signer). With it, the console's shared token answers nothing.
type OIDC struct {
	// Issuer is the provider's issuer URL; its discovery document
	// (/.well-known/openid-configuration) names the rest. Required.
	Issuer string
	// ClientID and ClientSecret are the console's client at the
	// provider (see ReadClientSecret). Both required.
	ClientID     string
	ClientSecret string
	// RedirectURL is where the provider sends the person back: the
	// console's /auth/callback as the browser reaches it. Empty: the
	// console's own address (Server.BaseURL) + "auth/callback".
	RedirectURL string
	// Scopes are asked for beside DefaultScopes (e.g. "groups", which
	// Dex needs to send the groups claim).
	Scopes []string
	// GroupsClaim is the ID token's claim that lists the person's
	// groups; empty means DefaultGroupsClaim.
	GroupsClaim string
	// Now is the clock the ID token's expiry is judged by; nil means
	// time.Now.
	Now func() time.Time
	// HTTPClient reaches the provider; nil means http.DefaultClient.
	HTTPClient *http.Client
}

// DefaultScopes are the scopes every sign-in asks for.
var DefaultScopes = []string{oidc.ScopeOpenID, "email", "profile"}

// DefaultGroupsClaim is the claim read for the person's groups unless
// OIDC.GroupsClaim names another.
const DefaultGroupsClaim = "groups"

// Bounds of the sign-ins under way: the start of one is open to anyone
// who reaches the console, so they must not grow without end.
const (
	maxFlows = 1000
	// flowTTL is how long a person has at the provider to sign in.
	flowTTL = 10 * time.Minute
	// grantTTL is how long the page has to take the session the
	// provider's redirect made.
	grantTTL = 2 * time.Minute
	// discoveryTimeout bounds reading the provider's discovery document
	// at start.
	discoveryTimeout = 30 * time.Second
)

// ReadClientSecret reads a client secret from path, refusing a file that
// others than its owner may read or write: the secret lets anyone sign
// people in as the console.
func ReadClientSecret(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("console: the OIDC client secret: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("console: the OIDC client secret %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("console: the OIDC client secret %s has mode %04o; others may read it: chmod 600 %s", path, perm, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("console: the OIDC client secret: %w", err)
	}
	secret := strings.TrimSpace(string(data))
	if secret == "" {
		return "", fmt.Errorf("console: the OIDC client secret %s is empty: %w", path, fs.ErrInvalid)
	}
	return secret, nil
}

// session is a signed-in person: who the ID token says they are, until it
// expires.
type session struct {
	who     events.Signer
	expires time.Time
}

// flow is a sign-in under way, known by its state: what the callback
// checks the provider's answer against.
type flow struct {
	nonce    string
	verifier string   // PKCE
	binding  [32]byte // SHA-256 of the secret the starting tab kept
	expires  time.Time
	// session is set by the callback: the tab that started the flow
	// takes it with the secret (finish).
	session string
}

// signin is the console's OIDC relying party and its sessions.
//
// The session is a bearer, like the shared token, kept in the tab's
// sessionStorage and sent as a header: never a cookie, which any page an
// agent serves on another port of the same host would be sent (see auth).
// The redirect back from the provider can carry no header, so a sign-in
// is bound to the tab that started it by a secret the tab keeps: the
// callback makes the session, and only that tab, showing the secret,
// takes it (finish). A sign-in someone else started and completed (their
// code, sent to the person's browser) gives the person's tab nothing.
type signin struct {
	oauth    oauth2.Config
	verifier *oidc.IDTokenVerifier
	groups   string
	now      func() time.Time
	client   *http.Client
	log      *slog.Logger

	mu       sync.Mutex
	flows    map[string]*flow      // by state
	sessions map[[32]byte]*session // by SHA-256 of the session id
}

// newSignin discovers the provider and makes the relying party; base is
// the console's own address, for the default redirect.
func newSignin(ctx context.Context, cfg OIDC, base string, log *slog.Logger) (*signin, error) {
	switch {
	case cfg.Issuer == "":
		return nil, errors.New("console: OIDC: no issuer URL given")
	case cfg.ClientID == "":
		return nil, errors.New("console: OIDC: no client id given")
	case cfg.ClientSecret == "":
		return nil, errors.New("console: OIDC: no client secret given")
	}
	s := &signin{groups: cmp.Or(cfg.GroupsClaim, DefaultGroupsClaim), now: cfg.Now,
		client: cmp.Or(cfg.HTTPClient, http.DefaultClient), log: log,
		flows: map[string]*flow{}, sessions: map[[32]byte]*session{}}
	if s.now == nil {
		s.now = time.Now
	}
	// The keys are fetched later with this context's client, not its
	// deadline (go-oidc keeps its values only).
	ctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, s.client), discoveryTimeout)
	defer cancel()
	provider, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("console: OIDC: discover the provider %s: %w", cfg.Issuer, err)
	}
	s.oauth = oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, Endpoint: provider.Endpoint(),
		RedirectURL: cmp.Or(cfg.RedirectURL, base+"auth/callback"),
		Scopes:      append(slices.Clone(DefaultScopes), cfg.Scopes...)}
	// The verifier checks the signature against the provider's keys
	// (fetched from its JWKS, over the client), the issuer, the audience
	// and the expiry; the nonce is checked in callback.
	s.verifier = provider.Verifier(&oidc.Config{ClientID: cfg.ClientID, Now: s.now})
	return s, nil
}

// random is n bytes of crypto/rand, base64url.
func random(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// errTooManyFlows refuses a sign-in when too many are under way.
var errTooManyFlows = errors.New("too many sign-ins are under way; try again in a few minutes")

// start begins a sign-in for the tab that keeps binding, and returns the
// provider's address to send the person to.
func (s *signin) start(binding string) (string, error) {
	if len(binding) < 32 {
		return "", errors.New("the sign-in's binding is too short")
	}
	state, err := random(32)
	if err != nil {
		return "", err
	}
	nonce, err := random(32)
	if err != nil {
		return "", err
	}
	f := &flow{nonce: nonce, verifier: oauth2.GenerateVerifier(), binding: sha256.Sum256([]byte(binding)), expires: s.now().Add(flowTTL)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune()
	if len(s.flows) >= maxFlows {
		return "", errTooManyFlows
	}
	s.flows[state] = f
	return s.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(f.verifier)), nil
}

// prune forgets the flows and sessions that expired. s.mu is held.
func (s *signin) prune() {
	now := s.now()
	for k, f := range s.flows {
		if now.After(f.expires) {
			delete(s.flows, k)
		}
	}
	for k, ss := range s.sessions {
		if !now.Before(ss.expires) {
			delete(s.sessions, k)
		}
	}
}

// callback completes the sign-in the provider sent the person back from:
// it exchanges the code (with the PKCE verifier), verifies the ID token
// and makes the session, which the flow keeps for its tab to take. It
// returns the state for the page to finish with.
func (s *signin) callback(ctx context.Context, q map[string][]string) (string, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	state := get("state")
	s.mu.Lock()
	f, ok := s.flows[state]
	if ok && f.session != "" {
		ok = false // a callback replayed: the code was used once already
	}
	if ok {
		delete(s.flows, state)
	}
	s.mu.Unlock()
	if !ok || s.now().After(f.expires) {
		return "", errors.New("no sign-in under way with this state: start again from the console")
	}
	if e := get("error"); e != "" {
		return "", fmt.Errorf("the provider refused the sign-in: %s %s", e, get("error_description"))
	}
	code := get("code")
	if code == "" {
		return "", errors.New("the provider sent no code")
	}
	ctx = oidc.ClientContext(ctx, s.client)
	tok, err := s.oauth.Exchange(ctx, code, oauth2.VerifierOption(f.verifier))
	if err != nil {
		return "", fmt.Errorf("exchange the code at the provider: %w", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", errors.New("the provider sent no ID token")
	}
	who, expires, err := s.verify(ctx, raw, f.nonce)
	if err != nil {
		return "", err
	}
	id, err := random(32)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prune()
	if len(s.flows) >= maxFlows {
		return "", errTooManyFlows
	}
	s.sessions[sha256.Sum256([]byte(id))] = &session{who: who, expires: expires}
	f.session, f.expires = id, s.now().Add(grantTTL)
	s.flows[state] = f
	s.log.Info("console: signed in", "iss", who.Issuer, "sub", who.Subject, "email", who.Email, "groups", who.Groups, "until", expires)
	return state, nil
}

// verify checks an ID token (signature by the provider's keys, issuer,
// audience, expiry, and that it answers the nonce this sign-in sent) and
// returns the person it names and when it expires.
func (s *signin) verify(ctx context.Context, raw, nonce string) (events.Signer, time.Time, error) {
	idt, err := s.verifier.Verify(oidc.ClientContext(ctx, s.client), raw)
	if err != nil {
		return events.Signer{}, time.Time{}, fmt.Errorf("the ID token does not verify: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
		return events.Signer{}, time.Time{}, errors.New("the ID token answers another sign-in (its nonce differs)")
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return events.Signer{}, time.Time{}, fmt.Errorf("the ID token's claims: %w", err)
	}
	str := func(k string) string { v, _ := claims[k].(string); return v }
	who := events.Signer{Issuer: idt.Issuer, Subject: idt.Subject, Email: str("email"),
		Name: cmp.Or(str("name"), str("preferred_username"))}
	who.Groups = s.groupsOf(claims[s.groups])
	for _, f := range []string{who.Issuer, who.Subject, who.Name, who.Email} {
		if len(f) > events.MaxSignerField || strings.IndexFunc(f, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			return events.Signer{}, time.Time{}, fmt.Errorf("the ID token names the person with a field an answer cannot carry: %.80q", f)
		}
	}
	return who, idt.Expiry, nil
}

// groupsOf reads the groups claim: a list of strings, or one string. It
// keeps the groups an answer can carry (events.Signer's bounds) and drops
// the rest: a group dropped can only make the policy refuse.
func (s *signin) groupsOf(v any) []string {
	var all []string
	switch g := v.(type) {
	case string:
		all = []string{g}
	case []any:
		for _, e := range g {
			if str, ok := e.(string); ok {
				all = append(all, str)
			}
		}
	}
	var out []string
	for _, g := range all {
		if len(out) == events.MaxSignerGroups {
			s.log.Warn("console: the ID token lists more groups than an answer carries; the rest are dropped", "kept", len(out), "of", len(all))
			break
		}
		if g != "" && len(g) <= events.MaxSignerField && strings.IndexFunc(g, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
			out = append(out, g)
		}
	}
	return out
}

// finish hands the session the callback made to the tab that started the
// sign-in, which shows its secret; once.
func (s *signin) finish(state, binding string) (string, *session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.flows[state]
	if !ok || f.session == "" || s.now().After(f.expires) {
		return "", nil, errors.New("no sign-in to finish: start again")
	}
	b := sha256.Sum256([]byte(binding))
	if subtle.ConstantTimeCompare(b[:], f.binding[:]) != 1 {
		return "", nil, errors.New("this sign-in was started in another tab: start again")
	}
	delete(s.flows, state)
	ss := s.sessions[sha256.Sum256([]byte(f.session))]
	if ss == nil {
		return "", nil, errors.New("the sign-in's session ended: start again")
	}
	return f.session, ss, nil
}

// lookup returns the live session of id, nil when there is none or it
// expired.
func (s *signin) lookup(id string) *session {
	if id == "" {
		return nil
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[k]
	if ss == nil {
		return nil
	}
	if !s.now().Before(ss.expires) {
		delete(s.sessions, k)
		return nil
	}
	return ss
}

// end ends the session of id (sign-out).
func (s *signin) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, sha256.Sum256([]byte(id)))
}

// sessionKey is the request context's key of the caller's session.
type sessionKey struct{}

// sessionOf is the session a guarded request came with, nil in token
// mode.
func sessionOf(r *http.Request) *session {
	ss, _ := r.Context().Value(sessionKey{}).(*session)
	return ss
}

// signedIn is who the page shows as signed in.
type signedIn struct {
	Name   string    `json:"name,omitempty"`
	Email  string    `json:"email,omitempty"`
	Groups []string  `json:"groups,omitempty"`
	Issuer string    `json:"iss"`
	Until  time.Time `json:"until"`
}

func (ss *session) shown() *signedIn {
	if ss == nil {
		return nil
	}
	return &signedIn{Name: ss.who.Name, Email: ss.who.Email, Groups: ss.who.Groups, Issuer: ss.who.Issuer, Until: ss.expires}
}

// ended fires when the session's ID token expires, by the clock the
// sign-in judges it with; nil for no session.
func (s *signin) ended(ss *session) (<-chan time.Time, func()) {
	if s == nil || ss == nil {
		return nil, func() {}
	}
	t := time.NewTimer(max(0, ss.expires.Sub(s.now())))
	return t.C, func() { t.Stop() }
}

// person is how the trail's one-line summaries name the person.
func (ss *session) person() string { return cmp.Or(ss.who.Email, ss.who.Name, ss.who.Subject) }

// signinStart begins a sign-in for the page's tab (see signin).
func (s *Server) signinStart(w http.ResponseWriter, r *http.Request) {
	if !s.auth.sameOrigin(w, r) {
		return
	}
	var body struct {
		Binding string `json:"binding"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	u, err := s.auth.signin.start(body.Binding)
	switch {
	case errors.Is(err, errTooManyFlows):
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"url": u})
}

// signinCallback is where the provider sends the person back. It sends
// them on to the page, which finishes the sign-in with its secret.
func (s *Server) signinCallback(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	state, err := s.auth.signin.callback(ctx, r.URL.Query())
	if err != nil {
		s.log.Warn("console: a sign-in failed", "err", err)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "toolbus console: sign-in refused: %s\n\nOpen the console again to sign in.\n", err)
		return
	}
	http.Redirect(w, r, "/#signin="+state, http.StatusSeeOther)
}

// signinFinish hands the tab that started a sign-in its session.
func (s *Server) signinFinish(w http.ResponseWriter, r *http.Request) {
	if !s.auth.sameOrigin(w, r) {
		return
	}
	var body struct {
		State   string `json:"state"`
		Binding string `json:"binding"`
	}
	if !readJSON(w, r, &body) {
		return
	}
	id, ss, err := s.auth.signin.finish(body.State, body.Binding)
	if err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Session  string    `json:"session"`
		SignedIn *signedIn `json:"signedIn"`
	}{id, ss.shown()})
}

// signout ends the caller's session.
func (s *Server) signout(w http.ResponseWriter, r *http.Request) {
	if !s.auth.sameOrigin(w, r) {
		return
	}
	if s.auth.signin != nil {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		s.auth.signin.end(tok)
	}
	writeJSON(w, http.StatusOK, map[string]bool{"signedOut": true})
}
