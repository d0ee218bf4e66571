package console

import (
	"context"
	"encoding/json"
	"fmt"
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

// TestAccessNeedsTheToken: without the token as a bearer, the API is
// refused and nothing shows the queue; the page and its files, which hold
// nothing of it, load for anyone; no response sets a cookie, and a cookie,
// forged or not, opens nothing.
func TestAccessNeedsTheToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.callAsync(t, "inv-secret", "write_file", `{"file_path":"a.txt","content":"secret-content\n"}`)
	e.waitPending(t, "inv-secret")
	base := e.console.BaseURL()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, header map[string]string) (*http.Response, string) {
		t.Helper()
		resp, err := noRedirect.Do(httpReq(t, "GET", base+path, "", header))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if c := resp.Header.Values("Set-Cookie"); len(c) != 0 {
			t.Errorf("GET /%s sets cookies: %q", path, c)
		}
		return resp, readAll(t, resp)
	}
	for _, path := range []string{"api/state", "api/events", "nope"} {
		resp, body := get(path, nil)
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "secret-content") || strings.Contains(body, "inv-secret") {
			t.Errorf("GET /%s without a token: status %d, body %q; want 401 and nothing of the queue", path, resp.StatusCode, body)
		}
	}
	for _, path := range []string{"", "static/app.js", "static/app.css", "?token=" + e.console.Token()} {
		resp, body := get(path, nil)
		if resp.StatusCode != http.StatusOK || strings.Contains(body, "secret-content") || strings.Contains(body, "inv-secret") {
			t.Errorf("GET /%s: status %d; want 200 and nothing of the queue", path, resp.StatusCode)
		}
	}
	for _, path := range []string{"api/answer", "api/revoke"} {
		status, _ := do(t, noRedirect, httpReq(t, "POST", base+path, `{"answerTo":"k","outcome":"proceed_once"}`,
			map[string]string{"Content-Type": "application/json", "Origin": strings.TrimSuffix(base, "/")}))
		if status != http.StatusUnauthorized {
			t.Errorf("POST /%s without a token: status %d, want 401", path, status)
		}
	}
	if resp, _ := get("?token=wrong", nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a wrong token: status %d, want 403", resp.StatusCode)
	}
	port := strconv.Itoa(e.console.Addr().(*net.TCPAddr).Port)
	for name, h := range map[string]map[string]string{
		"a wrong bearer":          {"Authorization": "Bearer wrong-token-wrong-token"},
		"the token, not a bearer": {"Authorization": e.console.Token()},
		"the token as a cookie":   {"Cookie": "toolbus_console_" + port + "=" + e.console.Token()},
		"a forged session":        {"Cookie": "toolbus_console_" + port + "=abc.def"},
	} {
		if resp, _ := get("api/state", h); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, resp.StatusCode)
		}
	}
	if resp, _ := get("api/state?token="+e.console.Token(), nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the token in the query of an API call: status %d, want 401", resp.StatusCode)
	}
	resp, body := get("api/state", map[string]string{"Authorization": "Bearer " + e.console.Token()})
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "inv-secret") {
		t.Errorf("with the bearer: status %d, body %q", resp.StatusCode, body)
	}
	if !strings.HasPrefix(e.console.URL(), base+"#token=") {
		t.Errorf("the address printed is %s, want the token in its fragment, which the browser sends nowhere", e.console.URL())
	}
}

