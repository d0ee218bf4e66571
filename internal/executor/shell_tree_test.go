//go:build linux

package executor

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
)

// TestDeadlineKillsAProcessThatLeftTheGroup: a shell call's deadline ends
// a child that left bash's process group and session, and nothing of it
// is left behind, not even a zombie.
func TestDeadlineKillsAProcessThatLeftTheGroup(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.ToolTimeouts = map[string]time.Duration{"run_shell_command": time.Second}
	})
	startApprover(t, e.bus, answer(events.ProceedOnce))
	res := e.call(t, "run_shell_command", `{"command":"setsid sh -c 'echo $$ > left.pid; exec sleep 62' >/dev/null 2>&1 & while [ ! -s left.pid ]; do sleep 0.01; done; sleep 62"}`)
	if errType(res) != events.ErrTimeout {
		t.Fatalf("got %s %s", errType(res), res.LLMContent)
	}
	testkit.WaitReaped(t, testkit.WaitPID(t, filepath.Join(e.ws.Root(), "left.pid")))
	if z := testkit.Zombies(); len(z) > 0 {
		t.Errorf("zombies left: %v", z)
	}
}
