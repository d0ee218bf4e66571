package builtin

import (
	"fmt"
	"strings"
	"testing"

	udiff "github.com/aymanbagabas/go-udiff"
)

func numbered(n int, change map[int]string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if s, ok := change[i]; ok {
			b.WriteString(s)
			continue
		}
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}

// Two changes far apart are two hunks with three lines of context each,
// not one hunk spanning the seventy lines between them.
func TestDiffHasAHunkPerChange(t *testing.T) {
	before := numbered(100, nil)
	after := numbered(100, map[int]string{10: "line ten\n", 80: "line eighty\nand one more\n"})
	d, err := unifiedDiff("notes.txt", before, after)
	if err != nil {
		t.Fatal(err)
	}
	want := `--- a/notes.txt
+++ b/notes.txt
@@ -7,7 +7,7 @@
 line 7
 line 8
 line 9
-line 10
+line ten
 line 11
 line 12
 line 13
@@ -77,7 +77,8 @@
 line 77
 line 78
 line 79
-line 80
+line eighty
+and one more
 line 81
 line 82
 line 83
`
	if d != want {
		t.Errorf("diff:\n%s\nwant:\n%s", d, want)
	}
	// Applying it gives the new text back.
	edits := udiff.Lines(before, after)
	if got, err := udiff.Apply(before, edits); err != nil || got != after {
		t.Errorf("apply: %v", err)
	}
}

func TestDiffOfANewFileAndOfNoChange(t *testing.T) {
	d, err := unifiedDiff("new.txt", "", "a\nb")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d, "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+a\n+b\n\\ No newline at end of file\n") {
		t.Errorf("new file:\n%s", d)
	}
	if d, err := unifiedDiff("same.txt", "x\n", "x\n"); d != "" || err != nil {
		t.Errorf("no change: %q %v", d, err)
	}
}

// A large rewrite is diffed in bounded time and space (gopls's diff
// gives up on minimality past a cost, not on correctness).
func TestDiffOfALargeRewriteStaysCorrect(t *testing.T) {
	var a, b strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&a, "old %d\n", i)
		fmt.Fprintf(&b, "new %d\n", i*7)
	}
	d, err := unifiedDiff("big.txt", a.String(), b.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d, "-old 19999\n") || !strings.Contains(d, "+new 139993\n") {
		t.Error("the large diff lost lines")
	}
}
