package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// probeScript is code in the workspace that the settings' owner has
// toolbus run (a hook, a discovery and a call command, a stdio MCP
// server), as a prompt-injected agent would have rewritten it: it tries
// to read the fleet's seeds and to connect to a bus node, and says what it
// got. As a hook ($1 hook), on a call that names hook-probe, it blocks the
// call (exit 2, Claude Code's "block") saying so, and lets any other
// through; as a discovery command ($1 discover) it writes it to the
// workspace's discover-saw.txt and declares probe_tool; as the call
// command, it prints it; as an MCP server ($1 mcp) it writes it to
// mcp-saw.txt and answers initialize and tools/list (no tools). %[1]s is
// a seed's path, %[2]d the bus port.
const probeScript = `#!/bin/bash
probe() {
	if err=$(cat '%[1]s' 2>&1 >/dev/null); then seeds=read; else seeds="refused ($err)"; fi
	if err=$( (exec 3<>/dev/tcp/127.0.0.1/%[2]d) 2>&1 ); then bus=connected; else bus="refused ($err)"; fi
	echo "seeds $seeds; bus $bus"
}
case $1 in
hook)
	grep -q hook-probe || exit 0
	echo "the probe hook blocks this: $(probe)" >&2
	exit 2 ;;
discover)
	probe >"$(dirname "$0")/../discover-saw.txt"
	echo '[{"name": "probe_tool", "description": "says what it can reach", "parameters": {"type": "object", "properties": {}}}]' ;;
call)
	probe ;;
mcp)
	probe >"$(dirname "$0")/../mcp-saw.txt"
	while IFS= read -r line; do
		id=$(printf '%%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
		case $line in
		*'"method":"initialize"'*)
			version=$(printf '%%s' "$line" | sed -n 's/.*"protocolVersion":"\([^"]*\)".*/\1/p')
			printf '{"jsonrpc":"2.0","id":%%s,"result":{"protocolVersion":"%%s","capabilities":{"tools":{}},"serverInfo":{"name":"probe","version":"1"}}}\n' "$id" "$version" ;;
		*'"method":"tools/list"'*) printf '{"jsonrpc":"2.0","id":%%s,"result":{"tools":[]}}\n' "$id" ;;
		*'"method":"ping"'*) printf '{"jsonrpc":"2.0","id":%%s,"result":{}}\n' "$id" ;;
		esac
	done ;;
esac
`

// probeSaw matches what probeScript says when both were refused by
// Landlock (EACCES), not for a reason of their own.
var probeSaw = regexp.MustCompile(`seeds refused \([^)]*Permission denied\); bus refused \([^)]*Permission denied`)

