package console

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/go-jose/go-jose/v4"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/browser"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// startOP runs an OpenID provider in the process: discovery, keys,
// authorization (which signs in the next queued user at once) and tokens
// over HTTP. mw, if any, wraps its endpoints.
func startOP(t *testing.T, mw ...func(http.Handler) http.Handler) *mockoidc.MockOIDC {
	t.Helper()
	op, err := mockoidc.NewServer(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mw {
		if err := op.AddMiddleware(m); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Start(ln, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { op.Shutdown() })
	return op
}

// clock is a console's clock that a test moves forward.
type clock struct{ ahead atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *clock) forward(d time.Duration) { c.ahead.Add(int64(d)) }
func oidcConfig(op *mockoidc.MockOIDC, c *clock) *OIDC {
	return &OIDC{Issuer: op.Issuer(), ClientID: op.ClientID, ClientSecret: op.ClientSecret, Scopes: []string{"groups"}, Now: c.now}
}

// readmeExample is the example policy of policy/README.md's section on
// data.toolbus.approvals_required: the docs' rules are the ones tested.
func readmeExample(t *testing.T) *policy.Policy {
	t.Helper()
	data, err := os.ReadFile("../../policy/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(data), "## Output: `data.toolbus.approvals_required`")
	_, block, ok := strings.Cut(section, "```rego\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("no rego example in policy/README.md's approvals_required section")
	}
	files := map[string]string{"example.rego": "package toolbus\n\n" + block}
	for name, src := range defaultpolicy.Default() {
		if !strings.HasSuffix(name, "_test.rego") {
			files[name] = src
		}
	}
	pol, err := policy.Compile(context.Background(), policy.Files(files))
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// newTab opens another tab of the browser of first (a tab of its own,
// with its own sessionStorage: another person at another desk, as far as
// the console can tell).
func newTab(t *testing.T, browserCtx context.Context) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	tb := &tab{ctx: ctx}
	if err := chromedp.Listen(tb.ctx, tb.observe); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(tb.ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	return tb
}

// signIn signs user in, in tab, through the provider's redirect, and waits
// for the page to go live showing them.
func signIn(t *testing.T, tb *tab, e *env, op *mockoidc.MockOIDC, user *mockoidc.MockUser) {
	t.Helper()
	op.QueueUser(user)
	tb.do(t, chromedp.Navigate(e.console.URL()))
	tb.waitJS(t, `!document.getElementById("signin").hidden`)
	tb.do(t, chromedp.Click(chromedp.CSS("#signin")))
	// The page goes to the provider and comes back twice redirected: a
	// wait inside one page would end with the page.
	live := testkit.Poll(wait, func() bool {
		ctx, cancel := context.WithTimeout(tb.ctx, time.Second)
		defer cancel()
		up, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`location.pathname === "/" && document.querySelector("#conn.up") !== null`))
		return err == nil && up
	})
	if !live {
		t.Fatalf("the page did not go live after the sign-in; it says %q", text(t, tb, "#conn"))
	}
	if got := text(t, tb, "#signed-in"); !strings.Contains(got, user.Email) {
		t.Fatalf("the page says %q, want it to name %s", got, user.Email)
	}
}

func person(sub string, groups ...string) *mockoidc.MockUser {
	return &mockoidc.MockUser{Subject: sub, Email: sub + "@example.com", EmailVerified: true, PreferredUsername: sub, Groups: groups}
}

// TestBrowserSignInDecidesProdShellLines: the console signs people in
// with an OpenID provider running in the test, through the browser's
// redirect, and the README's example policy judges them on an executor of
// the workspace prod. The shared token answers nothing. A person of dev
// is refused, the page naming the rule; two people of sre approve, each
// in a tab of their own, and the line runs once; the trail names both by
// issuer and subject. Once the ID token's time has passed, the session
// answers nothing and the page offers the sign-in again.
func TestBrowserSignInDecidesProdShellLines(t *testing.T) {
	t.Parallel()
	op := startOP(t)
	clk := &clock{}
	e := newEnvOf(t, approve.Config{Identity: events.Identity{ID: "console", Role: "approver"}, Principal: "console", Via: events.ViaConsole},
		func(c *executor.Config) {
			c.IdentitiesEnforced, c.Policy, c.WorkspaceName = true, readmeExample(t), "prod"
		},
		func(c *Config) { c.OIDC = oidcConfig(op, clk) })
	if !e.console.SignsIn() || strings.Contains(e.console.URL(), "token") {
		t.Fatalf("the console's address %q: people sign in, no token", e.console.URL())
	}
	for _, path := range []string{"api/state", "api/events"} {
		if code, body := do(t, http.DefaultClient, httpReq(t, "GET", e.console.BaseURL()+path, "", e.bearer())); code != http.StatusUnauthorized {
			t.Errorf("%s with the shared token: %d %s, want 401", path, code, body)
		}
	}

	// The agent's calls are those of own@example.com, a person of sre.
	e.client.Close()
	e.client = invoke.NewClient(bustest.Connect(t, e.bus).Conn(), events.Identity{ID: "agent:test", Role: "agent", Session: "s1", User: "own@example.com"}, "")
	t.Cleanup(func() { e.client.Close() })

	browserCtx := browser.New(t)
	dev := newTab(t, browserCtx)
	// What the provider says of a person is shown as text: a name with
	// markup runs nothing.
	const markup = `<img src=x onerror=alert(1)>`
	devUser := person("dev1", "dev")
	devUser.PreferredUsername = markup
	signIn(t, dev, e, op, devUser)
	if got := text(t, dev, "#signed-in"); !strings.Contains(got, markup) || !strings.Contains(got, "groups: dev") {
		t.Errorf("the page says %q, want the name as text and the groups", got)
	}
	c := e.callAsync(t, "inv-prod", "run_shell_command", `{"command":"echo ran >> runs.txt"}`)
	sel := card("inv-prod")
	// click answers in tb, and returns what the page then says of the
	// answer in "Your answers" (the card goes once the call runs).
	click := func(tb *tab) string {
		t.Helper()
		tb.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, sel))
		n := evalJS[int](t, tb, `document.querySelectorAll("#acks li").length`)
		tb.do(t, chromedp.Click(chromedp.CSS(sel+" .allow-once")))
		tb.waitJS(t, fmt.Sprintf(`document.querySelectorAll("#acks li").length > %d`, n))
		_, said, _ := strings.Cut(text(t, tb, "#acks li"), "(inv-prod): ")
		return said
	}
	if got := click(dev); !strings.HasPrefix(got, "refused") || !strings.Contains(got, "shell lines in prod are the sre group's to approve") {
		t.Errorf("a person of dev: the page says %q, want the rule's reason", got)
	}
	// Every page shows whom the policy refused.
	dev.waitJS(t, fmt.Sprintf(`document.querySelector(%q) !== null`, sel+" .rejected li"))
	if got := text(t, dev, sel+" .rejected"); !strings.Contains(got, "console (dev1@example.com)") {
		t.Errorf("the refused answers are shown as %q, want the person named", got)
	}
	own := newTab(t, browserCtx)
	signIn(t, own, e, op, person("own", "sre"))
	if got := click(own); !strings.HasPrefix(got, "refused") || !strings.Contains(got, "own@example.com may not approve their own agent's call") {
		t.Errorf("the requester's own person: the page says %q, want the rule's reason", got)
	}

	for i, sub := range []string{"sre1", "sre2"} {
		tb := newTab(t, browserCtx)
		signIn(t, tb, e, op, person(sub, "sre", "dev"))
		if got := click(tb); !strings.HasPrefix(got, "accepted") {
			t.Fatalf("%s: the page says %q", sub, got)
		}
		if i == 0 {
			dev.waitJS(t, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent.includes("1 of 2")`, sel+" .progress"))
			tb.screenshot(t, "console-oidc-1-of-2.png")
			// The same person twice is one person.
			if got := click(tb); !strings.HasPrefix(got, "refused") || !strings.Contains(got, "sre1@example.com approved this call already") {
				t.Errorf("sre1 again: the page says %q", got)
			}
		}
	}
	if dialogs, _ := dev.seen(); len(dialogs) != 0 {
		t.Errorf("the page raised dialogs: %q", dialogs)
	}
	if res := c.wait(t); res.Error != nil {
		t.Fatalf("the line after two of sre: %+v", res.Error)
	}
	if data, err := os.ReadFile(filepath.Join(e.ws.Root(), "runs.txt")); err != nil || string(data) != "ran\n" {
		t.Fatalf("runs.txt holds %q (%v), want one run", data, err)
	}

	// The trail: each approval names the person by the provider's issuer
	// and subject.
	rec, err := audit.Show(context.Background(), e.bus.JetStream(), "inv-prod", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.ApproverPerson != "sre2@example.com" {
		t.Errorf("the trail's approver person is %q, want sre2@example.com", rec.ApproverPerson)
	}
	approved := map[string]int{}
	for _, ev := range rec.Events {
		if ev.Subject != events.SubjectConfirmAnswered {
			continue
		}
		var a events.ConfirmAnswer
		if err := json.Unmarshal(ev.Data, &a); err != nil {
			t.Fatal(err)
		}
		if a.Who == nil || a.Who.Issuer != op.Issuer() || a.Via != events.ViaConsole {
			t.Fatalf("a recorded approval: %s", ev.Data)
		}
		approved[a.Who.Subject] = a.Approval
	}
	if approved["sre1"] != 1 || approved["sre2"] != 2 || len(approved) != 2 {
		t.Errorf("the trail records the approvals %v, want sre1 as 1 and sre2 as 2", approved)
	}

	// The ID tokens expire (the provider gives them ten minutes): the
	// sessions end with them.
	session := evalJS[string](t, dev, `sessionStorage.getItem("toolbus-console-token")`)
	late := e.callAsync(t, "inv-late", "run_shell_command", `{"command":"echo late >> runs.txt"}`)
	req := e.waitPending(t, "inv-late")
	clk.forward(op.AccessTTL + time.Minute)
	body := fmt.Sprintf(`{"answerTo":%q,"outcome":"proceed_once"}`, req.AnswerTo)
	code, out := do(t, http.DefaultClient, httpReq(t, "POST", e.console.BaseURL()+"api/answer", body,
		map[string]string{"Authorization": "Bearer " + session, "Content-Type": "application/json"}))
	if code != http.StatusUnauthorized {
		t.Errorf("an answer with an expired session: %d %s, want 401", code, out)
	}
	dev.do(t, chromedp.Reload())
	dev.waitJS(t, `!document.getElementById("signin").hidden && document.querySelector("#conn.down") !== null`)
	if pending, rejected := e.pendingNow("inv-late"); !pending || len(rejected) != 0 {
		t.Errorf("the late call: pending %v, refused answers %v; want it waiting, nothing sent", pending, rejected)
	}
	select {
	case <-late.done:
		t.Errorf("the late call ended: %+v %v", late.result, late.err)
	default:
	}
}

// forger rewrites the ID token of the provider's token responses, as a
// provider an attacker stood in for would send it: signed by another key,
// or not signed at all.
type forger struct{ mode atomic.Value } // "", "key", "none"

func (f *forger) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mode, _ := f.mode.Load().(string)
		if mode == "" || !strings.HasSuffix(r.URL.Path, "/token") {
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var body map[string]any
		if json.Unmarshal(rec.Body.Bytes(), &body) != nil {
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		if raw, ok := body["id_token"].(string); ok {
			parts := strings.Split(raw, ".")
			payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
			body["id_token"] = forge(mode, payload)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(body)
	})
}

// otherKey signs the forgeries.
var otherKey = func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
}()

// forge makes an ID token of payload: signed by a key not the
// provider's, under the provider's key id ("key"), or with alg none.
func forge(mode string, payload []byte) string {
	if mode == "none" {
		return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + base64.RawURLEncoding.EncodeToString(payload) + "."
	}
	kp, _ := mockoidc.DefaultKeypair()
	kid, _ := kp.KeyID()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: otherKey}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		panic(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		panic(err)
	}
	s, err := obj.CompactSerialize()
	if err != nil {
		panic(err)
	}
	return s
}

// signInByHTTP walks the sign-in as a browser would, with a client that
// does not follow redirects: it starts it, lets the provider sign the
// next user in, and gives the callback what the provider sent. It returns
// the callback's response: a redirect to the page with the state, or the
// refusal.
func signInByHTTP(t *testing.T, base, binding string) (int, string) {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	code, body := do(t, client, httpReq(t, "POST", base+"auth/start", fmt.Sprintf(`{"binding":%q}`, binding), map[string]string{"Content-Type": "application/json"}))
	if code != http.StatusOK {
		t.Fatalf("start: %d %s", code, body)
	}
	var started struct{ URL string }
	if err := json.Unmarshal([]byte(body), &started); err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(started.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	back := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(back, base+"auth/callback?") {
		t.Fatalf("the provider answered %d to %q", resp.StatusCode, back)
	}
	resp, err = client.Get(back)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusSeeOther {
		return resp.StatusCode, resp.Header.Get("Location")
	}
	return resp.StatusCode, string(out)
}

// TestSignInRefusesForgedIDTokens: the callback takes no ID token the
// provider did not sign. The same sign-in with the provider's own token
// succeeds, and only the tab that started it (showing its binding) takes
// the session: a sign-in started elsewhere gives another tab nothing.
func TestSignInRefusesForgedIDTokens(t *testing.T) {
	t.Parallel()
	f := &forger{}
	op := startOP(t, f.wrap)
	e := newEnvOf(t, approve.Config{Identity: events.Identity{ID: "approver:ada"}}, nil,
		func(c *Config) { c.OIDC = oidcConfig(op, &clock{}) })
	base := e.console.BaseURL()
	binding := strings.Repeat("b", 64)

	for _, mode := range []string{"key", "none"} {
		f.mode.Store(mode)
		op.QueueUser(person("mallory", "sre"))
		code, body := signInByHTTP(t, base, binding)
		if code != http.StatusForbidden || !strings.Contains(body, "does not verify") {
			t.Errorf("an ID token forged (%s): %d %s, want 403 naming the verification", mode, code, body)
		}
	}

	f.mode.Store("")
	op.QueueUser(person("sre1", "sre"))
	code, loc := signInByHTTP(t, base, binding)
	state, ok := strings.CutPrefix(loc, "/#signin=")
	if code != http.StatusSeeOther || !ok {
		t.Fatalf("the provider's own token: %d %q, want a redirect to the page", code, loc)
	}
	finish := func(binding string) (int, string) {
		return do(t, http.DefaultClient, httpReq(t, "POST", base+"auth/finish", fmt.Sprintf(`{"state":%q,"binding":%q}`, state, binding),
			map[string]string{"Content-Type": "application/json"}))
	}
	if code, body := finish(strings.Repeat("x", 64)); code != http.StatusForbidden {
		t.Errorf("finish with another tab's binding: %d %s, want 403", code, body)
	}
	code, body := finish(binding)
	var got struct {
		Session  string
		SignedIn signedIn
	}
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil || got.Session == "" {
		t.Fatalf("finish: %d %s", code, body)
	}
	if got.SignedIn.Email != "sre1@example.com" || len(got.SignedIn.Groups) != 1 || got.SignedIn.Groups[0] != "sre" {
		t.Errorf("signed in as %+v", got.SignedIn)
	}
	if code, _ := finish(binding); code != http.StatusForbidden {
		t.Errorf("a second finish: %d, want 403", code)
	}
	auth := map[string]string{"Authorization": "Bearer " + got.Session}
	if code, body := do(t, http.DefaultClient, httpReq(t, "GET", base+"api/state", "", auth)); code != http.StatusOK {
		t.Errorf("the session: %d %s", code, body)
	}
	auth["Content-Type"] = "application/json"
	if code, body := do(t, http.DefaultClient, httpReq(t, "POST", base+"api/signout", "{}", auth)); code != http.StatusOK {
		t.Errorf("sign out: %d %s", code, body)
	}
	if code, _ := do(t, http.DefaultClient, httpReq(t, "GET", base+"api/state", "", auth)); code != http.StatusUnauthorized {
		t.Errorf("the session after sign-out: %d, want 401", code)
	}
}

// TestVerifyRefusesTokensNotTheProvidersOwn checks ID tokens at the
// verification layer, against the provider's published keys: one the
// provider's key signed for this sign-in verifies; one of another key,
// of alg none, of another sign-in's nonce, for another client, of
// another issuer, or expired, does not.
func TestVerifyRefusesTokensNotTheProvidersOwn(t *testing.T) {
	t.Parallel()
	op := startOP(t)
	clk := &clock{}
	s, err := newSignin(context.Background(), *oidcConfig(op, clk), "http://127.0.0.1:1/", bustest.Quiet())
	if err != nil {
		t.Fatal(err)
	}
	kp, _ := mockoidc.DefaultKeypair()
	kid, _ := kp.KeyID()
	sign := func(key *rsa.PrivateKey, claims map[string]any) string {
		payload, _ := json.Marshal(claims)
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
		if err != nil {
			t.Fatal(err)
		}
		obj, err := signer.Sign(payload)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := obj.CompactSerialize()
		return out
	}
	claims := func(change func(map[string]any)) map[string]any {
		now := clk.now()
		c := map[string]any{"iss": op.Issuer(), "aud": op.ClientID, "sub": "u1", "email": "u1@example.com",
			"groups": []string{"sre"}, "nonce": "n1", "iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
		if change != nil {
			change(c)
		}
		return c
	}
	who, until, err := s.verify(context.Background(), sign(kp.PrivateKey, claims(nil)), "n1")
	if err != nil || who.Issuer != op.Issuer() || who.Subject != "u1" || len(who.Groups) != 1 || until.IsZero() {
		t.Fatalf("the provider's own token: %+v %v %v", who, until, err)
	}
	payload, _ := json.Marshal(claims(nil))
	for what, raw := range map[string]string{
		"another key":     sign(otherKey, claims(nil)),
		"alg none":        forge("none", payload),
		"another client":  sign(kp.PrivateKey, claims(func(c map[string]any) { c["aud"] = "other-client" })),
		"another issuer":  sign(kp.PrivateKey, claims(func(c map[string]any) { c["iss"] = "https://evil.example" })),
		"expired":         sign(kp.PrivateKey, claims(func(c map[string]any) { c["exp"] = clk.now().Add(-time.Minute).Unix() })),
		"another's nonce": sign(kp.PrivateKey, claims(func(c map[string]any) { c["nonce"] = "n2" })),
		"not a token":     "not.a.token",
	} {
		if who, _, err := s.verify(context.Background(), raw, "n1"); err == nil {
			t.Errorf("%s: verified as %+v", what, who)
		}
	}
}

// TestClientSecretFile: the secret's file must be the owner's alone.
func TestClientSecretFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "secret")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadClientSecret(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a secret others may read: %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadClientSecret(path); err != nil || s != "s3cret" {
		t.Errorf("the secret: %q %v", s, err)
	}
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadClientSecret(path); err == nil {
		t.Error("an empty secret was taken")
	}
}

// TestStreamEndsWithTheSession: a page's event stream holds the approver
// present, so it ends when the person's ID token expires, and the session
// then answers nothing.
func TestStreamEndsWithTheSession(t *testing.T) {
	t.Parallel()
	op := startOP(t)
	op.AccessTTL = 5 * time.Second // the ID token's lifetime
	e := newEnvOf(t, approve.Config{Identity: events.Identity{ID: "approver:ada"}}, nil,
		func(c *Config) { c.OIDC = oidcConfig(op, &clock{}) })
	base, binding := e.console.BaseURL(), strings.Repeat("b", 64)
	op.QueueUser(person("sre1", "sre"))
	code, loc := signInByHTTP(t, base, binding)
	state, ok := strings.CutPrefix(loc, "/#signin=")
	if code != http.StatusSeeOther || !ok {
		t.Fatalf("sign-in: %d %q", code, loc)
	}
	code, body := do(t, http.DefaultClient, httpReq(t, "POST", base+"auth/finish", fmt.Sprintf(`{"state":%q,"binding":%q}`, state, binding),
		map[string]string{"Content-Type": "application/json"}))
	var got struct{ Session string }
	if err := json.Unmarshal([]byte(body), &got); code != http.StatusOK || err != nil {
		t.Fatalf("finish: %d %s", code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"api/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+got.Session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the stream: %d", resp.StatusCode)
	}
	// Read to the end: the console ends the stream, or the wait's
	// deadline cuts it off, which fails below.
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the stream did not end with the session: %v", err)
	}
	if !strings.Contains(string(data), `"email":"sre1@example.com"`) {
		t.Errorf("the stream's snapshot: %q", data)
	}
	if code, _ := do(t, http.DefaultClient, httpReq(t, "GET", base+"api/state", "", map[string]string{"Authorization": "Bearer " + got.Session})); code != http.StatusUnauthorized {
		t.Errorf("the session after its token expired: %d, want 401", code)
	}
}

// TestGroupsClaim: the groups claim, as providers send it (a list, one
// string) and as an attacker at the provider might (other types, groups
// an answer cannot carry, too many), gives only groups an answer carries.
func TestGroupsClaim(t *testing.T) {
	t.Parallel()
	s := &signin{log: bustest.Quiet()}
	many := make([]any, events.MaxSignerGroups+5)
	for i := range many {
		many[i] = fmt.Sprintf("g%d", i)
	}
	for _, tc := range []struct {
		name  string
		claim any
		want  int
		first string
	}{
		{"a list", []any{"sre", "dev"}, 2, "sre"},
		{"one string", "sre", 1, "sre"},
		{"absent", nil, 0, ""},
		{"a number", 7, 0, ""},
		{"others dropped", []any{"\x1b[31msre", 7, map[string]any{"sre": true}, "", strings.Repeat("x", events.MaxSignerField+1), "ops"}, 1, "ops"},
		{"too many", many, events.MaxSignerGroups, "g0"},
	} {
		got := s.groupsOf(tc.claim)
		if len(got) != tc.want || (tc.want > 0 && got[0] != tc.first) {
			t.Errorf("%s: %q, want %d groups from %q", tc.name, got, tc.want, tc.first)
		}
	}
}
