package cli

import (
	"flag"
	"slices"
	"strings"
	"testing"
)

func toolFlags(t *testing.T, args ...string) *ToolFlags {
	t.Helper()
	fs := flag.NewFlagSet("executor", flag.ContinueOnError)
	f := AddToolFlags(fs, true)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f
}

// --tool-ports lists ports, none, or any; anything else is a usage
// error, not a port list read some other way.
func TestToolPorts(t *testing.T) {
	for _, tt := range []struct {
		arg  string
		want []uint16
		any  bool
	}{
		{"", nil, false},
		{"22, 443,5432", []uint16{22, 443, 5432}, false},
		{"none", []uint16{}, false},
		{"any", nil, true},
	} {
		f := toolFlags(t, "--tool-ports", tt.arg)
		got, err := f.Connect()
		if err != nil || !slices.Equal(got, tt.want) || (got == nil) != (tt.want == nil) || f.AnyPort() != tt.any {
			t.Errorf("%q: got %v %v any=%v, want %v any=%v", tt.arg, got, err, f.AnyPort(), tt.want, tt.any)
		}
	}
	for _, bad := range []string{"0", "65536", "http", "22,,80", "-1"} {
		if _, err := toolFlags(t, "--tool-ports", bad).Connect(); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}

// A fleet executor whose tool processes' network would not be confined
// (--tool-ports any) refuses to start unless its operator says
// --unconfined.
func TestAnExecutorRefusesToRunUnconfined(t *testing.T) {
	err := toolFlags(t, "--tool-ports", "any").CheckConfinement()
	if err == nil || !strings.Contains(err.Error(), "network") || !strings.Contains(err.Error(), "--unconfined") {
		t.Errorf("got %v, want a refusal naming the network and --unconfined", err)
	}
	if err := toolFlags(t, "--tool-ports", "any", "--unconfined").CheckConfinement(); err != nil {
		t.Errorf("with --unconfined: %v", err)
	}
}