// TestLocalFleetAttacks: a prompt-injected agent, with the fleet's agent
// identity or a second agent's, tries the edges of deploy/local-fleet.sh's
// fleet, each through the fleet's real processes: its shell lines and a
// project hook reaching the seeds and toolbus's ports, another agent's
// background shell, the MCP facade's other clients, and calls that name
// no session escaping the loop guards. Each is refused.
func TestLocalFleetAttacks(t *testing.T) {
	t.Parallel()
	f, _ := startLocalFleet(t, func(f *localFleet) {
		ws1 := filepath.Join(f.dir, "ws1")
		// The code lives in the workspace, where the agent's edits
		// reach; the settings that run it are the owner's.
		probe := filepath.Join(ws1, "scripts", "probe.sh")
		for _, d := range []string{filepath.Dir(probe), filepath.Join(ws1, ".claude"), filepath.Join(ws1, ".gemini")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		write := func(path, data string) {
			if err := os.WriteFile(path, []byte(data), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		write(probe, fmt.Sprintf(probeScript, f.seed("admin"), f.port))
		write(filepath.Join(ws1, ".claude", "settings.json"),
			fmt.Sprintf(`{"hooks": {"PreToolUse": [{"matcher": "Read", "hooks": [{"type": "command", "command": "bash %s hook"}]}]}}`, probe))
		write(filepath.Join(ws1, ".gemini", "settings.json"), fmt.Sprintf(`{"tools": {"discoveryCommand": "bash %[1]s discover", "callCommand": "bash %[1]s call"},
			"mcpServers": {"probe": {"command": "bash", "args": [%[1]q, "mcp"]}}}`, probe))
		// Agents besides the fleet's own: a victim's neighbour, one
		// whose calls only the loop guard's subtest makes, and those
		// that fill the trail together, one of them only once it is
		// full.
		add := []string{"init", filepath.Join(f.dir, "identities"), "--add", "agent:mallory", "--add", "agent:looper", "--add", "agent:latecomer"}
		for i := range trailCrowd {
			add = append(add, "--add", fmt.Sprintf("agent:crowd%d", i+1))
		}
		if out, errOut, code := toolbus(t, add...); code != 0 {
			t.Fatalf("init: exit %d %s %s", code, out, errOut)
		}
	})
	all := f.urls()
	call := func(as, tool string, args any) (string, string, int) {
		t.Helper()
		raw, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		return toolbusWith(t, f.as(as), "call", tool, "--workspace", "one", "--timeout", "2m", "--args", string(raw), "--nats", all)
	}
	// Executor1 registers its tools once it is up.
	if !testkit.Poll(2*time.Minute, func() bool {
		_, _, code := call("agent", "read_file", map[string]string{"file_path": "README.md"})
		return code == 0
	}) {
		t.Fatal("no call in workspace one succeeded through the fleet in two minutes")
	}

	// The fleet's MCP facade, its clients alice and bob.
	tokens := filepath.Join(t.TempDir(), "mcp-tokens")
	token := func(name string) string {
		out, errOut, code := toolbus(t, "mcp", "token", "add", name, "--tokens", tokens)
		if code != 0 {
			t.Fatalf("mcp token add %s: exit %d %s", name, code, errOut)
		}
		return strings.TrimSpace(out)
	}
	aliceToken, bobToken := token("alice"), token("bob")
	facade := startDaemonWith(t, f.as("facade"), "toolbus", "mcp", "serve", "--listen", "127.0.0.1:0", "--tokens", tokens, "--workspace", "one", "--nats", all)
	endpoint := strings.Fields(strings.TrimPrefix(facade.waitLine(t, "toolbus mcp serve:"), "toolbus mcp serve:"))[0]
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatalf("the facade's endpoint %q: %v", endpoint, err)
	}
	mcpPort, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatalf("the facade's endpoint %q: %v", endpoint, err)
	}

	t.Run("ShellLineReachesNoSeedAndNoToolbusPort", func(t *testing.T) {
		ports := []struct {
			what string
			port int
		}{{"bus", f.port}, {"route", f.route}, {"console", f.consolePort}, {"metrics", f.metricsPort}, {"mcp", mcpPort}}
		// Each is there to be reached, unconfined: the refusals below
		// are the confinement's.
		for _, p := range ports {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p.port))
			if err != nil {
				t.Fatalf("the %s port %d: %v", p.what, p.port, err)
			}
			c.Close()
		}
		if _, err := os.ReadFile(f.seed("admin")); err != nil {
			t.Fatal(err)
		}
		line := `probe() { if err=$( (exec 3<>/dev/tcp/127.0.0.1/$2) 2>&1 ); then echo "$1: connected"; else echo "$1: refused ($err)"; fi; }` + "\n"
		for _, p := range ports {
			line += fmt.Sprintf("probe %s %d\n", p.what, p.port)
		}
		line += fmt.Sprintf(`if err=$(cat '%s' '%s' 2>&1 >/dev/null); then echo "seeds: read"; else echo "seeds: refused ($err)"; fi`+"\n", f.seed("admin"), f.seed("agent"))
		line += fmt.Sprintf(`if err=$(ls '%s' 2>&1 >/dev/null); then echo "identities: listed"; else echo "identities: refused ($err)"; fi`+"\n", filepath.Join(f.dir, "identities"))
		line += "cat README.md\n"
		defer answeringApprover(t, f.as("approver"), all)()
		out, errOut, code := call("agent", "run_shell_command", map[string]string{"command": line})
		if code != 0 || !strings.Contains(out, "# workspace one") {
			t.Fatalf("the shell line did not run: exit %d %s %s", code, out, errOut)
		}
		t.Logf("the shell line printed:\n%s", out)
		// What it printed, not the command the result repeats.
		_, stdout, _ := strings.Cut(out, "Stdout:")
		stdout, _, _ = strings.Cut(stdout, "Stderr:")
		// Unconfined, it would print "connected", "read" and "listed":
		// Landlock's TCP rules and its unreadable paths refuse each, with
		// EACCES.
		for _, what := range []string{"bus", "route", "console", "metrics", "mcp", "seeds", "identities"} {
			if !regexp.MustCompile(`(?m)^\s*` + what + `: refused \([^)]*Permission denied`).MatchString(stdout) {
				t.Errorf("the shell line reached the %s: %s", what, stdout)
			}
		}
	})

	t.Run("HookReachesNoSeedAndNoBusAndStillDecides", func(t *testing.T) {
		_, errOut, code := call("agent", "read_file", map[string]string{"file_path": "hook-probe.txt"})
		// The hook ran and its verdict holds; unconfined it would say
		// "seeds read; bus connected".
		if code == 0 || !strings.Contains(errOut, string(events.ErrPolicyDenied)) || !strings.Contains(errOut, "the probe hook blocks this") {
			t.Fatalf("a call the hook blocks: exit %d %s", code, errOut)
		}
		t.Logf("the hook's verdict: %s", errOut)
		if !probeSaw.MatchString(errOut) {
			t.Errorf("the hook reached the seeds or the bus: %s", errOut)
		}
		if out, errOut, code := call("agent", "read_file", map[string]string{"file_path": "README.md"}); code != 0 || !strings.Contains(out, "# workspace one") {
			t.Errorf("a call the hook lets through: exit %d %s %s", code, out, errOut)
		}
	})

	t.Run("DiscoveryCallAndMCPServerReachNoSeedAndNoBus", func(t *testing.T) {
		// Each ran at the executor's start; unconfined, each would say
		// "seeds read; bus connected".
		for _, saw := range []string{"discover-saw.txt", "mcp-saw.txt"} {
			var said []byte
			if !testkit.Poll(time.Minute, func() bool {
				said, _ = os.ReadFile(filepath.Join(f.dir, "ws1", saw))
				return len(said) > 0
			}) || !probeSaw.Match(said) {
				t.Errorf("%s: the probe reached the seeds or the bus, or never ran: %q", saw, said)
			} else {
				t.Logf("%s: %s", saw, said)
			}
		}
		defer answeringApprover(t, f.as("approver"), all)()
		if out, errOut, code := call("agent", "probe_tool", map[string]any{}); code != 0 || !probeSaw.MatchString(out) {
			t.Errorf("the discovered tool's call command: exit %d %s %s", code, out, errOut)
		}
	})

	t.Run("AnotherAgentsBackgroundShellIsNotTheirs", func(t *testing.T) {
		defer answeringApprover(t, f.as("approver"), all)()
		out, errOut, code := call("agent", "run_shell_command", map[string]any{
			"command": "echo API_TOKEN=victim-secret-123; touch victim-spoke; sleep 300", "run_in_background": true})
		m := regexp.MustCompile(`shell_id (\S+)`).FindStringSubmatch(out)
		if code != 0 || m == nil {
			t.Fatalf("the victim's background command: exit %d %s %s", code, out, errOut)
		}
		victim := m[1]
		testkit.EventuallyWithin(t, time.Minute, "the victim's command spoke", func() bool {
			_, err := os.Stat(filepath.Join(f.dir, "ws1", "victim-spoke"))
			return err == nil
		})
		// An id of the same shape that names nothing.
		madeUp := victim[:len(victim)-1] + "a"
		if madeUp == victim {
			madeUp = victim[:len(victim)-1] + "b"
		}
		answer := func(tool, id string) string {
			out, errOut, code := call("mallory", tool, map[string]string{"shell_id": id})
			// Not the line saying the call waits for a person, which
			// counts down.
			var said []string
			for _, l := range strings.Split(errOut, "\n") {
				if !strings.HasPrefix(l, "toolbus: waiting for approval") {
					said = append(said, l)
				}
			}
			return strings.ReplaceAll(fmt.Sprintf("exit %d|%s|%s", code, out, strings.Join(said, "\n")), id, "ID")
		}
		// With the owner's check gone, mallory would read the victim's
		// API_TOKEN here and kill its command.
		for _, tool := range []string{"shell_output", "kill_shell"} {
			got, unknown := answer(tool, victim), answer(tool, madeUp)
			t.Logf("mallory's %s of the victim's id: %s", tool, got)
			if got != unknown || strings.Contains(got, "victim-secret") {
				t.Errorf("mallory's %s of the victim's shell:\n%s\nof an id that names nothing:\n%s", tool, got, unknown)
			}
		}
		// The victim's command runs on, its output unread by anyone.
		if out, errOut, code := call("agent", "shell_output", map[string]string{"shell_id": victim}); code != 0 || !strings.Contains(out, "API_TOKEN=victim-secret-123") {
			t.Errorf("the victim's own read: exit %d %s %s", code, out, errOut)
		}
		if out, errOut, code := call("agent", "kill_shell", map[string]string{"shell_id": victim}); code != 0 {
			t.Errorf("the victim's own kill_shell: exit %d %s %s", code, out, errOut)
		}
	})

	t.Run("FacadeClientsAreAuthenticatedAndApart", func(t *testing.T) {
		send := func(method, token, session, body string) int {
			t.Helper()
			// A stream opened answers with its headers and stays open:
			// the status is all this wants.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, method, endpoint, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			if session != "" {
				req.Header.Set("Mcp-Session-Id", session)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		post := func(token, session, body string) int { return send(http.MethodPost, token, session, body) }
		initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"claude-code","version":"2.0"}}}`
		for what, tok := range map[string]string{"no token": "", "a made-up token": strings.Repeat("A", len(aliceToken))} {
			if got := post(tok, "", initialize); got != http.StatusUnauthorized {
				t.Errorf("a client with %s: %d, want 401", what, got)
			}
		}

		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		asked, decide := make(chan struct{}, 1), make(chan struct{})
		declining := elicitFunc(func(ctx context.Context, _ mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
			asked <- struct{}{}
			select {
			case <-decide:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.ElicitationResult{ElicitationResponse: mcp.ElicitationResponse{Action: mcp.ElicitationResponseActionDecline}}, nil
		})
		alice := connectWithToken(t, endpoint, aliceToken, declining)
		// A second session of alice's, which is not the one asked.
		aliceToo := connectWithToken(t, endpoint, aliceToken, acceptingUser(make(chan string, 4)))
		bob := connectWithToken(t, endpoint, bobToken, acceptingUser(make(chan string, 4)))
		ping := `{"jsonrpc":"2.0","id":7,"method":"ping"}`
		// Bob names alice's session: a request on it, its stream (where
		// alice's questions go), its end. Were sessions not bound to the
		// client that opened them, the stream would be bob's to read and
		// the session his to end (mcp-go itself checks a POST's).
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			if got := send(method, bobToken, alice.GetSessionId(), ping); got != http.StatusNotFound {
				t.Errorf("bob's %s on alice's session: %d, want 404", method, got)
			}
		}
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			req := mcp.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = "write_file", map[string]any{"file_path": "forged.md", "content": "x\n"}
			res, err := alice.CallTool(ctx, req)
			if err != nil {
				t.Errorf("alice's edit: %v", err)
			}
			done <- res
		}()
		select {
		case <-asked:
		case <-ctx.Done():
			t.Fatal("alice's user was never asked about her edit")
		}
		// Bob accepts every question the facade may have put, on his
		// own session and on alice's, and so does alice's other session;
		// with answers taken from any session, the edit would be made.
		for _, forger := range []struct{ token, session string }{
			{bobToken, bob.GetSessionId()}, {bobToken, alice.GetSessionId()}, {aliceToken, aliceToo.GetSessionId()}} {
			for id := 1; id <= 20; id++ {
				post(forger.token, forger.session, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"action":"accept","content":{}}}`, id))
			}
		}
		close(decide)
		var res *mcp.CallToolResult
		select {
		case res = <-done:
		case <-ctx.Done():
			t.Fatal("alice's edit never ended")
		}
		if res != nil {
			t.Logf("alice's edit: %s", mcpText(res))
		}
		if res == nil || !res.IsError || !strings.Contains(mcpText(res), "declined") {
			t.Fatalf("alice's edit after bob's accepts and her user's decline: %+v", res)
		}
		if _, err := os.Stat(filepath.Join(f.dir, "ws1", "forged.md")); err == nil {
			t.Fatal("bob's accept made alice's edit")
		}
		if isErr, text := mcpCall(t, bob, "read_file", `{"file_path":"README.md"}`); isErr || !strings.Contains(text, "# workspace one") {
			t.Errorf("bob's read: %v %s", isErr, text)
		}
		// The trail names each call's client by its token, though both
		// call themselves claude-code.
		want := map[string]string{"write_file": "facade/alice", "read_file": "facade/bob"}
		got := map[string]string{}
		if !testkit.Poll(time.Minute, func() bool {
			out, _, code := toolbusWith(t, f.as("auditor"), "audit", "list", "--json", "--since", "1h", "--nats", all)
			var recs []struct {
				Tool      string `json:"tool"`
				Principal string `json:"principal"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &recs) != nil {
				return false
			}
			for _, r := range recs {
				if strings.HasPrefix(r.Principal, "facade") {
					got[r.Tool] = r.Principal
				}
			}
			return got["write_file"] == want["write_file"] && got["read_file"] == want["read_file"]
		}) {
			t.Errorf("the trail's facade calls by tool: %v, want %v", got, want)
		}
	})

	t.Run("OneFacadeClientLeavesAnotherItsPlaces", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// Alice's user never answers; bob's accepts.
		var held atomic.Int32
		holding := make(chan struct{})
		defer close(holding)
		silent := elicitFunc(func(ctx context.Context, _ mcp.ElicitationRequest) (*mcp.ElicitationResult, error) {
			held.Add(1)
			select {
			case <-holding:
			case <-ctx.Done():
			}
			return nil, ctx.Err()
		})
		hog := connectWithToken(t, endpoint, aliceToken, silent)
		bob := connectWithToken(t, endpoint, bobToken, acceptingUser(make(chan string, 4)))
		write := func(c *mcpclient.Client, ctx context.Context, file string) (*mcp.CallToolResult, error) {
			req := mcp.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = "write_file", map[string]any{"file_path": file, "content": "x\n"}
			return c.CallTool(ctx, req)
		}
		calls, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer func() { stop(); wg.Wait() }()
		for i := range 16 {
			wg.Go(func() { write(hog, calls, fmt.Sprintf("hold-%d.txt", i)) })
		}
		testkit.EventuallyWithin(t, time.Minute, "alice's 16 edits wait for her user", func() bool { return held.Load() == 16 })
		if res, err := write(hog, ctx, "one-more.txt"); err != nil || !res.IsError || !strings.Contains(mcpText(res), string(events.ErrTooManyPending)) {
			t.Fatalf("alice's 17th edit: %v %+v", err, res)
		}
		// Were the facade's clients one principal, bob's edit would be
		// refused as alice's 17th is.
		if res, err := write(bob, ctx, "bobs.txt"); err != nil || res.IsError {
			t.Fatalf("bob's edit beside alice's 16: %v %+v", err, res)
		}
		if _, err := os.Stat(filepath.Join(f.dir, "ws1", "bobs.txt")); err != nil {
			t.Errorf("bob's edit was not made: %v", err)
		}
	})

	t.Run("AnotherAgentsSpooledOutputIsSeenByNoWatcher", func(t *testing.T) {
		spoolWatchedOnFleet(t, f)
	})

	t.Run("CallsWithoutASessionAreCounted", func(t *testing.T) {
		// The fleet's policy with a budget of 3 calls for a caller that
		// names no session, as `toolbus call` does.
		pol := t.TempDir()
		files, _ := filepath.Glob("../../policy/*.rego")
		for _, p := range files {
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			switch filepath.Base(p) {
			case "loops.rego":
				const budget = "sessionless_call_budget := 100000"
				if !strings.Contains(string(data), budget) {
					t.Fatalf("loops.rego does not set %q", budget)
				}
				data = []byte(strings.Replace(string(data), budget, "sessionless_call_budget := 3", 1))
			case "loops_test.rego":
				data = []byte("package toolbus_loops_test\n") // its tests assume the default budget
			}
			os.WriteFile(filepath.Join(pol, filepath.Base(p)), data, 0o644)
		}
		if out, errOut, code := toolbusWith(t, f.as("admin"), "policy", "push", pol, "--nats", all); code != 0 {
			t.Fatalf("policy push: exit %d %s %s", code, out, errOut)
		}
		// The fleet's own policy again for the subtests after this one,
		// however this one ends.
		defer func() {
			if out, errOut, code := toolbusWith(t, f.as("admin"), "policy", "push", "../../policy", "--nats", all); code != 0 {
				t.Errorf("policy push of the fleet's own: exit %d %s %s", code, out, errOut)
			}
		}()
		os.WriteFile(filepath.Join(f.dir, "ws1", "secret.txt"), []byte("SECRET-OF-THE-WORKSPACE\n"), 0o644)
		// Looper's calls, each naming no session, run until the
		// executors hold the pushed policy; then one is past the budget.
		// Were calls without a session not counted, none would be.
		var out, errOut string
		var code int
		if !testkit.Poll(time.Minute, func() bool {
			out, errOut, code = call("looper", "read_file", map[string]string{"file_path": "secret.txt"})
			return code != 0
		}) || !strings.Contains(errOut, string(events.ErrPolicyDenied)) || !strings.Contains(errOut, "without naming a session, past the budget of 3") {
			t.Fatalf("looper's calls without a session, past a budget of 3: exit %d %s %s", code, out, errOut)
		}
		t.Logf("looper's call past the budget: %s", errOut)
		if strings.Contains(out+errOut, "SECRET-OF-THE-WORKSPACE") {
			t.Errorf("the call past the budget ran: %s %s", out, errOut)
		}
	})

	// Last: it leaves the fleet refusing calls until it raises the
	// trail's cap again, which a failure may stop it from doing.
	t.Run("TheTrailCannotBePushedOut", func(t *testing.T) {
		trailHeldOnFleet(t, f)
	})
	facade.stop(t)
}

// answeringApprover runs `toolbus confirm --json` as the member env
// names, on the bus at url, answering every request it is shown with
// proceed_once, and returns once it is present; the returned func ends
// it.
func answeringApprover(t *testing.T, env []string, url string) func() {
	t.Helper()
	return confirmApprover(t, env, url, events.ProceedOnce)
}

// confirmApprover runs `toolbus confirm --json` as the member env names,
// on the bus at url, answering every request it is shown with answer
// (none for ""), and returns once it is present; the returned func ends
// it.
func confirmApprover(t *testing.T, env []string, url string, answer events.Outcome) func() {
	t.Helper()
	confirm := exec.Command(bin("toolbus"), "confirm", "--json", "--nats", url)
	confirm.Env = append(os.Environ(), env...)
	var confirmErr testkit.Buffer
	confirm.Stderr = &confirmErr
	stdin, _ := confirm.StdinPipe()
	stdout, _ := confirm.StdoutPipe()
	if err := confirm.Start(); err != nil {
		t.Fatal(err)
	}
	ready, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		dec := json.NewDecoder(stdout)
		for {
			var ev struct {
				Event    string `json:"event"`
				AnswerTo string `json:"answerTo"`
			}
			if dec.Decode(&ev) != nil {
				return
			}
			switch ev.Event {
			case "ready":
				close(ready)
			case "request":
				if answer != "" {
					fmt.Fprintf(stdin, "{\"answerTo\":%q,\"outcome\":%q}\n", ev.AnswerTo, answer)
				}
			}
		}
	}()
	stop := func() { stdin.Close(); <-ended; confirm.Wait() }
	select {
	case <-ready:
	case <-ended:
		confirm.Wait()
		t.Fatalf("toolbus confirm ended before it was ready: %s", confirmErr.String())
	case <-time.After(time.Minute):
		stop()
		t.Fatalf("toolbus confirm not ready in a minute: %s", confirmErr.String())
	}
	return stop
}
