// Package sandboxwire is what the sandbox of internal/policy's tests and
// its init and stub program (internal/policy/testdata/stub) tell each
// other, as JSON: one definition for both ends.
package sandboxwire

import (
	"fmt"
	"path"
)

// Config is what the test passes to init, as JSON in argv[2].
type Config struct {
	// Root is the sandbox's root directory, as the host sees it.
	Root string `json:"root"`
	// Line is the shell line bash runs.
	Line string `json:"line"`
	// UID and GID are the user bash runs as; 0 keeps init's own (in a user
	// namespace, where only one user is mapped).
	UID int `json:"uid"`
	GID int `json:"gid"`
	// DeadlineMS is how long the line may run before every process of the
	// sandbox is killed.
	DeadlineMS int `json:"deadlineMs"`
	// Workdir is the line's working directory, a tmpfs: the agent's
	// workspace.
	Workdir string `json:"workdir"`
	// Workspace names the programs the agent's workspace holds (./ls):
	// stubs bound into Workdir.
	Workspace []string `json:"workspace"`
	// Limits are resource limits (RLIMIT_*) for bash and all it starts.
	Limits Limits `json:"limits"`
}

// Limits bound what a line can take from the machine.
type Limits struct {
	Processes  uint64 `json:"processes"`
	CPUSeconds uint64 `json:"cpuSeconds"`
	FileBytes  uint64 `json:"fileBytes"`
	DataBytes  uint64 `json:"dataBytes"`
	OpenFiles  uint64 `json:"openFiles"`
}

// Report is what init prints on stdout when the line is done.
type Report struct {
	Records []Record `json:"records"`
	// Garbled counts reports that did not arrive whole (a stub killed at
	// the deadline while reporting).
	Garbled int `json:"garbled"`
	// Dropped counts records past maxRecords.
	Dropped int `json:"dropped"`
	// Exit is how bash ended: "exit N" or "signal S".
	Exit     string `json:"exit"`
	TimedOut bool   `json:"timedOut"`
	// Proc says whether /proc is mounted: without it /dev/fd, and so
	// process substitution as a file name, does not work.
	Proc bool `json:"proc"`
	// Stderr is the start of what bash and the programs printed: the
	// test reads it from init's stderr.
	Stderr string `json:"-"`
}

// Record is one run of a stub.
type Record struct {
	// Argv is the argument vector as the stub received it; Argv[0] is the
	// name the caller chose (`exec -a ls touch` gives "ls").
	Argv []string `json:"argv"`
	// Exe is the path the kernel executed (AT_EXECFN), whatever argv[0]
	// says: "/bin/touch" for `exec -a ls touch`.
	Exe string `json:"exe"`
	// Cwd is the working directory, to resolve a relative Exe ("./ls").
	Cwd string `json:"cwd"`
	// UID is the user the program ran as.
	UID int `json:"uid"`
	// Wraps is set when the stub models a wrapper (sudo, busybox) and goes
	// on to execute the program it names: that program reports on its own.
	Wraps []string `json:"wraps,omitempty"`
}

// Program is the absolute path of the file that ran.
func (r Record) Program() string {
	if path.IsAbs(r.Exe) {
		return path.Clean(r.Exe)
	}
	return path.Join(r.Cwd, r.Exe)
}

func (r Record) String() string {
	s := fmt.Sprintf("%s ran %q", r.Program(), r.Argv)
	if r.Wraps != nil {
		s += fmt.Sprintf(" and executed %q", r.Wraps)
	}
	return s
}