// TestHeaders: every response, a refusal included, carries the strict
// CSP and its companions.
func TestHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, path := range []string{"", "static/app.js", "api/state", "nope"} {
		for _, h := range []map[string]string{e.bearer(), nil} {
			resp, err := http.DefaultClient.Do(httpReq(t, "GET", e.console.BaseURL()+path, "", h))
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
	t.Parallel()
	e := newEnv(t)
	client := http.DefaultClient
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

// TestStateChangesNeedTheBearerAndSameOrigin: an answer is refused
// unless it shows the token as a bearer, and, when a browser says where
// it comes from, comes from the console's own origin; a refused one
// answers nothing.
func TestStateChangesNeedTheBearerAndSameOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.callAsync(t, "inv-csrf", "write_file", `{"file_path":"a.txt","content":"x\n"}`)
	req := e.waitPending(t, "inv-csrf")
	origin := strings.TrimSuffix(e.console.BaseURL(), "/")
	port := strconv.Itoa(e.console.Addr().(*net.TCPAddr).Port)
	bearer := "Bearer " + e.console.Token()
	body := fmt.Sprintf(`{"answerTo":%q,"outcome":"proceed_once"}`, req.AnswerTo)
	tests := []struct {
		name   string
		method string
		header map[string]string
		want   int
	}{
		{"no bearer", "POST", map[string]string{"Content-Type": "application/json", "Origin": origin, "Sec-Fetch-Site": "same-origin"}, 401},
		{"a cookie of the token", "POST", map[string]string{"Content-Type": "application/json", "Origin": origin, "Cookie": "toolbus_console_" + port + "=" + e.console.Token()}, 401},
		{"foreign Origin", "POST", map[string]string{"Content-Type": "application/json", "Origin": "http://attacker.example", "Authorization": bearer}, 403},
		{"another port", "POST", map[string]string{"Content-Type": "application/json", "Origin": "http://127.0.0.1:1", "Authorization": bearer}, 403},
		{"null Origin", "POST", map[string]string{"Content-Type": "application/json", "Origin": "null", "Authorization": bearer}, 403},
		{"same-site, other origin", "POST", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site", "Authorization": bearer}, 403},
		{"cross-site", "POST", map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site", "Authorization": bearer}, 403},
		{"a form", "POST", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": origin, "Authorization": bearer}, 415},
		{"GET", "GET", map[string]string{"Origin": origin, "Authorization": bearer}, 405},
	}
	for _, tt := range tests {
		r := httpReq(t, tt.method, e.console.BaseURL()+"api/answer", body, tt.header)
		if status, got := do(t, http.DefaultClient, r); status != tt.want {
			t.Errorf("%s: status %d (%s), want %d", tt.name, status, got, tt.want)
		}
	}
	r := httpReq(t, "POST", e.console.BaseURL()+"api/revoke", `{"key":"k"}`, map[string]string{"Content-Type": "application/json", "Origin": "http://attacker.example", "Authorization": bearer})
	if status, _ := do(t, http.DefaultClient, r); status != http.StatusForbidden {
		t.Errorf("revoke from another origin: status %d, want 403", status)
	}
	if pending, rejected := e.pendingNow("inv-csrf"); !pending || len(rejected) != 0 {
		t.Errorf("after the refused posts: pending %v, rejected %v; want still pending and nothing sent", pending, rejected)
	}
}

// TestAnswerIsChecked: answers the page could not have offered are
// refused before they reach the bus.
func TestAnswerIsChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.callAsync(t, "inv-check", "write_file", `{"file_path":"a.txt","content":"x\n"}`)
	req := e.waitPending(t, "inv-check")
	client := http.DefaultClient
	origin := strings.TrimSuffix(e.console.BaseURL(), "/")
	h := map[string]string{"Content-Type": "application/json", "Origin": origin, "Authorization": "Bearer " + e.console.Token()}
	key := fmt.Sprintf("%q", req.AnswerTo)
	offered := map[events.Outcome]bool{}
	for _, a := range req.Always {
		offered[a.Outcome] = true
	}
	tests := []struct {
		name, body string
		want       int
	}{
		{"unknown outcome", `{"answerTo":` + key + `,"outcome":"proceed_forever"}`, 400},
		{"modify with no object", `{"answerTo":` + key + `,"outcome":"modify_with_editor","args":"[1,2]"}`, 400},
		{"modify with bad JSON", `{"answerTo":` + key + `,"outcome":"modify_with_editor","args":"{"}`, 400},
		{"unknown request", `{"answerTo":"toolbus.answer.nope","outcome":"proceed_once"}`, 409},
		{"no key", `{"outcome":"proceed_once"}`, 400},
		{"by invocation id", `{"invocationId":"inv-check","outcome":"proceed_once"}`, 400},
		{"the invocation id as the key", `{"answerTo":"inv-check","outcome":"proceed_once"}`, 409},
		{"unknown field", `{"answerTo":` + key + `,"outcome":"proceed_once","as":"root"}`, 400},
		{"long reason", `{"answerTo":` + key + `,"outcome":"cancel","message":"` + strings.Repeat("x", events.MaxAnswerMessage+1) + `"}`, 400},
	}
	for _, o := range []events.Outcome{events.ProceedAlways, events.ProceedAlwaysTool, events.ProceedAlwaysServer} {
		if !offered[o] {
			tests = append(tests, struct {
				name, body string
				want       int
			}{"not offered: " + string(o), `{"answerTo":` + key + `,"outcome":"` + string(o) + `"}`, 400})
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

// TestEventStream: the stream sends the whole state at once, then what
// changes: a request that arrives, and the same request as it ends; it
// ends when the console closes.
func TestEventStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	st := e.stream(t)
	var first hello
	if name, data := st.next(t); name != "snapshot" || json.Unmarshal(data, &first) != nil || len(first.Pending) != 0 || first.Approver != "approver:ada" || first.Keep != approve.DefaultKeep {
		t.Fatalf("the first event: %s %s", name, data)
	}
	c := e.callAsync(t, "inv-stream", "write_file", `{"file_path":"a.txt","content":"x\n"}`)
	ch := st.change(t)
	if len(ch.Pending) != 1 || len(ch.Ended) != 0 {
		t.Fatalf("the change when a request arrives: %+v", ch)
	}
	p := ch.Pending[0]
	if p.InvocationID != "inv-stream" || p.Tool != "write_file" || !strings.Contains(p.Diff, "+x") || p.Deadline.IsZero() || !strings.HasPrefix(p.Key, events.AnswerSubjectPrefix) {
		t.Errorf("the pending request: %+v", p)
	}
	if _, err := e.approver.Answer(context.Background(), p.Key, approve.Answer{Outcome: events.Cancel}); err != nil {
		t.Fatal(err)
	}
	c.wait(t)
	ch = st.change(t)
	if len(ch.Pending) != 0 || len(ch.Ended) != 1 || ch.Ended[0].Key != p.Key || ch.Ended[0].Answer == nil {
		t.Errorf("the change when it ends: %+v", ch)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.console.Close(ctx); err != nil {
		t.Fatalf("close with a stream open: %v", err)
	}
	select {
	case <-st.ended:
	case <-time.After(wait):
		t.Fatal("the stream did not end when the console closed")
	}
}

// TestConfiguredToken: a short token is refused; a configured one works.
func TestConfiguredToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := Start(context.Background(), Config{Approver: e.approver, Allowlist: e.allowlist, JetStream: e.js, Listen: "127.0.0.1:0", Token: "short"})
	if err == nil || !strings.Contains(err.Error(), "at least") {
		t.Errorf("a short token: %v", err)
	}
	s, err := Start(context.Background(), Config{Approver: e.approver, Allowlist: e.allowlist, JetStream: e.js, Listen: "127.0.0.1:0",
		Token: "a-token-of-my-own-choosing", Logger: bustest.Quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if !strings.HasSuffix(s.URL(), "#token=a-token-of-my-own-choosing") {
		t.Errorf("URL %s", s.URL())
	}
	// The address is taken: a clear error, no fallback for an address
	// the user chose.
	_, err = Start(context.Background(), Config{Approver: e.approver, Allowlist: e.allowlist, JetStream: e.js, Listen: s.Addr().String()})
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
	s, err := Start(context.Background(), Config{Approver: e.approver, Allowlist: e.allowlist, JetStream: e.js, Logger: bustest.Quiet()})
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
	t.Parallel()
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
	if _, err := e.approver.Answer(context.Background(), s.Pending[0].Key, approve.Answer{Outcome: events.ProceedOnce, Message: "ok, token " + token}); err != nil {
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

// The name a person gives is theirs to give, and only a name: control
// characters and line breaks cannot forge a second line of the audit, a
// long one is cut, and the token's id always ends the record, whatever
// the name says of tokens.
func TestPersonIsANameAndTheTokensID(t *testing.T) {
	t.Parallel()
	a := &auth{token: []byte("the-token")}
	id := a.tokenID()
	for _, tt := range []struct{ name, want string }{
		{"Ada", "Ada (console token " + id + ")"},
		{"", "someone with console token " + id},
		{"  Ada \n approver: root\x1b[2J ", "Ada approver: root [2J (console token " + id + ")"},
		{"ada (console token deadbeef)", "ada (console token deadbeef) (console token " + id + ")"},
		{strings.Repeat("é", 100), strings.Repeat("é", 32) + " (console token " + id + ")"},
	} {
		if got := a.person(tt.name); got != tt.want {
			t.Errorf("person(%q) = %q, want %q", tt.name, got, tt.want)
		}
		if _, err := events.Encode(&events.ConfirmAnswer{Header: events.Header{Sender: events.Identity{ID: "console"}}, InvocationID: "i", Outcome: events.ProceedOnce, Person: a.person(tt.name)}); err != nil {
			t.Errorf("person(%q) makes an answer that is not valid: %v", tt.name, err)
		}
	}
	if len(id) != 8 || strings.Contains("the-token", id) {
		t.Errorf("the token's id %q", id)
	}
}
