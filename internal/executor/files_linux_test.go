package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/hooks"
	"github.com/toolbus/toolbus/internal/policy"
)

// swapper exchanges race.txt, a plain file, and swap.tmp, a symbolic link
// to .env, as fast as it can (renameat2 RENAME_EXCHANGE: each name always
// exists), until the test ends.
func swapper(t *testing.T, root string) {
	t.Helper()
	os.WriteFile(filepath.Join(root, ".env"), []byte("SECRET=swapped\n"), 0o600)
	os.WriteFile(filepath.Join(root, "race.txt"), []byte("plain\n"), 0o644)
	os.Symlink(".env", filepath.Join(root, "swap.tmp"))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var swaps atomic.Int64
	go func() {
		defer wg.Done()
		a, b := filepath.Join(root, "race.txt"), filepath.Join(root, "swap.tmp")
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("swap: %v", err)
				return
			}
			swaps.Add(1)
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		t.Logf("%d swaps", swaps.Load())
	})
}

// raceCounts are the outcomes of calls made while swapper runs.
type raceCounts struct {
	secret, denied, refusedAtOpen, plain, other int
}

// raceCalls makes n calls of tool with args, 8 at a time, and counts their
// outcomes: denied counts the policy's refusals (it was shown the link),
// refusedAtOpen the results that say a file changed after the policy
// judged it.
func raceCalls(t *testing.T, e *env, tool, args string, n int) raceCounts {
	t.Helper()
	var mu sync.Mutex
	var c raceCounts
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				res := e.call(t, tool, args)
				mu.Lock()
				switch {
				case strings.Contains(res.LLMContent, "SECRET=swapped"):
					c.secret++
				case errType(res) == events.ErrPolicyDenied && strings.Contains(res.LLMContent, "sensitive path"),
					strings.Contains(res.LLMContent, "skipped: the policy does not allow"):
					c.denied++
				case strings.Contains(res.LLMContent, "changed after the policy judged"):
					c.refusedAtOpen++
				case res.Error == nil && strings.Contains(res.LLMContent, "plain"):
					c.plain++
				default:
					c.other++
					if c.other <= 3 {
						t.Logf("%s: another outcome: %s %q", tool, errType(res), res.LLMContent)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return c
}

// TestSwapRaceNeverReadsTheSecret: while another process turns race.txt
// into a link to .env and back as fast as it can, no read of race.txt
// returns the secret, whichever tool reads it: a name judged as a plain
// file and opened as the link is refused at the open. The refusals and
// the plain reads show the race was run (how many are refused at the open
// rather than by the policy depends on the machine's timing; the tests
// below hold the open's check to each change alone).
func TestSwapRaceNeverReadsTheSecret(t *testing.T) {
	for _, c := range []struct {
		tool, args string
		n          int
	}{
		{"read_file", `{"file_path":"race.txt"}`, 3000},
		{"read_many_files", `{"paths":["race.*"]}`, 500},
		{"search_file_content", `{"pattern":"swapped|plain","include":"race.*"}`, 500},
	} {
		t.Run(c.tool, func(t *testing.T) {
			e := newEnv(t)
			swapper(t, e.ws.Root())
			got := raceCalls(t, e, c.tool, c.args, c.n)
			t.Logf("%d calls: %d returned the secret, %d refused by the policy, %d refused at the open, %d read the plain file, %d other",
				c.n, got.secret, got.denied, got.refusedAtOpen, got.plain, got.other)
			if got.secret > 0 {
				t.Errorf("%d of %d calls returned the secret", got.secret, c.n)
			}
			if got.denied+got.refusedAtOpen == 0 || got.plain == 0 {
				t.Errorf("the race was not run: no call was refused, or none read the plain file")
			}
		})
	}
}

// TestSwapRaceNeverShowsTheSecretInADiff: the current content an edit's
// diff shows the approver is read under the same check as the tool's own
// reads.
func TestSwapRaceNeverShowsTheSecretInADiff(t *testing.T) {
	e := newEnv(t)
	var diffs, leaks atomic.Int64
	a := startApprover(t, e.bus, func(req *events.ConfirmRequest) *events.ConfirmAnswer {
		diffs.Add(1)
		if strings.Contains(req.Diff, "SECRET=swapped") {
			leaks.Add(1)
		}
		return &events.ConfirmAnswer{Outcome: events.Cancel}
	})
	done := make(chan struct{})
	var drained sync.WaitGroup
	drained.Go(func() {
		for {
			select {
			case <-a.requests:
			case <-done:
				return
			}
		}
	})
	defer func() {
		close(done)
		drained.Wait()
	}()
	swapper(t, e.ws.Root())
	got := raceCalls(t, e, "write_file", `{"file_path":"race.txt","content":"new\n"}`, 500)
	t.Logf("500 calls: %d diffs shown, %d with the secret; %d refused by the policy", diffs.Load(), leaks.Load(), got.denied)
	if leaks.Load() > 0 {
		t.Errorf("%d of %d diffs showed the secret", leaks.Load(), diffs.Load())
	}
	if diffs.Load() == 0 || got.denied == 0 {
		t.Error("the race was not run: no diff was shown, or the policy refused none")
	}
}

// keyOutside makes a key file outside the workspace.
func keyOutside(t *testing.T) string {
	t.Helper()
	key := filepath.Join(t.TempDir(), "id_ed25519")
	os.WriteFile(key, []byte("PRIVATE KEY\n"), 0o600)
	return key
}

// linkedKey makes a key file outside the workspace and a hard link to it
// inside, k.txt.
func linkedKey(t *testing.T, root string) {
	t.Helper()
	if err := os.Link(keyOutside(t), filepath.Join(root, "k.txt")); err != nil {
		t.Fatalf("a hard link from the workspace to another temporary directory: %v", err)
	}
}

// TestHardLinkToAKeyIsAskedAbout: a file in the workspace with another
// name elsewhere could be any file; read_file asks the user about it (no
// approver is connected here, so it is denied), a remembered approval of
// read_file does not cover it, and tools that pick their own files skip
// it.
func TestHardLinkToAKeyIsAskedAbout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	waitTool(t, e.exec, "read_file")
	root := e.ws.Root()
	linkedKey(t, root)
	res := e.call(t, "read_file", `{"file_path":"k.txt"}`)
	if errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "k.txt has other names") || strings.Contains(res.LLMContent, "PRIVATE") {
		t.Errorf("read_file k.txt: %s %q", errType(res), res.LLMContent)
	}
	rf, _ := e.exec.Catalog().GetTool("read_file")
	if err := e.exec.allowlist.add(context.Background(), []events.AllowRecord{{AllowEntry: policy.AllowEntry{Scope: "tool", Tool: rf.Name}}}); err != nil {
		t.Fatal(err)
	}
	if len(e.exec.allowlist.entriesFor(rf.Name, rf.Source, rf.Server)) == 0 {
		t.Fatal("the approval is not remembered")
	}
	res = e.call(t, "read_file", `{"file_path":"k.txt"}`)
	if errType(res) != events.ErrPolicyDenied || strings.Contains(res.LLMContent, "PRIVATE") {
		t.Errorf("read_file k.txt with read_file remembered: %s %q", errType(res), res.LLMContent)
	}
	if res := e.call(t, "read_file", `{"file_path":"README.md"}`); res.Error != nil {
		t.Errorf("a file with one name: %s %q", errType(res), res.LLMContent)
	}
	for _, c := range []struct{ tool, args string }{
		{"read_many_files", `{"paths":["*.txt"]}`},
		{"search_file_content", `{"pattern":"KEY"}`},
	} {
		res := e.call(t, c.tool, c.args)
		if strings.Contains(res.LLMContent, "PRIVATE") || !strings.Contains(res.LLMContent, "1 file(s) skipped") {
			t.Errorf("%s: %s %q", c.tool, errType(res), res.LLMContent)
		}
	}
	// A shell command remembered by a person is no cover either: cat of
	// a plain file runs unattended, cat of the hard link is asked about.
	a := startApprover(t, e.bus, answer(events.ProceedAlways))
	if res := e.call(t, "run_shell_command", shellArgs("cat README.md")); res.Error != nil {
		t.Fatalf("approving cat README.md: %s %q", errType(res), res.LLMContent)
	}
	a.stop()
	if res := e.call(t, "run_shell_command", shellArgs("cat README.md")); res.Error != nil {
		t.Errorf("cat README.md, remembered: %s %q", errType(res), res.LLMContent)
	}
	res = e.call(t, "run_shell_command", shellArgs("cat k.txt"))
	if errType(res) != events.ErrPolicyDenied || strings.Contains(res.LLMContent, "PRIVATE") {
		t.Errorf("cat k.txt with cat remembered: %s %q", errType(res), res.LLMContent)
	}
}

