package executor

import (
	"strings"
	"testing"
	"time"
)

// TestBraceBombEndsWithItsCall: a glob of 26 brace groups (2^26 patterns to
// a matcher that expands braces) under a short deadline gets its result,
// and no run of the tool is still going when the result arrives.
func TestBraceBombEndsWithItsCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) {
		c.ToolTimeouts = map[string]time.Duration{"glob": 300 * time.Millisecond}
	})
	res := e.call(t, "glob", `{"pattern":"`+strings.Repeat("{a,b}", 26)+`"}`)
	if res.Error != nil {
		t.Errorf("got %s %s", errType(res), res.LLMContent)
	}
	if n := e.exec.toolRuns.Load(); n != 0 {
		t.Errorf("%d tool run(s) still going when the result arrived", n)
	}
}
