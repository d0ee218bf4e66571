package cli_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/toolbus/toolbus/internal/cli"
)

var madeID = regexp.MustCompile(`^executor@[^ ]+-[0-9a-f]{6}$`)

// An executor's id is its --id, else $TOOLBUS_EXECUTOR_ID, else its
// member name, else one it makes: host and a short random part, so two
// executors on one host are two.
func TestExecutorIdentity(t *testing.T) {
	t.Setenv(cli.ExecutorIDEnv, "")
	a, b := cli.ExecutorIdentity("", ""), cli.ExecutorIdentity("", "")
	if !madeID.MatchString(a.ID) || a.ID == b.ID {
		t.Errorf("two made ids: %q and %q; want two different executor@HOST-XXXXXX", a.ID, b.ID)
	}
	if a.Role != "executor" {
		t.Errorf("role %q", a.Role)
	}
	if got := cli.ExecutorIdentity("", "executor-2").ID; got != "executor-2" {
		t.Errorf("with a member name: %q", got)
	}
	t.Setenv(cli.ExecutorIDEnv, "from-env")
	if got := cli.ExecutorIdentity("", "executor-2").ID; got != "from-env" {
		t.Errorf("with %s set: %q", cli.ExecutorIDEnv, got)
	}
	if got := cli.ExecutorIdentity("from-flag", "executor-2").ID; got != "from-flag" {
		t.Errorf("with --id: %q", got)
	}
}

// up's executor keeps the id it made in its data dir: the same at every
// start on the dir, another on another dir.
func TestStoredExecutorIdentity(t *testing.T) {
	t.Setenv(cli.ExecutorIDEnv, "")
	dir := t.TempDir()
	first, err := cli.StoredExecutorIdentity(dir)
	if err != nil || !madeID.MatchString(first.ID) {
		t.Fatalf("first start: %q, %v", first.ID, err)
	}
	again, err := cli.StoredExecutorIdentity(dir)
	if err != nil || again.ID != first.ID {
		t.Errorf("second start: %q, %v; want %q", again.ID, err, first.ID)
	}
	if other, _ := cli.StoredExecutorIdentity(t.TempDir()); other.ID == first.ID {
		t.Errorf("two data dirs share the id %q", other.ID)
	}
	if info, err := os.Stat(filepath.Join(dir, "executor-id")); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the kept id: %v %v", info, err)
	}
	t.Setenv(cli.ExecutorIDEnv, "from-env")
	if got, _ := cli.StoredExecutorIdentity(dir); got.ID != "from-env" {
		t.Errorf("with %s set: %q", cli.ExecutorIDEnv, got.ID)
	}
}
