package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit/npmpeer"
)

// conformanceTimeout bounds one scenario, the client included; it is a
// bound on a wait, not a measurement.
const conformanceTimeout = 3 * time.Minute

// passedLine is the suite's count of checks: "Passed: N/M, F failed, W warnings".
var passedLine = regexp.MustCompile(`Passed: (\d+)/(\d+), (\d+) failed, (\d+) warnings`)

// TestConformanceClient runs the MCP conformance suite's client mode with
// toolbus as the client: scripts/conformance-client.sh starts `toolbus up`
// with the suite's server in a generated .mcp.json and calls its tool.
//
// A scenario whose server the client never initialised counts 0/0 checks
// and still says PASSED, so the test wants at least one check, all passed.
func TestConformanceClient(t *testing.T) {
	t.Parallel()
	node22, suite := npmpeer.Require(t, npmpeer.Node22), npmpeer.Require(t, npmpeer.Conformance)
	script, err := filepath.Abs(filepath.Join("..", "..", "scripts", "conformance-client.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// The suite splits the command on spaces.
	if strings.ContainsAny(script, " \t") {
		t.Skipf("the suite cannot run a command whose path has a space: %s", script)
	}
	for _, scenario := range []string{"initialize", "tools_call"} {
		t.Run(scenario, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), conformanceTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, node22, suite, "client", "--command", script, "--scenario", scenario,
				"--timeout", strconv.FormatInt((conformanceTimeout-30*time.Second).Milliseconds(), 10))
			// The script uses the binary TestMain built; the suite passes
			// its environment on to the script.
			cmd.Env = append(os.Environ(), "TOOLBUS_BIN="+bin("toolbus"), "NO_COLOR=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("conformance client --scenario %s: %v\n%s", scenario, err, out)
			}
			m := passedLine.FindSubmatch(out)
			if m == nil {
				t.Fatalf("no Passed line in the suite's output:\n%s", out)
			}
			t.Log(string(m[0]))
			passed, total := string(m[1]), string(m[2])
			if total == "0" || passed != total || string(m[3]) != "0" || string(m[4]) != "0" || !strings.Contains(string(out), "OVERALL: PASSED") {
				t.Errorf("want every check of at least one passed, no warning, and OVERALL: PASSED; got %q:\n%s", m[0], out)
			}
		})
	}
}
