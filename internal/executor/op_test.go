package executor_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/executornode"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/testkit/executortest"
	"github.com/toolbus/toolbus/internal/tool"
)

// opProbe is a resource of an MCP server that is not trusted, which takes
// operations and says what it was given.
type opProbe struct {
	mu  sync.Mutex
	ran []string
}

func (p *opProbe) Spec() events.ToolSpec {
	return events.ToolSpec{Name: "resource.probe", Kind: events.KindResource, ReadOnly: true,
		Parameters: json.RawMessage(`{"type":"object","properties":{"uri":{"type":"string","const":"probe://x"}},"required":["uri"]}`)}
}

func (p *opProbe) Origin() (events.Source, string, bool) { return events.SourceMCP, "probe", false }

func (p *opProbe) Run(context.Context, *tool.Call) (*tool.Output, error) {
	return tool.Text("read"), nil
}

func (p *opProbe) Operate(_ context.Context, call *tool.Call) (*tool.Output, error) {
	p.mu.Lock()
	p.ran = append(p.ran, string(call.Op)+" by "+call.Caller.ID+"/"+call.Caller.Session)
	p.mu.Unlock()
	return tool.Text(string(call.Op)), nil
}

// An operation (Invocation.Op) reaches the tool's Operate with its caller,
// after the schema (but for a completion's own params) and the policy:
// the policy asks about a subscription to a resource of a server that is
// not trusted, which with no approver is a refusal, and not about giving
// one up. A tool that takes no operations refuses them.
func TestOperationsOfAnEntry(t *testing.T) {
	t.Parallel()
	f := executortest.Start(t, func(c *executor.Config) { c.ConfirmTimeout = time.Second })
	probe := &opProbe{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, _, err := executornode.HostOn(f.Executor)(ctx, "probe", false, []tool.Tool{probe}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, "resource.probe in the catalogue", func() bool {
		_, ok := f.Executor.Catalog().GetTool("resource.probe")
		return ok
	})
	call := func(name string, op events.Operation, args string) *events.Result {
		t.Helper()
		res, err := f.Client.Invoke(ctx, &events.Invocation{Tool: name, Args: json.RawMessage(args), Op: op}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call("read_file", events.OpSubscribe, `{"file_path":"README.md"}`); errTypeOf(res) != events.ErrInvalidParams || !strings.Contains(res.LLMContent, "read_file takes no subscribe") {
		t.Errorf("a subscription to read_file: %s %q", errTypeOf(res), res.LLMContent)
	}
	if res := call("resource.probe", events.OpSubscribe, `{"uri":"probe://y"}`); errTypeOf(res) != events.ErrInvalidParams {
		t.Errorf("a subscription to a URI the schema refuses: %s %q", errTypeOf(res), res.LLMContent)
	}
	if res := call("resource.probe", events.OpSubscribe, `{"uri":"probe://x"}`); errTypeOf(res) != events.ErrPolicyDenied {
		t.Errorf("a subscription to a resource of a server that is not trusted, no approver: %s %q", errTypeOf(res), res.LLMContent)
	}
	if res := call("resource.probe", events.OpUnsubscribe, `{"uri":"probe://x"}`); errTypeOf(res) != "" || res.LLMContent != "unsubscribe" {
		t.Errorf("giving a subscription up: %s %q", errTypeOf(res), res.LLMContent)
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if want := "unsubscribe by agent:test/s1"; len(probe.ran) != 1 || probe.ran[0] != want {
		t.Errorf("the tool ran %q, want %q", probe.ran, want)
	}
}
