package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testkit"
	toolbusgo "github.com/toolbus/toolbus/pkg/toolbus"
)

// soakLength is how long TestSoakUpWithMCPRediscovery runs: 2 minutes,
// or TOOLBUS_UP_SOAK (a Go duration); scripts/soak.sh gives it 15.
// TOOLBUS_UP_SOAK=beside skips it: scripts/test.sh runs it in a go test
// of its own beside the suite's.
func soakLength(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv("TOOLBUS_UP_SOAK")
	switch s {
	case "":
		return 2 * time.Minute
	case "beside":
		t.Skip("the soak runs in a go test of its own, beside this one (scripts/test.sh)")
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("TOOLBUS_UP_SOAK=%q: want a Go duration such as 15m", s)
	}
	return d
}

// TestSoakUpWithMCPRediscovery runs `toolbus up` with an MCP server as a
// tool source for 2 minutes in the test command, and for a quarter of an
// hour in scripts/soak.sh, long past the 13 minutes after which an up was
// seen to answer every call TOOL_NOT_FOUND, its executor's catalogue
// replica empty, while it said it was ready. All along an agent calls
// the server's tool continuously; every few seconds the server's tools
// change, and `tools discover --server` has the executor list them again,
// which deletes shards of the catalogue and writes others. Every call
// must work, a tool that left must be gone, the new one callable at once,
// and /readyz must say ready throughout: nothing is wrong, and were
// anything, a call would fail too.
func TestSoakUpWithMCPRediscovery(t *testing.T) {
	testkit.Heavy(t, "a soak of 2 minutes (TOOLBUS_UP_SOAK=DURATION for another)")
	length := soakLength(t)
	if deadline, ok := t.Deadline(); ok && time.Until(deadline) < length+3*time.Minute {
		t.Fatalf("go test's -timeout ends before a soak of %s could: give -timeout %s or more (scripts/test.sh does), or TOOLBUS_UP_SOAK a shorter length",
			length, (length + 5*time.Minute).Round(time.Minute))
	}
	t.Parallel()
	src := newMCPSource(t)
	up := healthUp(t, src)
	url, metrics := up.url, up.metrics
	waitReadyz(t, metrics, "ready at start", isReady)
	testkit.Eventually(t, "echo is callable", func() bool {
		out, _, code := toolbus(t, "call", "echo", "--args", `{"message":"first"}`, "--nats", url)
		return code == 0 && strings.Contains(out, "Echo: first")
	})

	// The agent: continuous calls, at most 20 a second, each checked.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent, err := toolbusgo.Connect(ctx, url, toolbusgo.WithName("soak agent"),
		toolbusgo.WithIdentityFile(filepath.Join(up.data, "identities", "agent.nk")))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	var (
		calls    atomic.Int64
		failures atomic.Int64
		firstBad atomic.Pointer[string]
		wg       sync.WaitGroup
	)
	wg.Go(func() {
		pace := time.NewTicker(50 * time.Millisecond)
		defer pace.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			msg := fmt.Sprintf("call %d", i)
			cctx, ccancel := context.WithTimeout(ctx, time.Minute)
			res, err := agent.Invoke(cctx, "echo", map[string]string{"message": msg})
			ccancel()
			if ctx.Err() != nil {
				return
			}
			calls.Add(1)
			if err != nil || res == nil || res.LLMContent != "Echo: "+msg {
				failures.Add(1)
				what := fmt.Sprintf("%s at %s: %v", msg, time.Now().Format(time.TimeOnly), err)
				if res != nil {
					what += fmt.Sprintf(" (%q)", res.LLMContent)
				}
				firstBad.CompareAndSwap(nil, &what)
			}
			select {
			case <-ctx.Done():
				return
			case <-pace.C:
			}
		}
	})
	stopAgent := func() {
		cancel()
		wg.Wait()
	}
	defer stopAgent()

	// The rediscoveries, each with the server's extra tool changed.
	began := time.Now()
	round := 0
	previous := ""
	check := func(what string, ok bool, detail ...any) {
		t.Helper()
		if !ok {
			code, body := readyz(t, metrics)
			t.Fatalf("round %d (%s into the soak): %s %v; /readyz answers %d %q", round, time.Since(began).Round(time.Second), what, detail, code, body)
		}
	}
	rounds := time.NewTicker(5 * time.Second)
	defer rounds.Stop()
	for time.Since(began) < length {
		round++
		extra := fmt.Sprintf("extra_%d", round)
		src.SetExtra(extra)
		out, errOut, code := toolbus(t, "tools", "discover", "--server", "web", "--nats", url)
		check("tools discover --server web", code == 0 && strings.Contains(out, extra) && strings.Contains(out, "echo"), code, out, errOut)
		out, errOut, code = toolbus(t, "call", extra, "--nats", url)
		check("a call of the tool the server has now", code == 0 && strings.Contains(out, extra), code, out, errOut)
		if previous != "" {
			out, errOut, code = toolbus(t, "call", previous, "--nats", url)
			check("a call of the tool the server no longer has fails", code != 0 && strings.Contains(errOut+out, "TOOL_NOT_FOUND"), code, out, errOut)
		}
		previous = extra
		out, errOut, code = toolbus(t, "call", "echo", "--args", fmt.Sprintf(`{"message":"round %d"}`, round), "--nats", url)
		check("echo from the command line", code == 0 && strings.Contains(out, fmt.Sprintf("Echo: round %d", round)), code, out, errOut)
		readyCode, body := readyz(t, metrics)
		check("/readyz says ready", readyCode == http.StatusOK && body == "ready\n")
		if bad := firstBad.Load(); bad != nil {
			check("every call of the agent works", false, failures.Load(), "failed of", calls.Load(), "; the first:", *bad)
		}
		<-rounds.C
	}
	stopAgent()
	if calls.Load() == 0 || failures.Load() > 0 {
		t.Errorf("the agent's calls: %d, %d failed", calls.Load(), failures.Load())
	}
	t.Logf("%s: %d rounds of rediscovery, %d calls of the agent, none failed", time.Since(began).Round(time.Second), round, calls.Load())
	up.stop(t)
	for _, line := range strings.Split(up.output.String(), "\n") {
		// The parts stop before the readiness watch does.
		if strings.Contains(line, `msg="not ready"`) && !strings.Contains(line, "has stopped") {
			t.Errorf("up was unready during the soak: %s", line)
		}
	}
}
