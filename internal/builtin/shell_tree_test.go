//go:build linux

package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/tool"
)

// Processes that outlive bash and leave its process group, each writing its
// pid to left.pid before it sleeps. Their output goes elsewhere unless the
// case says so, so that a call can end while they live.
const (
	setsidChild = `setsid sh -c 'echo $$ > left.pid; exec sleep 62' >/dev/null 2>&1 &`
	doubleFork  = `( (sh -c 'echo $$ > left.pid; exec sleep 62' >/dev/null 2>&1 &) & ); `
	// holds the call's stdout and stderr open
	setsidHoldingOutput = `setsid sh -c 'echo $$ > left.pid; exec sleep 62' &`
	// ignores SIGTERM, in a session of its own
	setsidIgnoringTerm = `setsid sh -c "trap '' TERM; echo \$\$ > left.pid; exec sleep 62" >/dev/null 2>&1 &`
	// waits until the child wrote its pid, so that ending the call cannot
	// come first
	untilPid = `while [ ! -s left.pid ]; do sleep 0.01; done; `
)

// shellEnv is a workspace with its own Shells, so a test can Close it.
func shellEnv(t *testing.T) (*Workspace, *Shells, map[string]tool.Tool) {
	t.Helper()
	ws, _ := newWorkspace(t)
	shells := NewShells(ws, unconfined(t))
	t.Cleanup(shells.Close)
	tools := map[string]tool.Tool{}
	for _, tl := range Tools(ws, shells) {
		tools[tl.Spec().Name] = tl
	}
	return ws, shells, tools
}

// shellCall runs run_shell_command with line under ctx, failing the test if
// the call has not returned after 30 seconds.
func shellCall(t *testing.T, ctx context.Context, tools map[string]tool.Tool, line string) (*tool.Output, error) {
	t.Helper()
	args, _ := json.Marshal(map[string]string{"command": line})
	type ran struct {
		out *tool.Output
		err error
	}
	done := make(chan ran, 1)
	go func() {
		out, err := tools["run_shell_command"].Run(ctx, &tool.Call{ID: "t", Args: args})
		done <- ran{out, err}
	}()
	select {
	case r := <-done:
		return r.out, r.err
	case <-time.After(30 * time.Second):
		t.Fatalf("%q: the call did not return", line)
		return nil, nil
	}
}

// checkNothingLeft fails unless the process in left.pid has ended and was
// reaped, and no child of the test is a zombie.
func checkNothingLeft(t *testing.T, ws *Workspace) {
	t.Helper()
	testkit.WaitReaped(t, testkit.WaitPID(t, filepath.Join(ws.Root(), "left.pid")))
	if z := testkit.Zombies(); len(z) > 0 {
		t.Errorf("zombies left: %v", z)
	}
}

// TestForegroundCallOwnsItsProcesses: whatever a foreground command starts
// ends with the call, when it completes, when its deadline passes, and
// when it is cancelled, even a process that left bash's process group and
// session, one re-parented by a double fork, and one that ignores SIGTERM.
func TestForegroundCallOwnsItsProcesses(t *testing.T) {
	for _, tt := range []struct{ name, line string }{
		{"setsid", setsidChild},
		{"double fork", doubleFork},
		{"holding the output", setsidHoldingOutput},
		{"ignoring SIGTERM", setsidIgnoringTerm},
	} {
		t.Run(tt.name+", completed", func(t *testing.T) {
			ws, _, tools := shellEnv(t)
			out, err := shellCall(t, context.Background(), tools, tt.line+untilPid+"echo finished")
			if err != nil || !strings.Contains(out.LLMContent, "Stdout: finished") || !strings.Contains(out.LLMContent, "Exit Code: 0") {
				t.Errorf("got %v\n%+v", err, out)
			}
			checkNothingLeft(t, ws)
		})
		t.Run(tt.name+", deadline", func(t *testing.T) {
			ws, _, tools := shellEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, err := shellCall(t, ctx, tools, tt.line+untilPid+"sleep 62"); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v, want the deadline", err)
			}
			checkNothingLeft(t, ws)
		})
		t.Run(tt.name+", cancelled", func(t *testing.T) {
			ws, _, tools := shellEnv(t)
			ctx, cancel := context.WithCancel(context.Background())
			go func() { // cancels once the child runs
				testkit.Poll(10*time.Second, func() bool {
					info, err := os.Stat(filepath.Join(ws.Root(), "left.pid"))
					return err == nil && info.Size() > 0
				})
				cancel()
			}()
			if _, err := shellCall(t, ctx, tools, tt.line+"sleep 62"); !errors.Is(err, context.Canceled) {
				t.Errorf("got %v, want cancelled", err)
			}
			checkNothingLeft(t, ws)
		})
	}
}

// TestBackgroundCommandEndsWhenKilled: a background command keeps what it
// started running after bash exits, until kill_shell or Shells.Close ends
// all of it.
func TestBackgroundCommandEndsWhenKilled(t *testing.T) {
	for _, tt := range []struct{ name, line string }{
		{"setsid", setsidChild},
		{"double fork", doubleFork},
		{"ignoring SIGTERM", setsidIgnoringTerm},
	} {
		for _, end := range []string{"kill_shell", "Close"} {
			t.Run(tt.name+", "+end, func(t *testing.T) {
				ws, shells, tools := shellEnv(t)
				args, _ := json.Marshal(map[string]any{"command": tt.line + "echo started", "run_in_background": true})
				out := run(t, tools["run_shell_command"], string(args))
				id := strings.Fields(strings.SplitAfter(out.LLMContent, "shell_id ")[1])[0]
				pid := testkit.WaitPID(t, filepath.Join(ws.Root(), "left.pid"))
				// bash is done; what it started still runs, and so the
				// shell counts as running.
				if o := run(t, tools["shell_output"], `{"shell_id":"`+id+`"}`); !strings.Contains(o.LLMContent, "running") {
					t.Errorf("status: %s", o.LLMContent)
				}
				if end == "kill_shell" {
					if o := run(t, tools["kill_shell"], `{"shell_id":"`+id+`"}`); !strings.Contains(o.LLMContent, "Killed shell") {
						t.Errorf("kill_shell: %s", o.LLMContent)
					}
				} else {
					shells.Close()
				}
				testkit.WaitReaped(t, pid)
				if z := testkit.Zombies(); len(z) > 0 {
					t.Errorf("zombies left: %v", z)
				}
			})
		}
	}
}
