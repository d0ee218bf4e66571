package cli

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/toolbus/toolbus/internal/sandbox"
)

// ToolFlags are what an executor's tool processes may reach beyond the
// default: the TCP ports they may connect to (--tool-ports), and, for a
// fleet executor, the operator's consent to run them where Landlock
// cannot confine them (--unconfined).
type ToolFlags struct {
	Ports      *string
	Unconfined *bool
}

// AddToolFlags registers --tool-ports on fs, and --unconfined when
// unconfined is set (a fleet executor's flag: `toolbus up` says what is
// not confined and runs).
func AddToolFlags(fs *flag.FlagSet, unconfined bool) *ToolFlags {
	f := &ToolFlags{Ports: fs.String("tool-ports", "",
		"TCP ports the tool processes (shell lines, hooks, discovered tools, stdio MCP servers) may connect to, comma-separated; none; "+
			"or any, which leaves their network unconfined, toolbus's own ports included "+
			"(default 22,53,80,443,9418 and the ports of $HTTP_PROXY, $HTTPS_PROXY, $ALL_PROXY); toolbus's own ports are refused even when listed")}
	if unconfined {
		f.Unconfined = fs.Bool("unconfined", false,
			"start even where Landlock cannot confine the tool processes (no Landlock, or an ABI before 6): they run with what the kernel enforces")
	}
	return f
}

// AnyPort says whether --tool-ports is any: the tool processes' network
// is not confined.
func (f *ToolFlags) AnyPort() bool { return strings.TrimSpace(*f.Ports) == "any" }

// Connect is the ports --tool-ports lists: nil for the default (and for
// any), empty for none.
func (f *ToolFlags) Connect() ([]uint16, error) {
	v := strings.TrimSpace(*f.Ports)
	switch v {
	case "", "any":
		return nil, nil
	case "none":
		return []uint16{}, nil
	}
	var out []uint16
	for _, p := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(p), 10, 16)
		if err != nil || n == 0 {
			return nil, UsageError{Err: fmt.Errorf("--tool-ports: %q is not a TCP port", p)}
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

// CheckConfinement refuses to go on when this kernel cannot confine the
// tool processes wholly, unless --unconfined says to: a fleet executor
// runs a model's commands, and is not to do so unconfined by accident.
func (f *ToolFlags) CheckConfinement() error {
	cov := sandbox.Covered()
	cov.Network = cov.Network && !f.AnyPort()
	if cov.Complete() || (f.Unconfined != nil && *f.Unconfined) {
		return nil
	}
	return fmt.Errorf("the tool processes' %s would not be confined (%s, --tool-ports %q); pass --unconfined to run them so",
		strings.Join(cov.Missing(), ", "), sandbox.Describe(), *f.Ports)
}
