package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/tool"
)

// trailCrowd is how many agents fill the trail together in
// trailHeldOnFleet: each may record a quarter of the cap across the
// fleet's two executors, so four at their whole share reach the cap; the
// rest is slack for what the stream holds beside their calls.
const trailCrowd = 6

// callIn makes a call as member as in workspace ws of f, and returns its
// stdout, stderr and exit code.
func (f *localFleet) callIn(t *testing.T, as, ws, toolName string, args any, more ...string) (string, string, int) {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return toolbusWith(t, f.as(as), append([]string{"call", toolName, "--workspace", ws, "--timeout", "2m", "--args", string(raw), "--nats", f.urls()}, more...)...)
}

// spoolWatchedOnFleet: mallory's confined background command
// (testdata/tmpwatch) watches every temp dir a tool process may write,
// and the workspace, with inotify, opening each file made there at once,
// while the agent's shell line prints 8 MB, which the executor spools
// past its first 256 KiB. The watcher sees no file holding the agent's
// output, and no spool's name: the spool has none (O_TMPFILE, else a
// memfd). Were it a named file in the temp dir, even one unlinked at
// once, the watcher would hear its name (toolbus-output-…) in an
// IN_CREATE event, and often open it before the unlink and read the
// agent's output; a named file made in the temp dir while it watches (the
// control, holding the marker) shows it can.
func spoolWatchedOnFleet(t *testing.T, f *localFleet) {
	ws1 := filepath.Join(f.dir, "ws1")
	build := exec.Command("go", "build", "-o", filepath.Join(ws1, "tmpwatch"), "./testdata/tmpwatch")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build tmpwatch: %v\n%s", err, out)
	}
	marker := fmt.Sprintf("spooled-output-%016x", rand.Uint64())
	var dirs []string
	for _, d := range []string{"/tmp", os.TempDir(), "/var/tmp", "/dev/shm", ws1} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	report, stop := filepath.Join(ws1, "tmpwatch-report.txt"), filepath.Join(ws1, "tmpwatch-stop")
	defer answeringApprover(t, f.as("approver"), f.urls())()
	watch := fmt.Sprintf(`exec ./tmpwatch -marker %s -stop tmpwatch-stop -report tmpwatch-report.txt -for 5m %s "${TMPDIR:-/tmp}"`, marker, strings.Join(dirs, " "))
	out, errOut, code := f.callIn(t, "mallory", "one", "run_shell_command", map[string]any{"command": watch, "run_in_background": true})
	m := regexp.MustCompile(`shell_id (\S+)`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("mallory's watcher: exit %d %s %s", code, out, errOut)
	}
	watcher := m[1]
	// What the watcher printed, should it say nothing in its report.
	said := func() string {
		out, errOut, _ := f.callIn(t, "mallory", "one", "shell_output", map[string]string{"shell_id": watcher})
		return out + errOut
	}
	defer f.callIn(t, "mallory", "one", "kill_shell", map[string]string{"shell_id": watcher})
	var got []byte
	if !testkit.Poll(time.Minute, func() bool {
		got, _ = os.ReadFile(report)
		return strings.HasPrefix(string(got), "watching ")
	}) {
		t.Fatalf("mallory's watcher is not watching after a minute: %q; it said: %s", got, said())
	}
	// The controls: named files made in the temp dirs while it watches,
	// holding the marker, as the spool's file was named in $TMPDIR. The
	// watcher hears each name; it may open and read the one in /var/tmp,
	// a temp dir granted whole. (The one in $TMPDIR it may not open here:
	// the fleet's data dir is in it too, so that $TMPDIR is granted only
	// entry by entry, as its entries were when the shell started.)
	var controls []string
	for _, d := range []string{os.TempDir(), "/var/tmp"} {
		if !slices.Contains(dirs, d) {
			continue
		}
		control, err := os.CreateTemp(d, "tmpwatch-control-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(control.Name())
		control.WriteString(marker + "\n")
		control.Close()
		controls = append(controls, control.Name())
	}

	// The command does not hold the marker, so that only its output
	// does.
	half := len(marker) / 2
	line := fmt.Sprintf(`yes "$(printf '%%s%%s' '%s' '%s')" | head -c 8000000`, marker[:half], marker[half:])
	out, errOut, code = f.callIn(t, "agent", "one", "run_shell_command", map[string]string{"command": line})
	if code != 0 || !strings.Contains(out, marker) {
		t.Fatalf("the agent's large output: exit %d %.2000s %s", code, out, errOut)
	}
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if !testkit.Poll(time.Minute, func() bool {
		got, _ = os.ReadFile(report)
		return strings.HasSuffix(string(got), "\ndone\n")
	}) {
		t.Fatalf("mallory's watcher did not end a minute after it was told to: %q; it said: %s", got, said())
	}
	sawControl := map[string]string{}
	var others []string
	for _, l := range strings.Split(strings.TrimSpace(string(got)), "\n") {
		path, what, ok := strings.Cut(strings.TrimPrefix(l, "new "), ": ")
		if !ok || !strings.HasPrefix(l, "new ") {
			continue
		}
		name := filepath.Base(path)
		switch {
		case slices.Contains(controls, path):
			sawControl[path] = what
		case strings.HasPrefix(name, "tmpwatch"):
			// The watcher's own, and the test's stop file.
		case strings.HasPrefix(name, tool.SpoolFilePrefix) || strings.Contains(what, "marker yes"):
			t.Errorf("mallory's watcher saw the agent's spooled output: %s", l)
		default:
			others = append(others, l)
		}
	}
	for _, c := range controls {
		what, seen := sawControl[c]
		if !seen || (strings.HasPrefix(c, "/var/tmp/") && !strings.Contains(what, "marker yes")) {
			t.Errorf("the watcher did not see (or, in /var/tmp, read) the named control file %s: it would miss a named spool too\n%s", c, got)
		}
		t.Logf("the control %s: %s", c, what)
	}
	// Other processes of the host make names in /tmp meanwhile: not the
	// agent's output, which no line holds.
	t.Logf("mallory's watcher saw, besides its own and the control: %d names %q", len(others), others)
}

