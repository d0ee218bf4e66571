package cli

import (
	"os"
	"path/filepath"
	"strings"
)

// ToolSecrets are the paths the tool processes of an executor over
// workspace may not read (executornode.Config.Secrets), besides dirs: the
// data dir `toolbus up` keeps on this host by default, the directory of
// the seed this process connects with (TOOLBUS_IDENTITY: `toolbus init`
// puts every member's seed there, the admin's too), and the NATS
// credentials it connects with (TOOLBUS_NATS_CREDS, TOOLBUS_NATS_KEY).
// When the seeds' directory holds the workspace, its seeds (*.nk) are
// hidden instead of all of it. Paths are made absolute; empty ones are
// left out.
func ToolSecrets(workspace string, dirs ...string) []string {
	paths := append(dirs, DefaultDataDir(), os.Getenv("TOOLBUS_NATS_CREDS"), os.Getenv("TOOLBUS_NATS_KEY"))
	if seed := os.Getenv(IdentityEnv); seed != "" {
		dir := abs(filepath.Dir(seed))
		if ws := abs(workspace); ws == dir || strings.HasPrefix(ws, dir+string(filepath.Separator)) {
			seeds, _ := filepath.Glob(filepath.Join(dir, "*.nk"))
			paths = append(append(paths, seed), seeds...)
		} else {
			paths = append(paths, dir)
		}
	}
	var out []string
	for _, p := range paths {
		if p != "" {
			out = append(out, abs(p))
		}
	}
	return out
}

func abs(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
