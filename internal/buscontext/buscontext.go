// Package buscontext keeps the named contexts the commands find a bus
// through, as `nats context` does: a context names a bus's URL, the
// identity to connect with, and what its `toolbus up` serves. `toolbus up`
// writes one and selects it, so that every later command on the host goes
// to that bus, wherever it listens; `toolbus context list|use|show`
// switch between them.
//
// The contexts live under the host's default data dir (cli's
// DefaultDataDir, $XDG_STATE_HOME/toolbus), in contexts/NAME.json and the
// selected one's name in contexts/current. That dir is hidden from tool
// processes (internal/sandbox): a context names the seed the developer's
// commands connect with, and a shell line an agent runs must neither read
// it nor rewrite a context to send the developer's commands to a bus of
// its own.
package buscontext

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Context is where a bus is and how to connect to it.
type Context struct {
	Name string `json:"name"`
	// URL is the bus's NATS URL.
	URL string `json:"url"`
	// Identity is the seed file to connect with ($TOOLBUS_IDENTITY
	// wins); empty for the environment's or none.
	Identity string `json:"identity,omitempty"`
	// Data is the data dir of the `toolbus up` that wrote the context:
	// where commands that read it (audit verify's key) look.
	Data string `json:"data,omitempty"`
	// Console and MCP are the web console's and the MCP endpoint's
	// addresses, when its `toolbus up` serves them.
	Console string `json:"console,omitempty"`
	MCP     string `json:"mcp,omitempty"`
	// PID is the process of the `toolbus up` that wrote it; 0 for a
	// context a person made.
	PID int `json:"pid,omitempty"`
	// Written is when it was written.
	Written time.Time `json:"written"`
}

// Env names the context a command uses instead of the selected one.
const Env = "TOOLBUS_CONTEXT"

// ErrNone is the error of Current when no context is selected.
var ErrNone = errors.New("no context is selected")

// Store is the directory of the contexts.
type Store struct{ Dir string }

// At is the store under dataDir (contexts/).
func At(dataDir string) Store { return Store{Dir: filepath.Join(dataDir, "contexts")} }

// validName keeps a context's name a file name of its own.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckName says what is wrong with name as a context's name.
func CheckName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("context name %q: want letters, digits, '.', '_' or '-', starting with a letter or digit, at most 64", name)
	}
	return nil
}

func (s Store) path(name string) string { return filepath.Join(s.Dir, name+".json") }

// Save writes c, replacing a context of its name; the file is the
// user's alone.
func (s Store) Save(c Context) error {
	if err := CheckName(c.Name); err != nil {
		return err
	}
	if c.URL == "" {
		return fmt.Errorf("context %q: no bus URL", c.Name)
	}
	if c.Written.IsZero() {
		c.Written = time.Now().UTC()
	}
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return s.write(c.Name+".json", append(data, '\n'))
}

// write replaces file name in the store atomically.
func (s Store) write(name string, data []byte) error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return fmt.Errorf("contexts: %w", err)
	}
	tmp, err := os.CreateTemp(s.Dir, "."+name+".*")
	if err != nil {
		return fmt.Errorf("contexts: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("contexts: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("contexts: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.Dir, name)); err != nil {
		return fmt.Errorf("contexts: %w", err)
	}
	return nil
}

// Load reads the context name.
func (s Store) Load(name string) (Context, error) {
	if err := CheckName(name); err != nil {
		return Context{}, err
	}
	data, err := os.ReadFile(s.path(name))
	if errors.Is(err, fs.ErrNotExist) {
		return Context{}, fmt.Errorf("no context %q (toolbus context list)", name)
	}
	if err != nil {
		return Context{}, fmt.Errorf("context %q: %w", name, err)
	}
	var c Context
	if err := json.Unmarshal(data, &c); err != nil {
		return Context{}, fmt.Errorf("context %q (%s): %w", name, s.path(name), err)
	}
	if c.Name != name || c.URL == "" {
		return Context{}, fmt.Errorf("context %q (%s): its name or URL is missing", name, s.path(name))
	}
	return c, nil
}

// List is every context, by name.
func (s Store) List() ([]Context, error) {
	entries, err := os.ReadDir(s.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("contexts: %w", err)
	}
	var out []Context
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || CheckName(name) != nil {
			continue
		}
		c, err := s.Load(name)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Context) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Use selects the context name, which must exist.
func (s Store) Use(name string) error {
	if _, err := s.Load(name); err != nil {
		return err
	}
	return s.write("current", []byte(name+"\n"))
}

// Selected is the name of the selected context: $TOOLBUS_CONTEXT, else
// the one Use selected; "" for none.
func (s Store) Selected() string {
	if name := os.Getenv(Env); name != "" {
		return name
	}
	data, err := os.ReadFile(filepath.Join(s.Dir, "current"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// Current is the selected context, or ErrNone.
func (s Store) Current() (Context, error) {
	name := s.Selected()
	if name == "" {
		return Context{}, ErrNone
	}
	return s.Load(name)
}

// Remove deletes the context name, and its selection when it is the
// selected one.
func (s Store) Remove(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	if err := os.Remove(s.path(name)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("no context %q", name)
		}
		return fmt.Errorf("contexts: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(s.Dir, "current"))
	if err == nil && strings.TrimSpace(string(data)) == name {
		_ = os.Remove(filepath.Join(s.Dir, "current"))
	}
	return nil
}

// Running reports whether the `toolbus up` that wrote c still runs: its
// process is alive. A context a person made (no PID) is taken as running.
func (c Context) Running() bool {
	if c.PID <= 0 {
		return true
	}
	p, err := os.FindProcess(c.PID)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, os.ErrPermission)
}
