package mcp

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/toolbus/toolbus/internal/events"
)

// Credentials of the facade's HTTP clients. Each client has a bearer
// token of its own, 256 random bits, and is known by the name the token
// was made for: the credential says who a client is, not the name it
// gives itself in initialize. The tokens file keeps one line per client,
// "NAME SHA256-HEX", so that it holds nothing a reader could present;
// the token itself is shown once, when it is made, and may be kept in a
// file of the client's own (0600). Lines starting with '#' and blank
// lines are skipped.

// Tokens are the clients a facade's HTTP endpoint admits, by the SHA-256
// of their bearer tokens. The zero value admits nobody. Safe for
// concurrent reads.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	client string
	sum    [sha256.Size]byte
}

// maxTokens bounds a tokens file: every request compares its token with
// every entry.
const maxTokens = 1024

// ParseTokens reads a tokens file's content. Every line must be a valid
// client name (events.ValidClient) and a SHA-256 in hex; a name may
// appear once.
func ParseTokens(data []byte) (*Tokens, error) {
	t := &Tokens{}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("tokens line %d: want NAME SHA256-HEX", n)
		}
		if err := events.ValidClient(fields[0]); err != nil {
			return nil, fmt.Errorf("tokens line %d: %w", n, err)
		}
		if seen[fields[0]] {
			return nil, fmt.Errorf("tokens line %d: %s has a token already", n, fields[0])
		}
		sum, err := hex.DecodeString(fields[1])
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("tokens line %d: the second field must be a SHA-256 in hex (64 digits)", n)
		}
		if len(t.entries) == maxTokens {
			return nil, fmt.Errorf("tokens: more than %d clients", maxTokens)
		}
		seen[fields[0]] = true
		e := tokenEntry{client: fields[0]}
		copy(e.sum[:], sum)
		t.entries = append(t.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	return t, nil
}

// ErrTokensReadable is a tokens file that others than its owner may read
// or write.
var ErrTokensReadable = errors.New("the tokens file must be readable by its owner only (chmod 600)")

// LoadTokens reads the tokens file at path, which must be its owner's
// alone (0600): whoever may write it admits a client of their own.
func LoadTokens(path string) (*Tokens, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: %w", path, ErrTokensReadable)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// StaticToken is a Tokens of one token, given as it is presented, for
// client.
func StaticToken(client, token string) (*Tokens, error) {
	if err := events.ValidClient(client); err != nil {
		return nil, err
	}
	if token == "" {
		return nil, errors.New("an empty token admits nobody")
	}
	return &Tokens{entries: []tokenEntry{{client: client, sum: sha256.Sum256([]byte(token))}}}, nil
}

// Client is the client bearer was made for; false when it is none's. It
// compares the token's digest with every entry, in constant time each,
// and goes through all of them whatever it finds.
func (t *Tokens) Client(bearer string) (string, bool) {
	if t == nil || bearer == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(bearer))
	found := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(sum[:], t.entries[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return t.entries[found].client, true
}

// Clients are the names the tokens were made for.
func (t *Tokens) Clients() []string {
	out := make([]string, len(t.entries))
	for i, e := range t.entries {
		out[i] = e.client
	}
	return out
}

// NewToken makes a bearer token: 256 bits from crypto/rand, base64url.
func NewToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// AddToken makes a token for client and adds its digest to the tokens
// file at path (made 0600 when missing), replacing the client's earlier
// token. It returns the token, which nothing keeps.
func AddToken(path, client string) (string, error) {
	if err := events.ValidClient(client); err != nil {
		return "", err
	}
	lines, _, err := otherLines(path, client)
	if err != nil {
		return "", err
	}
	token := NewToken()
	sum := sha256.Sum256([]byte(token))
	lines = append(lines, client+" "+hex.EncodeToString(sum[:]))
	if err := writeTokens(path, lines); err != nil {
		return "", err
	}
	return token, nil
}

// RemoveToken takes client's token out of the tokens file at path; false
// when it had none.
func RemoveToken(path, client string) (bool, error) {
	lines, found, err := otherLines(path, client)
	if err != nil || !found {
		return false, err
	}
	return true, writeTokens(path, lines)
}

// otherLines are the lines of the tokens file at path but client's, and
// whether it had one; the file must parse.
func otherLines(path, client string) (out []string, found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if _, err := ParseTokens(data); err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == client {
			found = true
			continue
		}
		out = append(out, line)
	}
	return out, found, nil
}

// writeTokens replaces the tokens file at path with lines, 0600, through
// a file of its own in the same directory.
func writeTokens(path string, lines []string) error {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(strings.Join(lines, "\n") + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp, 0o600)
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
	}
	return werr
}

// With is t with client admitted by token as well, in place of an
// earlier token of client's.
func (t *Tokens) With(client, token string) (*Tokens, error) {
	one, err := StaticToken(client, token)
	if err != nil {
		return nil, err
	}
	out := &Tokens{}
	if t != nil {
		for _, e := range t.entries {
			if e.client != client {
				out.entries = append(out.entries, e)
			}
		}
	}
	out.entries = append(out.entries, one.entries...)
	return out, nil
}

// TokensFile is a tokens file followed as it changes, so that a client
// added (toolbus mcp token add) or removed is admitted or refused at its
// next request. Extra, when set, is admitted beside the file's clients.
type TokensFile struct {
	// Path is the tokens file; a missing one admits no client of its own.
	Path string
	// Extra, when set, makes what is admitted of what the file admits
	// (Tokens.With, for a token given on the command line).
	Extra func(*Tokens) (*Tokens, error)

	mu      sync.Mutex
	stamp   fileStamp
	current *Tokens
	err     error
}

// fileStamp tells a changed file: its time, size and mode (a chmod that
// opens it to others changes only the mode).
type fileStamp struct {
	mod  time.Time
	size int64
	mode fs.FileMode
	ok   bool
}

// Tokens are the clients admitted now. A file that is unreadable, open
// to others or malformed admits none of its clients (Extra's only), and
// the error says why. It reads the file again when its time, size or mode
// changed.
func (f *TokensFile) Tokens() (*Tokens, error) {
	var st fileStamp
	if fi, err := os.Stat(f.Path); err == nil {
		st = fileStamp{fi.ModTime(), fi.Size(), fi.Mode(), true}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current != nil && st == f.stamp {
		return f.current, f.err
	}
	t, err := LoadTokens(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		t, err = &Tokens{}, nil
	}
	if err != nil {
		t = &Tokens{}
	}
	if f.Extra != nil {
		var xerr error
		if t, xerr = f.Extra(t); xerr != nil {
			return &Tokens{}, xerr
		}
	}
	f.stamp, f.current, f.err = st, t, err
	return t, err
}

// Fixed is a source of t alone, for HTTPConfig.Tokens.
func (t *Tokens) Fixed() func() (*Tokens, error) {
	return func() (*Tokens, error) { return t, nil }
}