// changes is what a test does to the file system between the policy's
// decision and the tool's open (set between calls: the hook runs on the
// executor's goroutines).
type changes struct {
	mu     sync.Mutex
	change func() error
}

func (c *changes) set(change func() error) {
	c.mu.Lock()
	c.change = change
	c.mu.Unlock()
}

// betweenCheckAndOpen is a pre hook that makes the change set in c on the
// calls of the tools named: after the policy's decision, before the tool
// opens its file, the window a racing process would use, without the
// race.
func betweenCheckAndOpen(c *changes, tools ...string) option {
	return func(cfg *Config) {
		cfg.Hooks = hooks.Merge(cfg.Hooks, &hooks.Set{Pre: []hooks.Group{{Hooks: []*hooks.Hook{{Name: "between check and open",
			Func: func(_ context.Context, in *hooks.Input) hooks.Outcome {
				if !slices.Contains(tools, in.Tool.Name) {
					return hooks.Outcome{}
				}
				c.mu.Lock()
				defer c.mu.Unlock()
				if c.change == nil {
					return hooks.Outcome{}
				}
				if err := c.change(); err != nil {
					return hooks.Outcome{Failure: fmt.Sprintf("the test's change: %v", err)}
				}
				return hooks.Outcome{}
			}}}}}})
	}
}

