package shell

import (
	"context"
	"os"
	"testing"
)

// TestBashReadsTheLineAsTheAnalyserDoes: bash's own parser is asked, and a
// line it reads differently is told apart from one it reads alike.
func TestBashReadsTheLineAsTheAnalyserDoes(t *testing.T) {
	if _, err := bashPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bash is needed: %v", err)
		}
		t.Skip("no bash")
	}
	ctx := context.Background()
	for _, line := range []string{"ls -la | grep x", "git status && make test", "cat <<EOF\nhi\nEOF", "f() { ls; }; f", "echo \"a  b\" c\\ d"} {
		if reason := bashDisagrees(ctx, line); reason != "" {
			t.Errorf("%q: %s", line, reason)
		}
	}
	// The parser continues a comment over `\` and a newline; bash does not.
	if reason := bashDisagrees(ctx, "ls # \\\ntouch P"); reason == "" {
		t.Error("bash and the analyser were said to agree on a comment bash ends at the newline")
	}
	// Nothing in the line runs while bash reads it.
	dir := t.TempDir()
	if reason := bashDisagrees(ctx, "touch "+dir+"/ran; x=$(touch "+dir+"/ran2)"); reason != "" {
		t.Errorf("a plain line: %s", reason)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("reading the line ran it: %v", entries)
	}
}
