package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/invoke"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/testkit"
)

// allowAll is a policy that lets every call run: the approver that could
// not tell whose shell a kill_shell names, at its worst.
func allowAll(t *testing.T) *policy.Policy {
	t.Helper()
	pol, err := policy.Compile(context.Background(), policy.Files{"p.rego": "package toolbus\n\ndecision := {\"verdict\": \"ALLOW\", \"reason\": \"everything\"}\n"})
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// nuidDigits are nuid's: its ids are a 12-digit prefix and a 10-digit
// sequence, base 62.
const nuidDigits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// nuidSplit reads a nuid-shaped id as its prefix and sequence.
func nuidSplit(id string) (prefix string, seq int64, ok bool) {
	if len(id) != 22 {
		return "", 0, false
	}
	for _, c := range id[12:] {
		d := strings.IndexRune(nuidDigits, c)
		if d < 0 {
			return "", 0, false
		}
		seq = seq*62 + int64(d)
	}
	return id[:12], seq, true
}

func nuidJoin(prefix string, seq int64) string {
	b := []byte(prefix + "0000000000")
	for i := len(b) - 1; i >= 12; i-- {
		b[i] = nuidDigits[seq%62]
		seq /= 62
	}
	return string(b)
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return max(a, -a)
}

// predicted are the ids an attacker tries after seeing ids: each
// shell_ id with its last characters stepped, and, for ids of a
// progression (nuid's: one prefix, the sequence stepped by a fixed
// increment, which the differences of the sequences seen give away),
// every value of it from the first id seen to a hundred steps past the
// last, as a shell_ id.
func predicted(seen []string) []string {
	var out []string
	for _, id := range seen {
		if strings.HasPrefix(id, "shell_") {
			for _, d := range []byte{1, 2, 255} {
				b := []byte(id)
				b[len(b)-1] += d
				out = append(out, string(b))
			}
		}
	}
	seqs := map[string][]int64{}
	for _, id := range seen {
		if p, s, ok := nuidSplit(strings.TrimPrefix(id, "shell_")); ok {
			seqs[p] = append(seqs[p], s)
		}
	}
	for p, ss := range seqs {
		if len(ss) < 3 {
			continue
		}
		inc := int64(0)
		for i := 1; i < len(ss); i++ {
			inc = gcd(inc, ss[i]-ss[0])
		}
		if inc == 0 {
			continue
		}
		lo, hi := ss[0], ss[0]
		for _, s := range ss {
			lo, hi = min(lo, s), max(hi, s)
		}
		for s := lo; s <= hi+100*inc && len(out) < 5000; s += inc {
			if id := "shell_" + nuidJoin(p, s); !slices.Contains(seen, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// TestAnotherPrincipalsBackgroundShellIsNotTheirs: with identities on,
// agent B learns agent A's shell id (or guesses at it from every id it
// was shown: its own shells', its results' envelope ids), and calls
// shell_output and kill_shell on it, under a policy that allows both.
// Each is answered as an id that names nothing, byte for byte, A's
// command runs on, and A's own read then gets every byte it printed.
func TestAnotherPrincipalsBackgroundShellIsNotTheirs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.IdentitiesEnforced = true; c.Policy = allowAll(t) })
	a := clientAs(t, e, events.Identity{ID: "agent:a", Role: "agent", Session: "a1"}, "agent:a")
	b := clientAs(t, e, events.Identity{ID: "agent:b", Role: "agent", Session: "b1"}, "agent:b")
	background := func(c *invoke.Client, line string) (id string, seen []string) {
		t.Helper()
		args, _ := json.Marshal(map[string]any{"command": line, "run_in_background": true})
		res := callWith(t, c, "run_shell_command", string(args))
		_, rest, ok := strings.Cut(res.LLMContent, "shell_id ")
		if res.Error != nil || !ok {
			t.Fatalf("a background command: %s %q", errType(res), res.LLMContent)
		}
		return strings.Fields(rest)[0], []string{res.ID}
	}
	var seen []string
	for range 3 {
		id, ids := background(b, "true")
		seen = append(append(seen, id), ids...)
	}
	victim, _ := background(a, "echo API_TOKEN=victim-secret-123; touch said; sleep 300")
	testkit.Eventually(t, "A's command spoke", func() bool {
		_, err := os.Stat(filepath.Join(e.ws.Root(), "said"))
		return err == nil
	})
	for range 3 {
		id, ids := background(b, "true")
		seen = append(append(seen, id), ids...)
		seen = append(seen, callWith(t, b, "read_file", `{"file_path":"README.md"}`).ID)
	}
	// The one answer to an id that names nothing, with the id in it.
	unknown := func(name, id string) string {
		res := callWith(t, b, name, `{"shell_id":"`+id+`"}`)
		return strings.ReplaceAll(fmt.Sprintf("%s|%s|%s", errType(res), res.LLMContent, res.ReturnDisplay), id, "ID")
	}
	nobody := unknown("shell_output", "shell_"+events.NewCapability())
	if !strings.HasPrefix(nobody, string(events.ErrInvalidParams)) {
		t.Fatalf("an unknown id: %s", nobody)
	}
	guesses := append(predicted(seen), victim) // the guesses first: they find nothing
	t.Logf("B tries %d ids: A's and %d predicted from %d it saw", len(guesses), len(guesses)-1, len(seen))
	for _, id := range guesses {
		for _, name := range []string{"shell_output", "kill_shell"} {
			if got := unknown(name, id); got != nobody {
				t.Fatalf("B's %s of %s (A's is %s): %s\nwant the answer to an unknown id: %s", name, id, victim, got, nobody)
			}
		}
	}
	res := callWith(t, a, "shell_output", `{"shell_id":"`+victim+`"}`)
	if res.Error != nil || !strings.Contains(res.LLMContent, "Stdout since last read: API_TOKEN=victim-secret-123") || !strings.Contains(res.LLMContent, "running") {
		t.Fatalf("A's own read after B's tries: %s %q", errType(res), res.LLMContent)
	}
	if res := callWith(t, a, "kill_shell", `{"shell_id":"`+victim+`"}`); res.Error != nil || !strings.Contains(res.LLMContent, "Killed shell "+victim) {
		t.Fatalf("A's own kill: %s %q", errType(res), res.LLMContent)
	}
}
