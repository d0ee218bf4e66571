// Package sandbox confines the processes the tools start (a shell line, a
// background command, a discovered tool) with Landlock, so that a line a
// model wrote, even one a person approved, cannot read toolbus's own
// secrets: the bus's data directory (its JetStream store, the checkpoint
// key) and the identity seeds. A confined process reads and runs anything
// else, writes only beneath the workspace and the temp directories, and
// cannot reach into the processes outside its confinement (their
// /proc/PID/environ, fd and mem), which Landlock refuses to any process it
// confines.
//
// Landlock confines a thread and everything it starts, and cannot be
// lifted. The process that runs the tools must stay free, so a Policy is
// turned into a Ruleset by that process (which confines nobody) and
// enforced on one locked thread of a process supervisor
// (internal/proctree) just before it forks the command: only the
// command's process tree is confined.
//
// Best effort: on a kernel without Landlock, or an older Landlock ABI,
// commands run with what the kernel can enforce, which may be nothing;
// Describe says which. Network access is not confined.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Policy says what a confined process may do with the file system: read
// and execute everything but Hidden, and write only beneath Writable and
// the temp directories (TempDirs), and to the harmless devices
// (/dev/null, /dev/zero, /dev/full, /dev/tty). The zero Policy confines
// writes and hides nothing.
type Policy struct {
	// Writable are the hierarchies a confined process may also create,
	// change and remove files in: the workspace. Missing ones are left
	// out.
	Writable []string
	// Hidden are the hierarchies a confined process may not read, list,
	// run or write: the bus's data directory, the identity seeds. Hiding
	// wins over Writable: a hidden directory inside the workspace stays
	// hidden, at the cost that the directories on the way to it can be
	// neither listed nor given new entries at their top level (Landlock
	// grants whole hierarchies only). Missing ones are left out.
	Hidden []string
}

// Validate reports paths that are not absolute and a writable hierarchy
// inside a hidden one, which could not be written at all.
func (p *Policy) Validate() error {
	for _, d := range slices.Concat(p.Writable, p.Hidden) {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("sandbox: %q is not an absolute path", d)
		}
	}
	for _, w := range p.Writable {
		for _, h := range p.Hidden {
			if within(filepath.Clean(w), filepath.Clean(h)) {
				return fmt.Errorf("sandbox: the writable %s is inside the hidden %s", w, h)
			}
		}
	}
	return nil
}

// TempDirs are the temp directories a confined process may write in:
// $TMPDIR (os.TempDir), /tmp, /var/tmp and /dev/shm, those that exist.
func TempDirs() []string {
	var out []string
	for _, d := range []string{os.TempDir(), "/tmp", "/var/tmp", "/dev/shm"} {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// devices are the device files every confined process may write: where
// shell lines send what they do not want.
var devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty"}

// within says whether p is dir or beneath it; both are clean.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// Sandbox is a Policy ready to confine processes. It keeps the last
// ruleset it built and builds another only when the paths of the policy
// resolve otherwise or a directory listed for it changed. Safe for
// concurrent use; Close it.
type Sandbox struct {
	policy Policy
	cache  cache
}

// New validates p and returns a Sandbox for it. The Sandbox keeps a copy
// of p.
func New(p Policy) (*Sandbox, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p.Writable, p.Hidden = slices.Clone(p.Writable), slices.Clone(p.Hidden)
	return &Sandbox{policy: p}, nil
}

// Policy is the policy s enforces.
func (s *Sandbox) Policy() Policy { return s.policy }

// ErrUnavailable is the reason a Policy is not enforced: the kernel has
// no Landlock (not built in, not enabled at boot, not Linux).
var ErrUnavailable = errors.New("landlock is not available")

// Describe says what confinement this kernel gives the tool processes,
// for the logs: "landlock ABI N", or "not available" and why.
func Describe() string {
	abi, err := ABI()
	if err != nil {
		return "not available (" + err.Error() + ")"
	}
	return fmt.Sprintf("landlock ABI %d", abi)
}
