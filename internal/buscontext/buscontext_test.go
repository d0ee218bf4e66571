package buscontext

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSaveUseList(t *testing.T) {
	t.Setenv(Env, "")
	s := At(t.TempDir())
	if _, err := s.Current(); err != ErrNone {
		t.Fatalf("a new store's current: %v", err)
	}
	local := Context{Name: "local", URL: "nats://127.0.0.1:4223", Identity: "/d/identities/developer.nk", Data: "/d", PID: os.Getpid()}
	prod := Context{Name: "prod", URL: "nats://bus-1:4222,nats://bus-2:4222"}
	for _, c := range []Context{local, prod} {
		if err := s.Save(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Use("local"); err != nil {
		t.Fatal(err)
	}
	c, err := s.Current()
	if err != nil || c.URL != local.URL || c.Identity != local.Identity || c.Written.IsZero() || !c.Running() {
		t.Errorf("current: %+v %v", c, err)
	}
	t.Setenv(Env, "prod")
	if c, err := s.Current(); err != nil || c.Name != "prod" {
		t.Errorf("with %s=prod: %+v %v", Env, c, err)
	}
	t.Setenv(Env, "")
	list, err := s.List()
	if err != nil || len(list) != 2 || list[0].Name != "local" || list[1].Name != "prod" {
		t.Errorf("list: %+v %v", list, err)
	}
	info, err := os.Stat(filepath.Join(s.Dir, "local.json"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("a context file's mode: %v %v", info, err)
	}
	if err := s.Remove("local"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Current(); err != ErrNone {
		t.Errorf("the removed context is still current: %v", err)
	}
	if err := s.Use("gone"); err == nil || !strings.Contains(err.Error(), `no context "gone"`) {
		t.Errorf("using a context that is not there: %v", err)
	}
}

// A name is a file name of its own: none reaches outside the store.
func TestNamesStayInTheStore(t *testing.T) {
	s := At(t.TempDir())
	for _, name := range []string{"", "../x", "a/b", ".hidden", "current\n", strings.Repeat("a", 65)} {
		if err := s.Save(Context{Name: name, URL: "nats://x:1"}); err == nil {
			t.Errorf("saved a context named %q", name)
		}
		if _, err := s.Load(name); err == nil {
			t.Errorf("loaded a context named %q", name)
		}
	}
	t.Setenv(Env, "../../etc/passwd")
	if _, err := s.Current(); err == nil {
		t.Error("a context named by a path was loaded")
	}
}

// The process that wrote a context is known to be gone once it is.
func TestRunning(t *testing.T) {
	if !(Context{}).Running() {
		t.Error("a context with no process is not running")
	}
	if (Context{PID: 1 << 30}).Running() {
		t.Error("a context of a process that does not exist is running")
	}
}
