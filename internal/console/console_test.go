package console

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/redact"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
)

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// do sends one request and returns its status and body.
func do(t *testing.T, c *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, readAll(t, resp)
}

func httpReq(t *testing.T, method, url, body string, header map[string]string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	return req
}

// TestAccessNeedsTheToken: without the token, a cookie made from it, or a
// bearer, every path is refused and shows nothing of the queue.
func TestAccessNeedsTheToken(t *testing.T) {
	e := newEnv(t)
	e.callAsync(t, "inv-secret", "write_file", `{"file_path":"a.txt","content":"secret-content\n"}`)
	e.waitPending(t, "inv-secret")
	base := e.console.BaseURL()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	for _, path := range []string{"", "api/state", "api/events", "static/app.js", "static/app.css", "nope"} {
		status, body := do(t, noRedirect, httpReq(t, "GET", base+path, "", nil))
		if status != http.StatusUnauthorized || strings.Contains(body, "secret-content") || strings.Contains(body, "inv-secret") {
			t.Errorf("GET /%s without a token: status %d, body %q; want 401 and nothing of the queue", path, status, body)
		}
	}
	for _, path := range []string{"api/answer", "api/revoke"} {
		status, _ := do(t, noRedirect, httpReq(t, "POST", base+path, `{"invocationId":"inv-secret","outcome":"proceed_once"}`,
			map[string]string{"Content-Type": "application/json", "Origin": strings.TrimSuffix(base, "/")}))
		if status != http.StatusUnauthorized {
			t.Errorf("POST /%s without a token: status %d, want 401", path, status)
		}
	}
	status, _ := do(t, noRedirect, httpReq(t, "GET", base+"?token=wrong", "", nil))
	if status != http.StatusForbidden {
		t.Errorf("a wrong token: status %d, want 403", status)
	}
	status, _ = do(t, noRedirect, httpReq(t, "GET", base+"api/state", "", map[string]string{"Authorization": "Bearer wrong-token-wrong-token"}))
	if status != http.StatusUnauthorized {
		t.Errorf("a wrong bearer: status %d, want 401", status)
	}
	forged := &http.Cookie{Name: "toolbus_console_" + strconv.Itoa(e.console.Addr().(*net.TCPAddr).Port), Value: "abc.def"}
	req := httpReq(t, "GET", base+"api/state", "", nil)
	req.AddCookie(forged)
	if status, _ := do(t, noRedirect, req); status != http.StatusUnauthorized {
		t.Errorf("a forged session cookie: status %d, want 401", status)
	}

	// The token is traded for a cookie the page's script cannot read, and
	// the address loses the token.
	resp, err := noRedirect.Get(e.console.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("the token: status %d, Location %q; want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	// From any path, the exchange leads to the page itself, never
	// elsewhere.
	for _, path := range []string{"static/app.js", "nope/", "/evil.example/"} {
		resp, err := noRedirect.Get(base + path + "?token=" + e.console.Token())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusSeeOther && loc != "/" {
			t.Errorf("the token on /%s redirects to %q, want /", path, loc)
		}
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("the session cookie is %+v; want one, HttpOnly and SameSite=Strict", cookies)
	}
	req = httpReq(t, "GET", base+"api/state", "", nil)
	req.AddCookie(cookies[0])
	status, body := do(t, noRedirect, req)
	if status != http.StatusOK || !strings.Contains(body, "inv-secret") {
		t.Errorf("with the cookie: status %d, body %q", status, body)
	}
	status, body = do(t, noRedirect, httpReq(t, "GET", base+"api/state", "", map[string]string{"Authorization": "Bearer " + e.console.Token()}))
	if status != http.StatusOK || !strings.Contains(body, "inv-secret") {
		t.Errorf("with the bearer: status %d, body %q", status, body)
	}
}

// TestHeaders: every response, a refusal included, carries the strict
// CSP and its companions.
func TestHeaders(t *testing.T) {
	e := newEnv(t)
	client, _ := e.signIn(t)
	for _, path := range []string{"", "static/app.js", "api/state", "nope"} {
		for _, c := range []*http.Client{client, http.DefaultClient} {
			resp, err := c.Get(e.console.BaseURL() + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := map[string]string{
				"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
				"X-Frame-Options":         "DENY",
			}
			for k, v := range want {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("GET /%s (status %d): %s is %q, want %q", path, resp.StatusCode, k, got, v)
				}
			}
		}
	}
}

// TestHostHeader: on loopback, a name other than the listen address's
// own (a DNS rebinding) is refused even with a valid session.
func TestHostHeader(t *testing.T) {
	e := newEnv(t)
	client, _ := e.signIn(t)
	port := strconv.Itoa(e.console.Addr().(*net.TCPAddr).Port)
	for host, want := range map[string]int{
		"attacker.example:" + port: http.StatusForbidden,
		"127.0.0.1.nip.io:" + port: http.StatusForbidden,
		"127.0.0.1:" + port:        http.StatusOK,
		"localhost:" + port:        http.StatusOK,
	} {
		req := httpReq(t, "GET", e.console.BaseURL()+"api/state", "", map[string]string{"Host": host, "Authorization": "Bearer " + e.console.Token()})
		if status, _ := do(t, client, req); status != want {
			t.Errorf("Host %s: status %d, want %d", host, status, want)
		}
	}
}

// TestStateChangesNeedSameOriginAndCSRF: an answer with the session
// cookie is refused unless it also shows the CSRF token and comes from the
// console's own origin, and a refused one answers nothing.
func TestStateChangesNeedSameOriginAndCSRF(t *testing.T) {
	e := newEnv(t)
	e.callAsync(t, "inv-csrf", "write_file", `{"file_path":"a.txt","content":"x\n"}`)
	e.waitPending(t, "inv-csrf")
	client, csrf := e.signIn(t)
	origin := strings.TrimSuffix(e.console.BaseURL(), "/")
	body := `{"invocationId":"inv-csrf","outcome":"proceed_once"}`
	tests := []struct {
		name   string
		method string
		header map[string]string
		want   int
	}{
		{"no CSRF token", "POST", map[string]string{"Content-Type": "application/json", "Origin": origin}, 403},
		{"wrong CSRF token", "POST", map[string]string{"Content-Type": "application/json", "Origin": origin, csrfHeader: csrf + "x"}, 403},
		{"foreign Origin", "POST", map[string]string{"Content-Type": "application/json", "Origin": "http://attacker.example", csrfHeader: csrf}, 403},
		{"null Origin", "POST", map[string]string{"Content-Type": "application/json", "Origin": "null", csrfHeader: csrf}, 403},
		{"same-site, other origin", "POST", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site", csrfHeader: csrf}, 403},
		{"cross-site", "POST", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site", csrfHeader: csrf}, 403},
		{"no origin at all", "POST", map[string]string{"Content-Type": "application/json", csrfHeader: csrf}, 403},
		{"a form", "POST", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": origin, csrfHeader: csrf}, 415},
		{"GET", "GET", map[string]string{"Origin": origin, csrfHeader: csrf}, 405},
		{"bearer from another origin", "POST", map[string]string{"Content-Type": "application/json", "Origin": "http://attacker.example", "Authorization": "Bearer " + e.console.Token()}, 403},
	}
	for _, tt := range tests {
		req := httpReq(t, tt.method, e.console.BaseURL()+"api/answer", body, tt.header)
		if status, got := do(t, client, req); status != tt.want {
			t.Errorf("%s: status %d (%s), want %d", tt.name, status, got, tt.want)
		}
	}
	for _, path := range []string{"api/revoke"} {
		req := httpReq(t, "POST", e.console.BaseURL()+path, `{"key":"k"}`, map[string]string{"Content-Type": "application/json", "Origin": "http://attacker.example", csrfHeader: csrf})
		if status, _ := do(t, client, req); status != http.StatusForbidden {
			t.Errorf("revoke from another origin: status %d, want 403", status)
		}
	}
	if pending, rejected := e.pendingNow("inv-csrf"); !pending || len(rejected) != 0 {
		t.Errorf("after the refused posts: pending %v, rejected %v; want still pending and nothing sent", pending, rejected)
	}
}

// TestAnswerIsChecked: answers the page could not have offered are
// refused before they reach the bus.
func TestAnswerIsChecked(t *testing.T) {
	e := newEnv(t)
	e.callAsync(t, "inv-check", "write_file", `{"file_path":"a.txt","content":"x\n"}`)
	req := e.waitPending(t, "inv-check")
	client, csrf := e.signIn(t)
	origin := strings.TrimSuffix(e.console.BaseURL(), "/")
	h := map[string]string{"Content-Type": "application/json", "Origin": origin, csrfHeader: csrf}
	offered := map[events.Outcome]bool{}
	for _, a := range req.Always {
		offered[a.Outcome] = true
	}
	tests := []struct {
		name, body string
		want       int
	}{
		{"unknown outcome", `{"invocationId":"inv-check","outcome":"proceed_forever"}`, 400},
		{"modify with no object", `{"invocationId":"inv-check","outcome":"modify_with_editor","args":"[1,2]"}`, 400},
		{"modify with bad JSON", `{"invocationId":"inv-check","outcome":"modify_with_editor","args":"{"}`, 400},
		{"unknown invocation", `{"invocationId":"inv-nope","outcome":"proceed_once"}`, 409},
		{"unknown field", `{"invocationId":"inv-check","outcome":"proceed_once","as":"root"}`, 400},
		{"long reason", `{"invocationId":"inv-check","outcome":"cancel","message":"` + strings.Repeat("x", events.MaxAnswerMessage+1) + `"}`, 400},
	}
	for _, o := range []events.Outcome{events.ProceedAlways, events.ProceedAlwaysTool, events.ProceedAlwaysServer} {
		if !offered[o] {
			tests = append(tests, struct {
				name, body string
				want       int
			}{"not offered: " + string(o), `{"invocationId":"inv-check","outcome":"` + string(o) + `"}`, 400})
		}
	}
	for _, tt := range tests {
		status, got := do(t, client, httpReq(t, "POST", e.console.BaseURL()+"api/answer", tt.body, h))
		if status != tt.want {
			t.Errorf("%s: status %d (%s), want %d", tt.name, status, got, tt.want)
		}
	}
	if pending, rejected := e.pendingNow("inv-check"); !pending || len(rejected) != 0 {
		t.Errorf("after the refused answers: pending %v, rejected %v", pending, rejected)
	}
}

// TestEventStream: the stream sends the state at once and again when a
// request arrives, and ends when the console closes.
func TestEventStream(t *testing.T) {
	e := newEnv(t)
	req := httpReq(t, "GET", e.console.BaseURL()+"api/events", "", map[string]string{"Authorization": "Bearer " + e.console.Token()})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	states := make(chan state, 10)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<22)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var s state
				if err := json.Unmarshal([]byte(data), &s); err != nil {
					t.Errorf("a state that does not decode: %v", err)
					return
				}
				states <- s
			}
		}
	}()
	next := func() state {
		t.Helper()
		select {
		case s := <-states:
			return s
		case <-time.After(wait):
			t.Fatal("no state on the stream")
		}
		return state{}
	}
	if s := next(); len(s.Pending) != 0 || s.Approver != "approver:ada" {
		t.Fatalf("the first state: %+v", s)
	}
	e.callAsync(t, "inv-stream", "write_file", `{"file_path":"a.txt","content":"x\n"}`)
	for {
		s := next()
		if len(s.Pending) == 1 {
			p := s.Pending[0]
			if p.InvocationID != "inv-stream" || p.Tool != "write_file" || !strings.Contains(p.Diff, "+x") || p.Deadline.IsZero() {
				t.Errorf("the pending request: %+v", p)
			}
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.console.Close(ctx); err != nil {
		t.Fatalf("close with a stream open: %v", err)
	}
	select {
	case <-ended:
	case <-time.After(wait):
		t.Fatal("the stream did not end when the console closed")
	}
}

// TestConfiguredToken: a short token is refused; a configured one works.
func TestConfiguredToken(t *testing.T) {
	e := newEnv(t)
	_, err := Start(context.Background(), Config{Approver: e.approver, Allowlist: e.allowlist, Listen: "127.0.0.1:0", Token: "short"})
	if err == nil || !strings.Contains(err.Error(), "at least") {
		t.Errorf("a short token: %v", err)
	}
	s, err := Start(context.Background(), Config{Approver: e.approver, Allowlist: e.allowlist, Listen: "127.0.0.1:0",
		Token: "a-token-of-my-own-choosing", Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if !strings.HasSuffix(s.URL(), "?token=a-token-of-my-own-choosing") {
		t.Errorf("URL %s", s.URL())
	}
	// The address is taken: a clear error, no fallback for an address
	// the user chose.
	_, err = Start(context.Background(), Config{Approver: e.approver, Allowlist: e.allowlist, Listen: s.Addr().String()})
	if err == nil || !strings.Contains(err.Error(), "choose another address") {
		t.Errorf("a taken address: %v", err)
	}
}

// TestDefaultAddressFallsBack: with no address given, a taken default
// port gives way to a free loopback port.
func TestDefaultAddressFallsBack(t *testing.T) {
	e := newEnv(t)
	if ln, err := net.Listen("tcp", DefaultListen); err == nil {
		defer ln.Close()
	} // else someone holds it already, which serves as well
	s, err := Start(context.Background(), Config{Approver: e.approver, Allowlist: e.allowlist, Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	a := s.Addr().(*net.TCPAddr)
	if !a.IP.IsLoopback() || a.String() == DefaultListen {
		t.Errorf("the console listens on %s, want another loopback port", a)
	}
}

// TestAnsweredRequestsHideTheirSecrets: a request waiting for an answer
// shows the approver every byte they decide on, a payload under a key
// named like a secret included; once answered, the page's history hides
// the secrets of its arguments, diff and answer.
func TestAnsweredRequestsHideTheirSecrets(t *testing.T) {
	e := newEnv(t)
	const token = "ghp_0123456789abcdefghijABCDEFGHIJ0123456789"
	args := `{"file_path":"deploy.env","content":"GITHUB_TOKEN=` + token + `\n"}`
	c := e.callAsync(t, "inv-secret", "write_file", args)
	e.waitPending(t, "inv-secret")
	state := func() (state, string) {
		t.Helper()
		status, body := do(t, http.DefaultClient, httpReq(t, "GET", e.console.BaseURL()+"api/state", "", map[string]string{"Authorization": "Bearer " + e.console.Token()}))
		var s state
		if status != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil {
			t.Fatalf("state: %d %s", status, body)
		}
		return s, body
	}
	s, _ := state()
	if len(s.Pending) != 1 || !strings.Contains(string(s.Pending[0].Args), token) || !strings.Contains(s.Pending[0].Diff, token) {
		t.Fatalf("the pending request hides what the approver decides on: %+v", s.Pending)
	}
	st, _ := e.approver.Snapshot()
	if _, err := e.approver.Answer(context.Background(), st.OfInvocation("inv-secret")[0].AnswerTo, approve.Answer{Outcome: events.ProceedOnce, Message: "ok, token " + token}); err != nil {
		t.Fatal(err)
	}
	c.wait(t)
	var body string
	if !testkit.Poll(wait, func() bool {
		s, body = state()
		return len(s.Recent) == 1 && s.Recent[0].Answer != nil
	}) {
		t.Fatalf("the answered request is not in the history: %s", body)
	}
	r := s.Recent[0]
	if strings.Contains(body, token) || !strings.Contains(string(r.Args), redact.Mask) || !strings.Contains(r.Diff, redact.Mask) || !strings.Contains(r.Answer.Message, redact.Mask) {
		t.Errorf("the history shows the secret:\n%s", body)
	}
	if !strings.Contains(string(r.Args), "deploy.env") {
		t.Errorf("the history hides more than the secret: %s", r.Args)
	}
}
