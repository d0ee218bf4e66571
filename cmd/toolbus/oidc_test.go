package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oauth2-proxy/mockoidc"

	"github.com/toolbus/toolbus/internal/testkit"
)

// TestOIDCFlags: the sign-in's flags stop the command before anything
// starts when one is given without the others it needs, the client
// secret is readable by others, a URL is not one, or there is no console
// to sign in to.
func TestOIDCFlags(t *testing.T) {
	t.Parallel()
	open := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(open, []byte("client-secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o644)
	private := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(private, []byte("client-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no client", []string{"console", "--oidc-issuer", "https://id.example.com"}, "needs --oidc-client-id and --oidc-client-secret-file"},
		{"client alone", []string{"console", "--oidc-client-id", "c"}, "go with --oidc-issuer"},
		{"open secret", []string{"console", "--oidc-issuer", "https://id.example.com", "--oidc-client-id", "c", "--oidc-client-secret-file", open}, "chmod 600"},
		{"not a URL", []string{"console", "--oidc-issuer", "id.example.com", "--oidc-client-id", "c", "--oidc-client-secret-file", private}, "http(s) URLs"},
		{"no console", []string{"up", "--console", "off", "--oidc-issuer", "https://id.example.com", "--oidc-client-id", "c", "--oidc-client-secret-file", private}, "--console off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := toolbus(t, tc.args...)
			if code == 0 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want a failure saying %q", code, errOut, tc.want)
			}
		})
	}
}

// TestUpSignsInWithOIDC: toolbus up with --oidc-issuer, against an OpenID
// provider in the test. The console prints no token and the token answers
// nothing; a person signs in through the provider (the HTTP walk a
// browser makes), watches, and approves a write; the call runs, and
// `toolbus audit show` names the person by the provider's issuer and
// subject, whatever name the page sent.
func TestUpSignsInWithOIDC(t *testing.T) {
	t.Parallel()
	op, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { op.Shutdown() })
	secret := filepath.Join(t.TempDir(), "oidc-secret")
	if err := os.WriteFile(secret, []byte(op.ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const token = "a-token-that-answers-nothing-now"
	ws, data := t.TempDir(), t.TempDir()
	up := startDaemonWith(t, []string{"TOOLBUS_CONSOLE_TOKEN=" + token}, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws,
		"--console", "127.0.0.1:0", "--mcp-listen", "off",
		"--oidc-issuer", op.Issuer(), "--oidc-client-id", op.ClientID, "--oidc-client-secret-file", secret, "--oidc-scope", "groups")
	url := busURL(t, up.waitLine(t, "bus:"))
	line := up.waitLine(t, "console:")
	base := strings.TrimSpace(line[strings.Index(line, "http://"):])
	if strings.Contains(base, "#") || !strings.HasSuffix(base, "/") {
		t.Fatalf("the console's address %q: want no token", base)
	}
	up.waitLine(t, "sign-in:")
	up.waitLine(t, "Press Ctrl-C to stop.")
	agents.Store(url, filepath.Join(data, "identities", "agent.nk"))
	t.Cleanup(func() { up.stop(t); agents.Delete(url) })

	get := func(path, session string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
	if resp, body := get("api/state", token); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("X-Toolbus-Sign-In") != "oidc" {
		t.Errorf("the token: %d %s, want 401 and the sign-in offered", resp.StatusCode, body)
	}

	op.QueueUser(&mockoidc.MockUser{Subject: "u-alice", Email: "alice@example.com", EmailVerified: true, PreferredUsername: "alice", Groups: []string{"sre"}})
	session := oidcSignIn(t, base)

	// A page watches: the console's approver is present while it does.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"api/events", nil)
	req.Header.Set("Authorization", "Bearer "+session)
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stream.Body.Close() })
	first, err := bufio.NewReader(stream.Body).ReadString('\n')
	if err != nil || stream.StatusCode != http.StatusOK || first != "event: snapshot\n" {
		t.Fatalf("the event stream: %d %q %v", stream.StatusCode, first, err)
	}

	call := startCall(t, url, "write_file", `{"file_path":`+jsonString(ws+"/signed.txt")+`,"content":"approved\n"}`)
	var pending struct {
		Pending []struct {
			Key          string `json:"key"`
			InvocationID string `json:"invocationId"`
		} `json:"pending"`
	}
	testkit.Eventually(t, "the call pending in the console", func() bool {
		_, body := get("api/state", session)
		return json.Unmarshal([]byte(body), &pending) == nil && len(pending.Pending) == 1
	})
	p := pending.Pending[0]
	answer, _ := http.NewRequest("POST", base+"api/answer", strings.NewReader(fmt.Sprintf(`{"answerTo":%q,"outcome":"proceed_once","person":"mallory"}`, p.Key)))
	answer.Header.Set("Authorization", "Bearer "+session)
	answer.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(answer)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"accepted":true`) {
		t.Fatalf("the answer: %d %s", resp.StatusCode, body)
	}
	if code := call.wait(t); code != 0 {
		t.Fatalf("the approved call exited %d: %s", code, call.stderr.String())
	}

	out, errOut, code := toolbus(t, "audit", "show", p.InvocationID, "--json", "--nats", url)
	if code != 0 {
		t.Fatalf("audit show: exit %d: %s", code, errOut)
	}
	for _, want := range []string{`"approverPerson": "alice@example.com"`, `"iss": "` + op.Issuer() + `"`, `"sub": "u-alice"`, `"via": "console"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the trail does not say %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "mallory") {
		t.Errorf("the trail names the person the page claimed:\n%s", out)
	}
}

// oidcSignIn signs the provider's next user in to the console at base, as
// a browser's tab does (start with the tab's secret, the provider, the
// callback, finish), and returns the session.
func oidcSignIn(t *testing.T, base string) string {
	t.Helper()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path, body string) (int, []byte) {
		t.Helper()
		resp, err := client.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	binding := strings.Repeat("5", 64)
	code, data := post("auth/start", fmt.Sprintf(`{"binding":%q}`, binding))
	var started struct{ URL string }
	if code != http.StatusOK || json.Unmarshal(data, &started) != nil {
		t.Fatalf("start: %d %s", code, data)
	}
	next := started.URL
	for range 2 { // the provider, then the console's callback
		resp, err := client.Get(next)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%s: %d", next, resp.StatusCode)
		}
		next = resp.Header.Get("Location")
	}
	state, ok := strings.CutPrefix(next, "/#signin=")
	if !ok {
		t.Fatalf("the callback sent the browser to %q", next)
	}
	code, data = post("auth/finish", fmt.Sprintf(`{"state":%q,"binding":%q}`, state, binding))
	var got struct{ Session string }
	if code != http.StatusOK || json.Unmarshal(data, &got) != nil || got.Session == "" {
		t.Fatalf("finish: %d %s", code, data)
	}
	return got.Session
}
