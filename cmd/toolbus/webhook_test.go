package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolbus/toolbus/internal/notify"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestUpWebhook: `toolbus up --webhook` sends a call that waits for a
// person to the webhook, signed with the secret of the file, linking to
// the request in up's own console; the call is approved in the terminal,
// as before.
func TestUpWebhook(t *testing.T) {
	t.Parallel()
	secret := "up-webhook-secret-of-enough-bytes"
	secretFile := filepath.Join(t.TempDir(), "webhook-secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	type got struct {
		header http.Header
		body   []byte
	}
	var deliveries []got
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		deliveries = append(deliveries, got{r.Header.Clone(), body})
		mu.Unlock()
	}))
	t.Cleanup(rcv.Close)

	ws, data := t.TempDir(), t.TempDir()
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws, "--console", "127.0.0.1:0",
		"--mcp-listen", "off", "--webhook", rcv.URL, "--webhook-secret-file", secretFile)
	url := busURL(t, up.waitLine(t, "bus:"))
	consoleLine := up.waitLine(t, "console:")
	base, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(consoleLine), "console:")), "#")
	up.waitLine(t, "webhook:")
	up.waitLine(t, "Press Ctrl-C to stop.")
	agents.Store(url, filepath.Join(data, "identities", "agent.nk"))
	t.Cleanup(func() { up.stop(t); agents.Delete(url) })

	a := startApprover(t, url, nil, "--as", "approver:ada")
	a.waitScreen("0 pending")
	call := startCall(t, url, "write_file", `{"file_path":`+jsonString(ws+"/hooked.txt")+`,"content":"approved\n"}`)
	a.waitScreen("1 pending", "write_file")
	testkit.Eventually(t, "a delivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(deliveries) > 0 })
	mu.Lock()
	d := deliveries[0]
	mu.Unlock()
	if sig := d.header.Get(notify.HeaderSignature); sig != notify.Sign([]byte(secret), d.header.Get(notify.HeaderTimestamp), d.body) {
		t.Errorf("the delivery is not signed with the file's secret: %s", sig)
	}
	var p notify.Payload
	if err := json.Unmarshal(d.body, &p); err != nil {
		t.Fatal(err)
	}
	if p.Tool != "write_file" || p.Link != notify.Link(base, p.AnswerTo) || !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Errorf("payload %s; want write_file with a link into the console at %s", d.body, base)
	}
	a.press("y")
	if code := call.wait(t); code != 0 {
		t.Fatalf("the approved call exited %d: %s", code, call.stderr.String())
	}
	a.quit()
}

// TestWebhookFlags: the webhook's flags are refused, before anything
// starts, when the secret is missing or readable by others, a URL is not
// one, or there is no console to link to.
func TestWebhookFlags(t *testing.T) {
	t.Parallel()
	open := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(open, []byte("a-secret-of-enough-bytes-0123456"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o644)
	private := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(private, []byte("a-secret-of-enough-bytes-0123456"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no secret", []string{"up", "--webhook", "http://127.0.0.1:1/"}, "needs --webhook-secret-file"},
		{"secret alone", []string{"console", "--webhook-secret-file", open}, "go with --webhook"},
		{"no console", []string{"up", "--console", "off", "--webhook", "http://127.0.0.1:1/", "--webhook-secret-file", private}, "needs the console"},
		{"open secret", []string{"up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", t.TempDir(), "--console", "127.0.0.1:0",
			"--mcp-listen", "off", "--webhook", "http://127.0.0.1:1/", "--webhook-secret-file", open}, "chmod 600"},
		{"open secret, console", []string{"console", "--webhook", "http://127.0.0.1:1/", "--webhook-secret-file", open}, "chmod 600"},
		{"not a URL", []string{"console", "--webhook", "ftp://127.0.0.1:1/", "--webhook-secret-file", private}, "want http"},
		{"not a link", []string{"console", "--webhook", "http://127.0.0.1:1/", "--webhook-secret-file", private, "--webhook-link", "javascript:alert(1)"}, "console address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, code := toolbus(t, tc.args...)
			if code == 0 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want a failure saying %q", code, errOut, tc.want)
			}
		})
	}
}
