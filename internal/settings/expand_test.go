package settings

import "testing"

// env is a getenv over a fixed set of variables.
func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "a", "B_2": "b", "EMPTY": ""}
	for _, tc := range []struct {
		in, want string
		warned   bool
	}{
		{"plain", "plain", false},
		{"$A", "a", false},
		{"${A}", "a", false},
		{"x$A/y", "xa/y", false},
		{"$A$B_2", "ab", false},
		{"${A}${B_2}", "ab", false},
		{"$Ax", "", true}, // the name runs on: Ax is unset
		{"${A}x", "ax", false},
		{"${A:-d}", "a", false},
		{"${UNSET:-d}", "d", false},
		{"${EMPTY:-d}", "d", false},
		{"${UNSET:-}", "", false},
		{"${UNSET:-a:-b}", "a:-b", false},
		{"${UNSET:-http://h:1/x}/y", "http://h:1/x/y", false},
		{"$UNSET", "", true},
		{"${UNSET}", "", true},
		{"$", "$", false},
		{"$$", "$$", false},
		{"$1", "$1", false},
		{"a $ b", "a $ b", false},
		{"${}", "${}", true},
		{"${A-x}", "${A-x}", true},
		{"${A:=x}", "${A:=x}", true},
		{"${A", "${A", true},
		{"${UNSET:-${A}}", "${A}", false}, // the default runs to the first "}"
	} {
		t.Run(tc.in, func(t *testing.T) {
			warned := false
			e := expander{getenv: env(vars), warn: func(string, string) { warned = true }}
			if got := e.expand("f", tc.in); got != tc.want || warned != tc.warned {
				t.Errorf("got %q (warned %v), want %q (warned %v)", got, warned, tc.want, tc.warned)
			}
		})
	}
}
