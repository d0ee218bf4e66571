// Package sandbox confines every process toolbus starts (a shell line, a
// background command, a hook, a discovery or call command, a stdio MCP
// server) with Landlock, so that code a model wrote or edited, even code a
// person approved, cannot take toolbus over: it cannot read toolbus's own
// secrets (the bus's data directory with its JetStream store and
// checkpoint key, the identity seeds, the state directory), cannot connect
// to toolbus's own TCP ports, and cannot signal toolbus's processes or
// reach their abstract Unix sockets. A confined process reads and runs
// anything else, writes only beneath the workspace and the temp
// directories, connects only to the TCP ports its policy allows, and
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
// Covered says which (the file system from ABI 1, TCP connect from ABI 4,
// signals and abstract sockets from ABI 6).
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Policy says what a confined process may do: with the file system, read
// and execute everything but Hidden, and write only beneath Writable and
// the temp directories (TempDirs), and to the harmless devices
// (/dev/null, /dev/zero, /dev/full, /dev/tty); with the network, connect
// over TCP only to the ports of Connect that are not Reserved. It may
// never signal a process outside its confinement nor connect to an
// abstract Unix socket made outside it. The zero Policy confines writes,
// hides nothing and allows no TCP connection.
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
	// Connect are the TCP ports a confined process may connect to, on
	// any host. Landlock grants TCP ports one by one and refuses every
	// other, so this is the list of what is allowed: a port nobody
	// listed, a toolbus port included, is refused. Bind and UDP are not
	// confined.
	Connect []uint16
	// Reserved are the TCP ports of this host's toolbus (its bus,
	// cluster, monitoring, console, MCP and metrics ports): never
	// connectable, on any host, even when Connect lists them.
	Reserved []uint16
	// AnyPort leaves TCP connect unconfined: every port may be
	// connected to, toolbus's own included, and Connect and Reserved
	// are moot. For a host whose tools need ports no list can name,
	// chosen by its operator; the file system and the scopes stay
	// confined.
	AnyPort bool
}

// Ports are the TCP ports p lets a confined process connect to: Connect
// without Reserved, sorted, each once (moot under AnyPort).
func (p *Policy) Ports() []uint16 {
	out := make([]uint16, 0, len(p.Connect))
	for _, port := range p.Connect {
		if !slices.Contains(p.Reserved, port) {
			out = append(out, port)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Validate reports paths that are not absolute and a writable hierarchy
// inside a hidden one, which could not be written at all.
func (p *Policy) Validate() error {
	for _, d := range slices.Concat(p.Writable, p.Hidden) {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("sandbox: %q is not an absolute path", d)
		}
	}
	if slices.Contains(p.Connect, 0) {
		return errors.New("sandbox: TCP port 0 cannot be connected to")
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
	p.Connect, p.Reserved = slices.Clone(p.Connect), slices.Clone(p.Reserved)
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

// Coverage is what this kernel's Landlock confines of a Policy.
type Coverage struct {
	// ABI is the kernel's Landlock ABI version, 0 without Landlock.
	ABI int
	// Files: reads of Hidden, writes outside Writable (ABI 1).
	Files bool
	// Network: TCP connect to ports outside Policy.Ports (ABI 4).
	Network bool
	// Scopes: signals to, and abstract Unix sockets of, processes
	// outside the confinement (ABI 6).
	Scopes bool
}

// Covered says what this kernel confines.
func Covered() Coverage {
	abi, err := ABI()
	if err != nil {
		return Coverage{}
	}
	return coverageOf(abi)
}

// coverageOf is what Landlock ABI abi confines: the file system from 1,
// TCP connect from 4, the signal and abstract socket scopes from 6.
func coverageOf(abi int) Coverage {
	return Coverage{ABI: abi, Files: abi >= 1, Network: abi >= 4, Scopes: abi >= 6}
}

// Covered says what this kernel confines of s's policy: under AnyPort,
// not the network.
func (s *Sandbox) Covered() Coverage {
	c := Covered()
	c.Network = c.Network && !s.policy.AnyPort
	return c
}

// Complete says whether every part of a Policy is enforced.
func (c Coverage) Complete() bool { return c.Files && c.Network && c.Scopes }

// Missing names the parts of a Policy this kernel does not enforce:
// "file system", "network", "signals and abstract sockets".
func (c Coverage) Missing() []string {
	var out []string
	for _, part := range []struct {
		ok   bool
		name string
	}{{c.Files, "file system"}, {c.Network, "network"}, {c.Scopes, "signals and abstract sockets"}} {
		if !part.ok {
			out = append(out, part.name)
		}
	}
	return out
}