// trailHeldOnFleet: the admin lowers the trail's cap to twice what it
// holds and 4 MiB more, so that what it holds and one agent's share (a
// quarter of the cap) stay short of the high-water mark. The agent's call is in the trail; mallory floods calls
// of large, distinct arguments (each past 16 KiB, kept in TOOLBUS_BLOBS)
// until it is refused RATE_LIMITED, its share of the trail spent: the
// agent's record is where it was, byte for byte, and nothing was evicted.
// Then trailCrowd agents together push the trail to its high-water mark:
// calls are refused AUDIT_FULL, unrecorded, and the executors say so in
// their metrics and /readyz. Once the admin raises the cap again, calls
// run.
func trailHeldOnFleet(t *testing.T, f *localFleet) {
	js := jetStreamAs(t, f.seed("admin"), f.urls())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	stream := func(name string) jetstream.Stream {
		t.Helper()
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		return s
	}
	info := func(name string) *jetstream.StreamInfo { t.Helper(); return stream(name).CachedInfo() }
	// fill is the fuller stream's bytes over its cap.
	fill := func() float64 {
		t.Helper()
		var most float64
		for _, name := range []string{events.AuditStream, events.BlobStream} {
			in := info(name)
			most = max(most, float64(in.State.Bytes)/float64(in.Config.MaxBytes))
		}
		return most
	}
	auditInit := func(maxBytes int64) {
		t.Helper()
		out, errOut, code := toolbusWith(t, f.as("admin"), "audit", "init", "--max-bytes", strconv.FormatInt(maxBytes, 10), "--nats", f.urls())
		if code != 0 {
			t.Fatalf("audit init --max-bytes %d: exit %d %s %s", maxBytes, code, out, errOut)
		}
		for _, name := range []string{events.AuditStream, events.BlobStream} {
			c := info(name).Config
			if c.MaxBytes != maxBytes || c.Replicas != 3 || c.Discard != jetstream.DiscardNew {
				t.Fatalf("%s after audit init --max-bytes %d: cap %d, %d copies, discard %v", name, maxBytes, c.MaxBytes, c.Replicas, c.Discard)
			}
		}
	}
	executors := []int{f.metricsPort + 4, f.metricsPort + 5}
	metric := func(port int, name string) float64 {
		t.Helper()
		_, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		for _, l := range strings.Split(body, "\n") {
			if fields := strings.Fields(l); len(fields) == 2 && fields[0] == name {
				v, _ := strconv.ParseFloat(fields[1], 64)
				return v
			}
		}
		t.Fatalf("no %s in the metrics on :%d", name, port)
		return 0
	}

	// The calls run again once the loop guard's subtest gave the fleet
	// its own policy back.
	evidenceID := ""
	if !testkit.Poll(time.Minute, func() bool {
		id := fmt.Sprintf("evidence-%d", time.Now().UnixNano())
		_, _, code := f.callIn(t, "agent", "one", "read_file", map[string]string{"file_path": "README.md"}, "--id", id)
		if code == 0 {
			evidenceID = id
		}
		return code == 0
	}) {
		t.Fatal("the agent's calls do not run")
	}
	rec, err := stream(events.AuditStream).GetLastMsgForSubject(ctx, events.SubjectInvoke+".agent")
	if err != nil || !strings.Contains(string(rec.Data), evidenceID) {
		t.Fatalf("the agent's call %s is not the last in the trail: %v", evidenceID, err)
	}

	before := info(events.AuditStream)
	was := before.Config.MaxBytes
	held := max(before.State.Bytes, info(events.BlobStream).State.Bytes)
	capped := int64(2*held) + 4<<20
	auditInit(capped)
	// Raised again however this ends: the fleet refuses calls until then.
	raised := false
	defer func() {
		if !raised {
			auditInit(was)
		}
	}()
	t.Logf("the trail holds %d bytes (%d records from #%d); its cap lowered from %d to %d", held, before.State.Msgs, before.State.FirstSeq, was, capped)
	// The executors follow the cap: the fill they show is against it.
	testkit.EventuallyWithin(t, 30*time.Second, "the executors follow the lowered cap", func() bool {
		for _, p := range executors {
			if metric(p, "toolbus_audit_trail_fill") < 0.9*float64(held)/float64(capped) {
				return false
			}
		}
		return true
	})
	// intact fails the test unless the agent's record is where it was,
	// byte for byte, and the trail's first record is too.
	intact := func(after string) {
		t.Helper()
		got, err := stream(events.AuditStream).GetMsg(ctx, rec.Sequence)
		if err != nil || string(got.Data) != string(rec.Data) {
			t.Errorf("the agent's record #%d after %s: %v", rec.Sequence, after, err)
		}
		if first := info(events.AuditStream).State.FirstSeq; first != before.State.FirstSeq {
			t.Errorf("the trail's first record was #%d, and is #%d after %s: records were evicted", before.State.FirstSeq, first, after)
		}
	}
	// glob calls of 32 KiB patterns, each distinct: its invocation and
	// its result each outlined into TOOLBUS_BLOBS.
	pad := strings.Repeat("x", 32<<10)
	flood := func(as, ws string, i int) (string, int) {
		_, errOut, code := f.callIn(t, as, ws, "glob", map[string]string{"pattern": fmt.Sprintf("%s-%d-%d-%s", as, i, time.Now().UnixNano(), pad)})
		return errOut, code
	}

	limited, ran := 0, 0
	for i := 0; i < 200 && limited == 0; i++ {
		switch errOut, code := flood("mallory", "one", i); {
		case strings.Contains(errOut, string(events.ErrRateLimited)):
			limited++
		case code == 0 || strings.Contains(errOut, string(events.ErrInvalidParams)):
			ran++
		default:
			t.Fatalf("mallory's call %d: exit %d %s", i, code, errOut)
		}
	}
	t.Logf("mallory ran %d calls of 32 KiB before it was refused; the trail is %.0f%% full", ran, fill()*100)
	if limited == 0 {
		t.Fatalf("mallory's 200 calls of 32 KiB into a trail of %d bytes: none refused RATE_LIMITED", capped)
	}
	if got := fill(); got >= 0.9 {
		t.Errorf("one principal's flood filled the trail to %.0f%%", got*100)
	}
	intact("mallory's flood")

	// The crowd floods until the trail is at its high-water mark, as the
	// admin sees it after each call (so that it stops within one call
	// of it, well short of the cap itself), or is refused before.
	full, refused := -1, false
	for i := 0; i < 1000 && full < 0; i++ {
		as, ws := fmt.Sprintf("crowd%d", i%trailCrowd+1), []string{"one", "two"}[i/trailCrowd%2]
		switch errOut, code := flood(as, ws, i); {
		case strings.Contains(errOut, string(events.ErrAuditFull)):
			full, refused = i, true
		case code == 0 || strings.Contains(errOut, string(events.ErrInvalidParams)) || strings.Contains(errOut, string(events.ErrRateLimited)):
			if fill() >= 0.9 {
				full = i
			}
		default:
			t.Fatalf("%s's call %d in workspace %s: exit %d %s", as, i, ws, code, errOut)
		}
	}
	if full < 0 {
		t.Fatalf("1000 calls of %d agents into a trail of %d bytes: it is %.0f%% full", trailCrowd, capped, fill()*100)
	}
	t.Logf("after the crowd's %d calls (the last refused AUDIT_FULL: %v) the trail is %.1f%% full", full+1, refused, fill()*100)
	// Every executor sees it within a second, and refuses every call.
	for _, p := range executors {
		var fillSeen float64
		if !testkit.Poll(30*time.Second, func() bool {
			fillSeen = metric(p, "toolbus_audit_trail_fill")
			return fillSeen >= 0.9
		}) {
			t.Errorf("the executor on :%d shows toolbus_audit_trail_fill %g near the cap", p, fillSeen)
		}
	}
	for _, ws := range []string{"one", "two"} {
		out, errOut, code := f.callIn(t, "latecomer", ws, "read_file", map[string]string{"file_path": "README.md"})
		if code == 0 || !strings.Contains(errOut, string(events.ErrAuditFull)) || !strings.Contains(errOut, "not run") {
			t.Errorf("a call of an agent that recorded nothing, in workspace %s, near the cap: exit %d %s %s", ws, code, out, errOut)
		}
		t.Logf("the latecomer's call in workspace %s: %s", ws, strings.TrimSpace(errOut))
	}
	if _, err := stream(events.AuditStream).GetLastMsgForSubject(ctx, events.SubjectInvoke+".latecomer"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a call refused AUDIT_FULL was recorded: %v", err)
	}
	intact("the crowd's flood")
	refusals := 0.0
	for _, p := range executors {
		refusals += metric(p, "toolbus_audit_full_refusals_total")
		if code, body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", p)); code == 200 || !strings.Contains(body, "audit") {
			t.Errorf("the executor on :%d is ready near the cap: %d %s", p, code, body)
		}
	}

	if refusals < 2 {
		t.Errorf("the executors count %g refusals near the cap, want at least the latecomer's 2", refusals)
	}

	auditInit(was)
	raised = true
	for _, ws := range []string{"one", "two"} {
		var out, errOut string
		var code int
		if !testkit.Poll(30*time.Second, func() bool {
			out, errOut, code = f.callIn(t, "latecomer", ws, "read_file", map[string]string{"file_path": "README.md"})
			return code == 0
		}) {
			t.Errorf("a call in workspace %s once the cap is raised: exit %d %s %s", ws, code, out, errOut)
		}
	}
	for _, p := range executors {
		if !testkit.Poll(30*time.Second, func() bool {
			code, _ := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/readyz", p))
			return code == 200
		}) {
			t.Errorf("the executor on :%d is not ready once the cap is raised", p)
		}
	}
}
