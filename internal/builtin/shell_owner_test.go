package builtin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/testkit"
	"github.com/toolbus/toolbus/internal/tool"
)

// runAs runs tl as the caller who.
func runAs(t *testing.T, who events.Identity, tl tool.Tool, args string) *tool.Output {
	t.Helper()
	out, err := tl.Run(context.Background(), &tool.Call{ID: "t", Args: json.RawMessage(args), Caller: who})
	if err != nil {
		t.Fatalf("%s %s as %s: %v", tl.Spec().Name, args, who.ID, err)
	}
	return out
}

// shellIDOf is the shell_id run_shell_command's answer names.
func shellIDOf(t *testing.T, out *tool.Output) string {
	t.Helper()
	_, rest, ok := strings.Cut(out.LLMContent, "shell_id ")
	if !ok {
		t.Fatalf("no shell_id in %q", out.LLMContent)
	}
	return strings.Fields(rest)[0]
}

// sameAnswer fails unless a and b are the same answer, byte for byte.
func sameAnswer(t *testing.T, what string, a, b *tool.Output) {
	t.Helper()
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("%s: answered\n%s\nwhere an id that names nothing is answered\n%s", what, ja, jb)
	}
}

// A background command's output and its kill are its owner's alone:
// another principal, a claim of the owner's name the bus did not prove,
// and a caller the owner's principal speaks for are each answered as for
// an id that names nothing, byte for byte, and take nothing: the owner
// then reads every byte and kills it.
func TestBackgroundShellServesItsOwnerAlone(t *testing.T) {
	ws, tools := newWorkspace(t)
	owner := events.Identity{ID: "agent:a", Role: "agent", Proven: true}
	out := runAs(t, owner, tools["run_shell_command"], `{"command":"echo API_TOKEN=victim-secret-123; touch said; sleep 300","run_in_background":true}`)
	id := shellIDOf(t, out)
	testkit.Eventually(t, "the command spoke", func() bool {
		_, err := os.Stat(filepath.Join(ws.Root(), "said"))
		return err == nil
	})
	args := `{"shell_id":"` + id + `"}`
	others := []events.Identity{
		{ID: "agent:b", Role: "agent", Proven: true},
		{ID: "agent:a", Role: "agent"}, // the owner's name, unproven
		{ID: "agent:a/other", Role: "agent", Proven: true},
		{ID: "admin:ops", Role: "admin", Proven: true},
		{},
	}
	names := []string{"shell_output", "kill_shell"}
	answers := map[string][]*tool.Output{}
	for _, who := range others {
		for _, name := range names {
			got := runAs(t, who, tools[name], args)
			if got.Err == nil || strings.Contains(got.LLMContent, "victim-secret") {
				t.Fatalf("%s of the owner's shell, as %+v: %q", name, who, got.LLMContent)
			}
			answers[name] = append(answers[name], got)
		}
	}
	// The file is touched once the line is written to the pipe, which
	// the shell's reader may take in a moment later: the owner reads
	// until the line has come, and it comes whole, once.
	var read strings.Builder
	testkit.Eventually(t, "the owner reads the line", func() bool {
		o := runAs(t, owner, tools["shell_output"], args)
		if o.Err != nil || !strings.Contains(o.LLMContent, "running") {
			t.Fatalf("the owner's read after the others tried: %q", o.LLMContent)
		}
		read.WriteString(o.LLMContent)
		return strings.Contains(o.LLMContent, "Stdout since last read: API_TOKEN=victim-secret-123")
	})
	if n := strings.Count(read.String(), "read: API_TOKEN=victim-secret-123"); n != 1 {
		t.Fatalf("the owner read the line %d times: %q", n, read.String())
	}
	if o := runAs(t, owner, tools["kill_shell"], args); o.Err != nil || !strings.Contains(o.LLMContent, "Killed shell "+id) {
		t.Fatalf("the owner's kill: %q", o.LLMContent)
	}
	// Killed, the id names nothing, and its owner is told so as the
	// others were told before.
	for _, name := range names {
		gone := runAs(t, owner, tools[name], args)
		for i, got := range answers[name] {
			sameAnswer(t, fmt.Sprintf("%s as %+v", name, others[i]), got, gone)
		}
	}
}

// Shell ids are capabilities: each is "shell_" and 128 bits that share no
// prefix with another's and form no progression, so that ids a caller
// saw tell nothing of the next.
func TestShellIDsAreUnpredictable(t *testing.T) {
	_, tools := newWorkspace(t)
	owner := events.Identity{ID: "agent:a", Proven: true}
	const n = 24
	var values []*big.Int
	seen := map[string]bool{}
	for range n {
		id := shellIDOf(t, runAs(t, owner, tools["run_shell_command"], `{"command":"true","run_in_background":true}`))
		random, ok := strings.CutPrefix(id, "shell_")
		if !ok || !events.IsCapability(random) {
			t.Fatalf("shell id %q is not shell_ and a capability", id)
		}
		// 24 random ids share their first 4 characters (24 bits) with
		// odds of about 1 in 60,000.
		if seen[random[:4]] {
			t.Errorf("shell id %q shares its first characters with an earlier one", id)
		}
		seen[random[:4]] = true
		b, _ := base64.RawURLEncoding.DecodeString(random)
		values = append(values, new(big.Int).SetBytes(b))
	}
	// A progression (nuid: a prefix and seq += inc) has one difference
	// between neighbours; random values have n-1 different ones.
	diffs := map[string]bool{}
	for i := 1; i < n; i++ {
		diffs[new(big.Int).Sub(values[i], values[i-1]).String()] = true
	}
	if len(diffs) != n-1 {
		t.Errorf("%d ids have %d distinct differences between neighbours, want %d", n, len(diffs), n-1)
	}
}
