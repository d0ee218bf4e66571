package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/audittest"
	"github.com/toolbus/toolbus/internal/testkit/bustest"
	"github.com/toolbus/toolbus/internal/testkit/registrytest"
)

// peakRSS is the most resident memory process pid has had, in bytes
// (VmHWM, which the kernel keeps for it).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM line %q: %v", line, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// allowAll is a policy directory that allows every call, so a shell
// command runs without an approver.
func allowAll(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "allow.rego"), []byte("package toolbus\n\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"this test allows every call\"}\n"), 0o644)
	return dir
}

// TestShellFloodStaysSmall runs the executor binary against a bus in this
// process and has a command print 300 MB: the executor's peak resident
// memory stays far below the output (it held 790 MB before output was
// spooled), the result is capped with a note, and the object store holds
// all 300 MB.
func TestShellFloodStaysSmall(t *testing.T) {
	b := bustest.Start(t, "")
	registrytest.Start(t, b)
	execd := startDaemon(t, "executor", "--nats", b.URL(), "--workspace", t.TempDir(), "--policy", allowAll(t),
		"--id", "executor@flood", "--max-output", "512MiB")
	client := invoke.NewClient(bustest.Connect(t, b).Conn(), events.Identity{ID: "agent:flood"}, "")
	defer client.Close()
	call := func(id, line string) *events.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		args, _ := json.Marshal(map[string]string{"command": line})
		res, err := client.Invoke(ctx, &events.Invocation{Header: events.Header{ID: id}, Tool: "run_shell_command", Args: args}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var ready *events.Result
	if !testkit.Poll(30*time.Second, func() bool {
		ready = call("", "echo ready")
		return ready.Error == nil
	}) {
		t.Fatalf("the executor never ran a command: %s %s\n%s", ready.Error.Type, ready.LLMContent, execd.output.String())
	}
	before := peakRSS(t, execd.cmd.Process.Pid)

	res := call("flood-300mb", `head -c 300000000 /dev/zero | tr '\0' x`)
	peak := peakRSS(t, execd.cmd.Process.Pid)
	t.Logf("executor peak resident memory: %d MB before the call, %d MB after", before>>20, peak>>20)
	if peak > 150<<20 {
		t.Errorf("the executor peaked at %d MB of resident memory for a 300 MB output, want under 150 MB", peak>>20)
	}
	if res.Error != nil {
		t.Fatalf("%s %s", res.Error.Type, res.LLMContent)
	}
	if !res.Truncated || len(res.LLMContent) > 41000 || res.OutputRef != events.OutputBucket+"/flood-300mb" ||
		!strings.Contains(res.LLMContent, "The whole output is in the object store at TOOLBUS_OUTPUTS/flood-300mb") {
		t.Errorf("result not capped as it should be: truncated=%v ref=%q, %d bytes, tail %q", res.Truncated, res.OutputRef, len(res.LLMContent), res.LLMContent[max(0, len(res.LLMContent)-300):])
	}
	obs, err := b.JetStream().ObjectStore(context.Background(), events.OutputBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(context.Background(), "flood-300mb")
	if err != nil || info.Size < 300000000 || info.Size > 300000000+1000 {
		t.Errorf("the object store holds %v bytes (%v), want the 300 MB and the command's report", info, err)
	}
	execd.stop(t)
}

// TestParallelLargeReadsFromTheCommandLine: 64 `toolbus call read_file`
// processes read a 20 MB file at once through `toolbus up`; each gets
// its result, and the audit stream holds exactly one terminal result for
// each invocation. With the default 1 GiB output store, the store fills
// up on the way: the later results say their whole output was not kept.
func TestParallelLargeReadsFromTheCommandLine(t *testing.T) {
	testkit.Heavy(t, "a flood of 64 outputs of 20 MB")
	ws := t.TempDir()
	line := strings.Repeat("b", 9999) + "\n"
	os.WriteFile(filepath.Join(ws, "big.txt"), []byte(strings.Repeat(line, 2000)), 0o644) // 20,000,000 bytes
	data := t.TempDir()
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", data, "--workspace", ws)
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")

	const calls = 64
	type outcome struct {
		res    events.Result
		stderr string
		err    error
	}
	outcomes := make([]outcome, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			cmd := exec.Command(bin("toolbus"), "call", "read_file", "--json", "--id", fmt.Sprintf("cli-read-%d", i), "--args", `{"file_path":"big.txt"}`, "--nats", url)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			o := &outcomes[i]
			if o.err = cmd.Run(); o.err == nil {
				o.err = json.Unmarshal(stdout.Bytes(), &o.res)
			}
			o.stderr = stderr.String()
		})
	}
	wg.Wait()
	kept := 0
	for i, o := range outcomes {
		switch {
		case o.err != nil:
			t.Errorf("call %d: %v; stderr %q", i, o.err, o.stderr)
		case o.res.Error != nil || !o.res.Truncated:
			t.Errorf("call %d: error %+v, truncated %v", i, o.res.Error, o.res.Truncated)
		case o.res.OutputRef != "":
			kept++
		case !strings.Contains(o.res.LLMContent, "The whole output could not be kept"):
			t.Errorf("call %d: neither kept nor saying why not: %q", i, o.res.LLMContent[max(0, len(o.res.LLMContent)-300):])
		}
	}
	t.Logf("%d of %d whole outputs kept in the 1 GiB object store", kept, calls)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// As up's developer: a client with no identity is its agent, who
	// may not read the audit stream.
	conn, err := bus.Connect(ctx, bus.Config{URL: url, Name: "audit-reader", Logger: bustest.Quiet(), NkeyFile: filepath.Join(data, "identities", "developer.nk")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ids := make([]string, calls)
	for i := range ids {
		ids[i] = fmt.Sprintf("cli-read-%d", i)
	}
	counts := audittest.ResultsOf(t, conn.JetStream(), ids)
	for _, id := range ids {
		if c := counts[id]; c == nil || c.Terminal != 1 || c.Late != 0 {
			t.Errorf("%s: %+v results in the audit stream, want exactly one terminal", id, c)
		}
	}
	up.stop(t)
}

// A result cut to the output limit says where its whole is, and `toolbus
// output` writes it whole, to the caller that made the call alone.
func TestOutputCommandWritesTheWhole(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	// Long lines: read_file stops at 2,000 lines, and this is cut at the
	// output limit (40,000 characters) instead.
	big := strings.Repeat(strings.Repeat("x", 1900)+"\n", 42)
	os.WriteFile(filepath.Join(ws, "big.log"), []byte(big), 0o644)
	up := startDaemon(t, "toolbus", "up", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--workspace", ws, "--console", "off", "--mcp-listen", "off")
	url := busURL(t, up.waitLine(t, "bus:"))
	up.waitLine(t, "Press Ctrl-C to stop.")
	out, errOut, code := toolbus(t, "call", "read_file", "--id", "read-big", "--args", `{"file_path":"big.log"}`, "--nats", url)
	if code != 0 || !strings.Contains(out, "`toolbus output read-big` writes it") {
		t.Fatalf("a large read: exit %d %s; stdout ends %q", code, errOut, out[max(0, len(out)-300):])
	}
	whole, errOut, code := toolbus(t, "output", "read-big", "--nats", url)
	if code != 0 || whole != big {
		t.Errorf("toolbus output: exit %d %s; %d bytes, want %d", code, errOut, len(whole), len(big))
	}
	path := filepath.Join(t.TempDir(), "copy.log")
	if _, errOut, code := toolbus(t, "output", "read-big", "--out", path, "--nats", url); code != 0 {
		t.Errorf("toolbus output --out: exit %d %s", code, errOut)
	} else if data, _ := os.ReadFile(path); string(data) != big {
		t.Errorf("--out wrote %d bytes, want %d", len(data), len(big))
	}
	if _, errOut, code := toolbus(t, "output", "never-made", "--nats", url); code != 1 || !strings.Contains(errOut, "no stored output named never-made") {
		t.Errorf("an output that is not there: exit %d %s", code, errOut)
	}
}
