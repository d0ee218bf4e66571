package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/identity"
	"github.com/toolbus/toolbus/internal/testkit"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// freeRun finds n consecutive free loopback ports and returns the first.
// They are below Linux's ephemeral range (32768 on), where the kernel
// picks the local ports of outgoing connections: a port found free there
// is taken by some test's connection before the script listens on it.
func freeRun(t *testing.T, n int) int {
	t.Helper()
	for range 100 {
		base := 10000 + rand.IntN(22000)
		ok := true
		for i := range n {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no run of free ports")
	return 0
}

// localFleet is a fleet deploy/local-fleet.sh started in dir, on ports
// of its own: client ports port..port+2, route ports route..route+2, the
// console on consolePort, metrics on metricsPort..metricsPort+6.
type localFleet struct {
	dir                                   string
	port, route, consolePort, metricsPort int
	// script runs deploy/local-fleet.sh with args and the fleet's dir.
	script func(args ...string) (string, error)
}

// node is the client URL of bus node i (0..2).
func (f *localFleet) node(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", f.port+i) }

// urls are the client URLs of every node.
func (f *localFleet) urls() string { return f.node(0) + "," + f.node(1) + "," + f.node(2) }

// seed is the path of member name's seed.
func (f *localFleet) seed(name string) string { return filepath.Join(f.dir, "identities", name+".nk") }

// as is the environment of a command run as member name.
func (f *localFleet) as(name string) []string { return []string{"TOOLBUS_IDENTITY=" + f.seed(name)} }

// startLocalFleet starts deploy/local-fleet.sh's fleet in a temp dir,
// once prepare (when given) has made what it needs in f.dir, and returns
// it with what start printed. The fleet is stopped when the test ends, and
// every part's last log lines are logged when it failed.
func startLocalFleet(t *testing.T, prepare func(f *localFleet)) (*localFleet, string) {
	t.Helper()
	testkit.Heavy(t, "a 3-node fleet of processes")
	// One run of free ports for all of them: runs found apart may
	// overlap (a console once drew a port inside the metrics' run).
	base := freeRun(t, 3+3+1+7)
	f := &localFleet{dir: t.TempDir(), port: base, route: base + 3, consolePort: base + 6, metricsPort: base + 7}
	env := append(os.Environ(), "TOOLBUS_NATS=", fmt.Sprintf("TOOLBUS_FLEET_PORT=%d", f.port), fmt.Sprintf("TOOLBUS_FLEET_ROUTE_PORT=%d", f.route),
		fmt.Sprintf("TOOLBUS_FLEET_CONSOLE=127.0.0.1:%d", f.consolePort), fmt.Sprintf("TOOLBUS_FLEET_METRICS=%d", f.metricsPort))
	f.script = func(args ...string) (string, error) {
		cmd := exec.Command("../../deploy/local-fleet.sh", append(args, f.dir)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if prepare != nil {
		prepare(f)
	}
	out, err := f.script("start")
	t.Cleanup(func() {
		if out, err := f.script("stop"); err != nil {
			t.Errorf("stop: %v\n%s", err, out)
		}
		if t.Failed() {
			// What the parts said last, to go on with.
			logs, _ := filepath.Glob(filepath.Join(f.dir, "log", "*.log"))
			for _, l := range logs {
				data, _ := os.ReadFile(l)
				lines := strings.Split(strings.TrimSpace(string(data)), "\n")
				t.Logf("%s, last lines:\n%s", filepath.Base(l), strings.Join(lines[max(0, len(lines)-30):], "\n"))
			}
		}
	})
	if err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	return f, out
}

// TestLocalFleetScript: deploy/local-fleet.sh starts three bus nodes, a
// registry, two executors and the console as local processes; a call
// works through every node; stop ends every process it started.
func TestLocalFleetScript(t *testing.T) {
	t.Parallel()
	f, out := startLocalFleet(t, func(f *localFleet) {
		dir := f.dir
		// A log an earlier run left readable by all, which the next run
		// must not write the console's token into as it is.
		if err := os.MkdirAll(filepath.Join(dir, "log"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "log", "console.log"), []byte("an earlier run\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	dir, script, metricsPort := f.dir, f.script, f.metricsPort
	pids, _ := filepath.Glob(filepath.Join(dir, "run", "*.pid"))
	if len(pids) != 7 {
		t.Fatalf("%d parts started, want 7: %v\n%s", len(pids), pids, out)
	}
	// The console's address, token and all, is in its log: every log is
	// the user's alone.
	if !strings.Contains(out, "#token=") {
		t.Errorf("start does not print the console's address with its token:\n%s", out)
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
	for _, l := range append(logs, filepath.Join(dir, "log")) {
		fi, err := os.Stat(l)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v: others may read it", l, fi.Mode().Perm())
		}
	}
	if len(logs) != 7 {
		t.Errorf("%d logs, want 7: %v", len(logs), logs)
	}
	node := f.node
	agent := "TOOLBUS_IDENTITY=" + filepath.Join(dir, "identities", "agent.nk")
	call := func(url string, more ...string) (string, string, int) {
		return toolbusWith(t, []string{agent}, append([]string{"call", "read_file", "--args", `{"file_path":"README.md"}`, "--nats", url}, more...)...)
	}
	// Each executor registers its workspace's tools once it is up, the
	// second maybe seconds after the first.
	for _, ws := range []string{"one", "two"} {
		if !testkit.Poll(2*time.Minute, func() bool {
			_, _, code := call(node(2), "--workspace", ws)
			return code == 0
		}) {
			t.Fatalf("no call in workspace %s succeeded through the fleet in two minutes", ws)
		}
	}
	// Every node takes calls, and each runs in the workspace it names,
	// whichever executor took it.
	for i := range 3 {
		for _, ws := range []string{"one", "two"} {
			if out, errOut, code := call(node(i), "--workspace", ws); code != 0 || !strings.Contains(out, "# workspace "+ws) {
				t.Errorf("through node %d, workspace %s: exit %d %s %s", i+1, ws, code, out, errOut)
			}
		}
	}
	// An agent reads the catalogue, which lists each host's workspace.
	if out, errOut, code := toolbusWith(t, []string{agent}, "tools", "get", "read_file", "--json", "--nats", node(1)); code != 0 ||
		!strings.Contains(out, `"one"`) || !strings.Contains(out, `"two"`) {
		t.Errorf("the agent's tools get: exit %d %s %s", code, out, errOut)
	}
	if _, errOut, code := call(node(0)); code == 0 || !strings.Contains(errOut, `"one", "two"`) {
		t.Errorf("a call naming no workspace, with two: exit %d %s", code, errOut)
	}
	// The nodes admit only the fleet's members.
	if _, errOut, code := toolbusWith(t, []string{"TOOLBUS_IDENTITY="}, "call", "read_file", "--args", `{"file_path":"README.md"}`, "--nats", node(0)); code == 0 || !strings.Contains(strings.ToLower(errOut), "authorization") {
		t.Errorf("a call with no identity: exit %d %s", code, errOut)
	}
	// A member added while the fleet runs is admitted once the nodes
	// read the identities again, with no restart.
	if out, errOut, code := toolbus(t, "init", filepath.Join(dir, "identities"), "--add", "agent:newbie"); code != 0 {
		t.Fatalf("init --add: exit %d %s %s", code, out, errOut)
	}
	newbie := "TOOLBUS_IDENTITY=" + filepath.Join(dir, "identities", "newbie.nk")
	newbieCalls := func(i int) (string, int) {
		_, errOut, code := toolbusWith(t, []string{newbie}, "call", "read_file", "--workspace", "one", "--args", `{"file_path":"README.md"}`, "--nats", node(i))
		return errOut, code
	}
	if errOut, code := newbieCalls(0); code == 0 || !strings.Contains(strings.ToLower(errOut), "authorization") {
		t.Errorf("a member the nodes have not read yet: exit %d %s", code, errOut)
	}
	if out, err := script("reload"); err != nil {
		t.Fatalf("reload: %v\n%s", err, out)
	}
	for i := range 3 {
		var errOut string
		var code int
		if !testkit.Poll(30*time.Second, func() bool {
			errOut, code = newbieCalls(i)
			return code == 0
		}) {
			t.Fatalf("the new member through node %d, 30 s after the reload: exit %d %s", i+1, code, errOut)
		}
	}
	// Every part is ready, and the executors count the calls they ran.
	served := 0.0
	for i := range 7 {
		base := fmt.Sprintf("http://127.0.0.1:%d", metricsPort+i)
		var code int
		var body string
		if !testkit.Poll(30*time.Second, func() bool {
			code, body = httpGet(t, base+"/readyz")
			return code == 200
		}) {
			t.Errorf("part %d not ready in 30 s: %d %s", i, code, body)
		}
		if i == 4 || i == 5 {
			_, body := httpGet(t, base+"/metrics")
			for _, line := range strings.Split(body, "\n") {
				if strings.HasPrefix(line, `toolbus_invocations_total{outcome="OK",tool="read_file",verdict="ALLOW"}`) {
					n, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
					served += n
				}
			}
		}
	}
	if served < 4 {
		t.Errorf("the executors' metrics count %v read_file calls; at least 4 were made", served)
	}
	ids := func(name string) string { return filepath.Join(dir, "identities", name+".nk") }
	attackAsConfinedMembers(t, node(1), "one", ids("agent"), ids("auditor"), ids("approver"), "", []string{"TOOLBUS_IDENTITY=" + ids("admin")})
	lostExecutor(t, dir, agent, node)
	lostNode(t, dir, node)
	restartEverything(t, dir, agent, node, script)
	if out, _ := script("status"); strings.Count(out, "running") != 7 {
		t.Errorf("status:\n%s", out)
	}
	var running []int
	for _, p := range pids {
		data, _ := os.ReadFile(p)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
		running = append(running, pid)
	}
	if out, err := script("stop"); err != nil || !strings.Contains(out, "fleet stopped") {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	for _, pid := range running {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("process %d still runs after stop", pid)
		}
	}
}

// lostExecutor kills executor2 (workspace two) while a call of its waits
// for confirmation: that call ends as EXECUTOR_LOST, workspace one's calls
// go on, workspace two's fail at once once the registry has taken the
// executor for lost, and work again when it is back.
func lostExecutor(t *testing.T, dir, agent string, node func(int) string) {
	t.Helper()
	pidFile := filepath.Join(dir, "run", "executor2.pid")
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	call := func(ws, tool, argsJSON string) (string, string, int) {
		return toolbusWith(t, []string{agent}, "call", tool, "--workspace", ws, "--args", argsJSON, "--nats", node(0)+","+node(1)+","+node(2))
	}
	type outcome struct {
		errOut string
		code   int
	}
	// A person watches, who answers nothing: the console with no page
	// open is none, and the call would be denied at once.
	defer watchingApprover(t, "TOOLBUS_IDENTITY="+filepath.Join(dir, "identities", "approver.nk"), node(0)+","+node(1)+","+node(2))()
	pending := make(chan outcome, 1)
	go func() {
		_, errOut, code := call("two", "run_shell_command", `{"command":"sleep 30"}`)
		pending <- outcome{errOut, code}
	}()
	// Mid-call: the policy asked, and the call waits for an answer.
	auditor := "TOOLBUS_IDENTITY=" + filepath.Join(dir, "identities", "auditor.nk")
	var listed string
	var ended *outcome
	if !testkit.Poll(time.Minute, func() bool {
		select {
		case o := <-pending:
			ended = &o
			return true
		default:
		}
		listed, _, _ = toolbusWith(t, []string{auditor}, "audit", "list", "--tool", "run_shell_command", "--verdict", "ASK_USER", "--json", "--nats", node(1))
		return strings.Contains(strings.ReplaceAll(listed, " ", ""), `"outcome":"PENDING"`)
	}) || ended != nil {
		if ended != nil {
			t.Fatalf("the shell call ended before it was confirmed: exit %d %s", ended.code, ended.errOut)
		}
		t.Fatalf("the shell call never waited for confirmation: %s", listed)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if o := <-pending; o.code == 0 || !strings.Contains(o.errOut, string(events.ErrExecutorLost)) {
		t.Errorf("the call its executor died under: exit %d %s", o.code, o.errOut)
	}
	if out, errOut, code := call("one", "read_file", `{"file_path":"README.md"}`); code != 0 || !strings.Contains(out, "# workspace one") {
		t.Errorf("workspace one with executor2 gone: exit %d %s %s", code, out, errOut)
	}
	var errOut string
	var code int
	if !testkit.Poll(time.Minute, func() bool {
		_, errOut, code = call("two", "read_file", `{"file_path":"README.md"}`)
		return code != 0 && strings.Contains(errOut, `no executor hosts read_file for workspace "two"`)
	}) {
		t.Fatalf("workspace two with its executor gone for a minute: exit %d %s", code, errOut)
	}
	// It comes back, as it was started; the script's stop stops it, as
	// the part it replaces.
	relaunch(t, dir, "executor2", args, []string{"TOOLBUS_IDENTITY=" + filepath.Join(dir, "identities", "executor2.nk")})
	if !testkit.Poll(time.Minute, func() bool {
		var out string
		out, errOut, code = call("two", "read_file", `{"file_path":"README.md"}`)
		return code == 0 && strings.Contains(out, "# workspace two")
	}) {
		t.Fatalf("workspace two with its executor back: exit %d %s", code, errOut)
	}
}

// watchingApprover runs `toolbus confirm --json` as the member whose
// identity env names, on the bus at url, answering nothing, and returns
// once it is present; the returned func ends it.
func watchingApprover(t *testing.T, env, url string) func() {
	t.Helper()
	return confirmApprover(t, []string{env}, url, "")
}

// restartEverything pushes a policy, remembers an approval and makes some
// history, stops every part and starts the fleet again: the catalogue,
// the allowlist, the policy and the history are all there.
func restartEverything(t *testing.T, dir, agent string, node func(int) string, script func(...string) (string, error)) {
	t.Helper()
	id := func(name string) []string {
		return []string{"TOOLBUS_IDENTITY=" + filepath.Join(dir, "identities", name+".nk")}
	}
	all := node(0) + "," + node(1) + "," + node(2)
	run := func(as string, args ...string) string {
		t.Helper()
		out, errOut, code := toolbusWith(t, id(as), append(args, "--nats", all)...)
		if code != 0 {
			t.Fatalf("%s: toolbus %v: exit %d %s", as, args, code, errOut)
		}
		return out
	}
	run("admin", "policy", "push", "../../policy")
	policyBefore := run("admin", "policy", "show", "--json")

	// An approval remembered: an approver of its own says always.
	confirm := exec.Command(bin("toolbus"), "confirm", "--json", "--nats", all)
	confirm.Env = append(os.Environ(), id("approver")...)
	var confirmErr bytes.Buffer
	confirm.Stderr = &confirmErr
	stdin, _ := confirm.StdinPipe()
	stdout, _ := confirm.StdoutPipe()
	if err := confirm.Start(); err != nil {
		t.Fatal(err)
	}
	ready, answered := make(chan struct{}), make(chan struct{})
	// What the approver saw, said when the call fails.
	var seenMu sync.Mutex
	var seen []string
	approverSaw := func() string {
		seenMu.Lock()
		defer seenMu.Unlock()
		return strings.Join(seen, "\n")
	}
	go func() {
		defer close(answered)
		dec := json.NewDecoder(stdout)
		for {
			var ev struct {
				Event        string                 `json:"event"`
				InvocationID string                 `json:"invocationId"`
				AnswerTo     string                 `json:"answerTo"`
				Request      *events.ConfirmRequest `json:"request"`
			}
			if dec.Decode(&ev) != nil {
				return
			}
			seenMu.Lock()
			seen = append(seen, fmt.Sprintf("%s %s %s", time.Now().Format("15:04:05.000"), ev.Event, ev.InvocationID))
			seenMu.Unlock()
			switch {
			case ev.Event == "ready":
				close(ready)
			case ev.Event == "request" && ev.Request != nil && len(ev.Request.Always) > 0:
				fmt.Fprintf(stdin, "{\"answerTo\":%q,\"outcome\":%q}\n", ev.AnswerTo, ev.Request.Always[0].Outcome)
			}
		}
	}()
	defer func() { stdin.Close(); confirm.Wait(); <-answered }()
	select {
	case <-ready:
	case <-answered:
		t.Fatalf("toolbus confirm ended before it was ready: %s", confirmErr.String())
	case <-time.After(time.Minute):
		t.Fatalf("toolbus confirm not ready in a minute: %s", confirmErr.String())
	}
	callID := fmt.Sprintf("restart-kept-%d", time.Now().UnixNano())
	began := time.Now()
	if out, errOut, code := toolbusWith(t, []string{agent}, "call", "write_file", "--workspace", "one", "--timeout", "90s", "--id", callID,
		"--args", `{"file_path":"kept.txt","content":"kept"}`, "--nats", all); code != 0 {
		// Where the call waited: its trail, and what the approver saw.
		trail, trailErr, _ := toolbusWith(t, id("auditor"), "audit", "show", callID, "--since", "10m", "--nats", all)
		t.Fatalf("the call remembered (began %s): exit %d %s %s\nthe approver's stderr: %s\nthe approver saw:\n%s\nthe call's trail:\n%s%s",
			began.Format("15:04:05.000"), code, out, errOut, confirmErr.String(), approverSaw(), trail, trailErr)
	}
	allowBefore := run("admin", "allowlist", "list", "--json")
	if !strings.Contains(allowBefore, `"write_file"`) {
		t.Fatalf("no approval remembered: %s", allowBefore)
	}
	tools := run("agent", "tools", "list", "--json")
	history := run("auditor", "audit", "list", "--json")

	if out, err := script("stop"); err != nil {
		t.Fatalf("stop: %v\n%s", err, out)
	}
	if out, err := script("start"); err != nil {
		t.Fatalf("start again: %v\n%s", err, out)
	}
	testkit.EventuallyWithin(t, 2*time.Minute, "a call after the restart", func() bool {
		_, _, code := toolbusWith(t, []string{agent}, "call", "read_file", "--workspace", "two", "--args", `{"file_path":"README.md"}`, "--nats", all)
		return code == 0
	})
	if got := run("admin", "policy", "show", "--json"); got != policyBefore {
		t.Errorf("the pushed policy after the restart:\n%s\nbefore:\n%s", got, policyBefore)
	}
	if got := run("admin", "allowlist", "list", "--json"); got != allowBefore {
		t.Errorf("the allowlist after the restart:\n%s\nbefore:\n%s", got, allowBefore)
	}
	// The catalogue: the same tools, the executors registered again.
	var before, after []map[string]any
	json.Unmarshal([]byte(tools), &before)
	json.Unmarshal([]byte(run("agent", "tools", "list", "--json")), &after)
	if len(after) != len(before) || len(before) == 0 {
		t.Errorf("%d tools after the restart, %d before", len(after), len(before))
	}
	// The history: every invocation recorded before is still there, with
	// its outcome.
	var old, now []map[string]any
	json.Unmarshal([]byte(history), &old)
	json.Unmarshal([]byte(run("auditor", "audit", "list", "--json")), &now)
	outcome := map[any]any{}
	for _, r := range now {
		outcome[r["id"]] = r["outcome"]
	}
	for _, r := range old {
		if r["outcome"] != "PENDING" && outcome[r["id"]] != r["outcome"] {
			t.Errorf("invocation %v: %v after the restart, %v before", r["id"], outcome[r["id"]], r["outcome"])
		}
	}
	if len(old) == 0 || len(now) <= len(old) {
		t.Errorf("%d invocations recorded before the restart, %d after", len(old), len(now))
	}
}

// jetStreamAs is JetStream on the bus at url as the member whose seed
// file is seed, closed when the test ends.
func jetStreamAs(t *testing.T, seed, url string) jetstream.JetStream {
	t.Helper()
	_, opts, err := identity.Connect(seed)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