// TestFilesChangedAfterTheDecisionAreRefused: a file the policy judged
// with one name and hard-linked before the open is refused at the open,
// as is a name replaced by a hard link to a key; nothing of either file
// reaches the result.
func TestFilesChangedAfterTheDecisionAreRefused(t *testing.T) {
	t.Parallel()
	var step changes
	e := newEnv(t, betweenCheckAndOpen(&step, "read_file"))
	root := e.ws.Root()
	key := keyOutside(t)
	twin := filepath.Join(t.TempDir(), "twin")
	for _, c := range []struct {
		name   string
		change func() error
		says   string
	}{
		{"hard-linked since", func() error { return os.Link(filepath.Join(root, "late.txt"), twin) }, "has 2 names now"},
		{"replaced by a hard link", func() error {
			os.Remove(filepath.Join(root, "late.txt"))
			return os.Link(key, filepath.Join(root, "late.txt"))
		}, "not the file the policy was shown"},
	} {
		os.Remove(twin)
		os.Remove(filepath.Join(root, "late.txt"))
		os.WriteFile(filepath.Join(root, "late.txt"), []byte("late plain\n"), 0o644)
		step.set(c.change)
		res := e.call(t, "read_file", `{"file_path":"late.txt"}`)
		if errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, c.says) || strings.Contains(res.LLMContent, "late plain") || strings.Contains(res.LLMContent, "PRIVATE") {
			t.Errorf("%s: %s %q", c.name, errType(res), res.LLMContent)
		}
	}
}

