package mcp_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	toolmcp "github.com/toolbus/toolbus/internal/mcp"
)

// A client is known by its token: the file keeps digests, a token is
// made once per add and replaces the client's earlier one, a removed
// client is refused, and a file others may read is refused whole.
func TestTokensFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "mcp-tokens")
	// A file of its own name left from an earlier write, open to others:
	// the tokens file is 0600 all the same.
	os.WriteFile(path+".new", []byte("left over\n"), 0o644)
	alice, err := toolmcp.AddToken(path, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Fatalf("the file written over a left-over one is %v, want 0600", fi.Mode().Perm())
	}
	bob, err := toolmcp.AddToken(path, "bob")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), alice) || strings.Contains(string(data), bob) {
		t.Fatalf("the file keeps a token itself:\n%s", data)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("the file is %v, want 0600", fi.Mode().Perm())
	}
	src := &toolmcp.TokensFile{Path: path}
	tokens, err := src.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{alice: "alice", bob: "bob"} {
		if got, ok := tokens.Client(token); !ok || got != want {
			t.Errorf("the token of %s names %q (%v)", want, got, ok)
		}
	}
	for _, stranger := range []string{"", "alice", alice + "x", alice[:len(alice)-1], strings.ToUpper(alice)} {
		if got, ok := tokens.Client(stranger); ok {
			t.Errorf("the token %q names %q", stranger, got)
		}
	}
	// A new token for alice: the old one is refused from her next
	// request on, as is bob's once removed.
	again, err := toolmcp.AddToken(path, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if found, err := toolmcp.RemoveToken(path, "bob"); !found || err != nil {
		t.Fatalf("remove bob: %v %v", found, err)
	}
	if found, err := toolmcp.RemoveToken(path, "bob"); found || err != nil {
		t.Errorf("remove bob again: %v %v, want not found", found, err)
	}
	if found, err := toolmcp.RemoveToken(filepath.Join(t.TempDir(), "none"), "bob"); found || err != nil {
		t.Errorf("remove from no file: %v %v, want not found", found, err)
	}
	// A person's comments and blank lines stay.
	kept, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, append([]byte("# the agents' clients\n\n"), kept...), 0o600)
	if _, err := toolmcp.AddToken(path, "dave"); err != nil {
		t.Fatal(err)
	}
	if found, err := toolmcp.RemoveToken(path, "dave"); !found || err != nil {
		t.Fatalf("remove dave: %v %v", found, err)
	}
	if data, _ := os.ReadFile(path); !strings.HasPrefix(string(data), "# the agents' clients\n\n") {
		t.Errorf("the comment is gone:\n%s", data)
	}
	os.Chtimes(path, fileTimePlus(t, path), fileTimePlus(t, path))
	tokens, _ = src.Tokens()
	if _, ok := tokens.Client(alice); ok {
		t.Error("alice's replaced token is still taken")
	}
	if _, ok := tokens.Client(bob); ok {
		t.Error("bob's removed token is still taken")
	}
	if got, ok := tokens.Client(again); !ok || got != "alice" {
		t.Errorf("alice's new token names %q (%v)", got, ok)
	}
	// A tokens file others may read or write admits nobody, from the
	// next request on.
	os.Chmod(path, 0o644)
	if _, err := toolmcp.LoadTokens(path); !errors.Is(err, toolmcp.ErrTokensReadable) {
		t.Errorf("a file others may read: %v", err)
	}
	tokens, err = src.Tokens()
	if _, ok := tokens.Client(again); ok || !errors.Is(err, toolmcp.ErrTokensReadable) {
		t.Errorf("a file opened to others still admits alice (%v)", err)
	}
	if _, err := toolmcp.AddToken(path, "Not A Name"); err == nil {
		t.Error("a client name that is no subject token was taken")
	}
}

// A missing tokens file admits no client of its own, and the client
// given beside it (toolbus up's, from the command line) all the same.
func TestTokensFileMissing(t *testing.T) {
	t.Parallel()
	const token = "a-token-given-on-the-command-line"
	src := &toolmcp.TokensFile{Path: filepath.Join(t.TempDir(), "mcp-tokens"),
		Extra: func(t *toolmcp.Tokens) (*toolmcp.Tokens, error) { return t.With("default", token) }}
	for i := range 2 { // read, then as cached
		tokens, err := src.Tokens()
		if got, ok := tokens.Client(token); err != nil || !ok || got != "default" {
			t.Errorf("read %d: the token given beside a missing file names %q (%v, %v)", i+1, got, ok, err)
		}
	}
}

func fileTimePlus(t *testing.T, path string) time.Time {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.ModTime().Add(2 * time.Second)
}

// FuzzParseTokens: no tokens file, whatever it holds, panics the parser
// or admits a client under a name that is not a subject token, and every
// client it admits is admitted by its token alone.
func FuzzParseTokens(f *testing.F) {
	sum := sha256.Sum256([]byte("t"))
	f.Add([]byte("alice " + hex.EncodeToString(sum[:]) + "\n"))
	f.Add([]byte("# a comment\n\nbob " + strings.Repeat("0", 64)))
	f.Add([]byte("alice " + hex.EncodeToString(sum[:]) + "\nalice " + hex.EncodeToString(sum[:])))
	f.Add([]byte("a.b " + strings.Repeat("f", 64)))
	f.Add([]byte("x " + strings.Repeat("g", 64)))
	f.Fuzz(func(t *testing.T, data []byte) {
		tokens, err := toolmcp.ParseTokens(data)
		if err != nil {
			return
		}
		for _, c := range tokens.Clients() {
			if c == "" || strings.ContainsAny(c, ". *>/\t\n") {
				t.Fatalf("a client named %q was admitted", c)
			}
		}
		if c, ok := tokens.Client(""); ok {
			t.Fatalf("the empty token names %q", c)
		}
		if c, ok := tokens.Client(string(data)); ok && !strings.Contains(string(data), hex.EncodeToString(func() []byte { s := sha256.Sum256(data); return s[:] }())) {
			t.Fatalf("the file's own text is the token of %q", c)
		}
	})
}

// A tokens file is read line by line: comments and blank lines are
// skipped, and a bad line is refused naming its number.
func TestParseTokens(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("carol's token"))
	digest := hex.EncodeToString(sum[:])
	tokens, err := toolmcp.ParseTokens([]byte("# clients\n\n  carol " + digest + "  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := tokens.Client("carol's token"); !ok || c != "carol" {
		t.Errorf("carol's token names %q (%v)", c, ok)
	}
	// No credential is no client's, even where a line holds the
	// digest of nothing; and no tokens admit nobody.
	none := sha256.Sum256(nil)
	empty, err := toolmcp.ParseTokens([]byte("nobody " + hex.EncodeToString(none[:])))
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := empty.Client(""); ok {
		t.Errorf("no token names %q", c)
	}
	if c, ok := (*toolmcp.Tokens)(nil).Client("carol's token"); ok {
		t.Errorf("no tokens admit %q", c)
	}
	for text, want := range map[string]string{
		"# x\n\ncarol " + digest + "\ncarol " + digest: "line 4",
		"carol " + digest[:62]:                         "line 1",
		"carol " + digest + " extra":                   "line 1",
		"\nCarol " + digest:                            "line 2",
		"carol zz" + digest[2:]:                        "line 1",
	} {
		if _, err := toolmcp.ParseTokens([]byte(text)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error at %s", text, err, want)
		}
	}
}