// TestWritesDoNotFollowANameChangedAfterTheDecision: write_file and
// replace, approved for a plain file, refuse it once it became a hard
// link to a file outside the workspace or a symbolic link to another file
// (outside, or .env inside), and leave that file as it was; a new file
// whose directory became a link is not created where it leads.
func TestWritesDoNotFollowANameChangedAfterTheDecision(t *testing.T) {
	t.Parallel()
	var change changes
	e := newEnv(t, betweenCheckAndOpen(&change, "write_file", "replace"))
	startApprover(t, e.bus, answer(events.ProceedOnce))
	root := e.ws.Root()
	outside := t.TempDir()
	target := filepath.Join(outside, "authorized_keys")
	env := filepath.Join(root, ".env")
	name := filepath.Join(root, "notes.txt")
	swapTo := func(link func(string, string) error, to string) func() error {
		return func() error {
			os.Remove(name)
			return link(to, name)
		}
	}
	for _, c := range []struct {
		name, victim string
		change       func() error
	}{
		{"hard link out", target, swapTo(os.Link, target)},
		{"symbolic link out", target, swapTo(os.Symlink, target)},
		{"symbolic link to .env", env, swapTo(os.Symlink, ".env")},
	} {
		for _, call := range []struct{ tool, args string }{
			{"write_file", `{"file_path":"notes.txt","content":"pwned\n"}`},
			{"replace", `{"file_path":"notes.txt","old_string":"original","new_string":"pwned"}`},
		} {
			os.WriteFile(target, []byte("original key\n"), 0o600)
			os.WriteFile(env, []byte("original secret\n"), 0o600)
			os.Remove(name)
			os.WriteFile(name, []byte("original notes\n"), 0o644)
			change.set(c.change)
			res := e.call(t, call.tool, call.args)
			if res.Error == nil {
				t.Errorf("%s, %s: succeeded: %q", c.name, call.tool, res.LLMContent)
			}
			if data, _ := os.ReadFile(c.victim); strings.Contains(string(data), "pwned") {
				t.Errorf("%s, %s: %s was written: %q", c.name, call.tool, c.victim, data)
			}
			if strings.Contains(res.LLMContent, "original") {
				t.Errorf("%s, %s: the result shows the file: %q", c.name, call.tool, res.LLMContent)
			}
		}
	}
	// A new file, in a directory that becomes a link to another one.
	os.MkdirAll(filepath.Join(root, "sub"), 0o755)
	os.MkdirAll(filepath.Join(root, "private"), 0o755)
	change.set(func() error {
		if err := os.Rename(filepath.Join(root, "sub"), filepath.Join(root, "sub.old")); err != nil {
			return err
		}
		return os.Symlink("private", filepath.Join(root, "sub"))
	})
	res := e.call(t, "write_file", `{"file_path":"sub/new.txt","content":"pwned\n"}`)
	if errType(res) != events.ErrPolicyDenied || !strings.Contains(res.LLMContent, "which the policy was not shown") {
		t.Errorf("new file through a swapped directory: %s %q", errType(res), res.LLMContent)
	}
	if _, err := os.Lstat(filepath.Join(root, "private", "new.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("private/new.txt was created: %v", err)
	}
	// Unchanged names are written as before.
	change.set(nil)
	os.Remove(name)
	os.WriteFile(name, []byte("original notes\n"), 0o644)
	for _, call := range []struct{ tool, args, want string }{
		{"write_file", `{"file_path":"notes.txt","content":"v2\n"}`, "v2\n"},
		{"replace", `{"file_path":"notes.txt","old_string":"v2","new_string":"v3"}`, "v3\n"},
		{"write_file", `{"file_path":"fresh/dir/new.txt","content":"new\n"}`, ""},
	} {
		if res := e.call(t, call.tool, call.args); res.Error != nil {
			t.Errorf("%s %s: %s %q", call.tool, call.args, errType(res), res.LLMContent)
		}
		if data, _ := os.ReadFile(name); call.want != "" && string(data) != call.want {
			t.Errorf("%s: notes.txt holds %q, want %q", call.tool, data, call.want)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(root, "fresh", "dir", "new.txt")); string(data) != "new\n" {
		t.Errorf("fresh/dir/new.txt holds %q", data)
	}
}
