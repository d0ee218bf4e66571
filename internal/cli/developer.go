package cli

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// A `toolbus up` admits a client that shows no identity as its agent
// ("agent"): a shell line a model wrote runs on the same host, and the
// network is not confined (docs/security.md), so what connects with
// nothing gets an agent's rights and no more. The developer's commands on
// this host act as the developer, an admin, all the same: up leaves a note
// under its host's default data dir, one per address it listens on, naming
// the developer's seed, and Connect uses that seed when the environment
// names none. Tool processes can read neither the note nor the seed: both
// are in directories the executor hides from them (internal/sandbox).

// developerNote is the note of the `toolbus up` that listens at addr.
func developerNote(addr string) string {
	return filepath.Join(DefaultDataDir(), "up", strings.NewReplacer(":", "_", "/", "_", "[", "", "]", "").Replace(addr))
}

// WriteDeveloperNote notes, for the commands run on this host, that the
// `toolbus up` serving busURL admits the developer with seed. It returns
// how to remove the note.
func WriteDeveloperNote(busURL, seed string) (func(), error) {
	addr, ok := loopbackAddr(busURL)
	if !ok {
		return func() {}, nil
	}
	path := developerNote(addr)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, []byte(seed+"\n"), 0o600); err != nil {
		return nil, err
	}
	return func() { _ = os.Remove(path) }, nil
}

// developerSeed is the seed of the developer of the `toolbus up` at
// busURL, when this process can read its note and the seed; "" when not.
func developerSeed(busURL string) string {
	addr, ok := loopbackAddr(strings.Split(busURL, ",")[0])
	if !ok {
		return ""
	}
	data, err := os.ReadFile(developerNote(addr))
	if err != nil {
		return ""
	}
	seed := strings.TrimSpace(string(data))
	if f, err := os.Open(seed); err != nil {
		return "" // a note left by an up that is gone, or a seed out of reach
	} else {
		f.Close()
	}
	return seed
}

// loopbackAddr is host:port of a nats:// URL on a loopback address.
func loopbackAddr(raw string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return "", false
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", false
	}
	if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && host != "localhost" {
		return "", false
	}
	return net.JoinHostPort(host, port), true
}

// ApproverPrincipal is the principal an approver command (confirm,
// console) answers with: its connection's, except where it acts as the
// developer of a `toolbus up` on this host, an admin, who may send as
// anyone, and names another approver with --as: then that name is a
// claim, judged unproven, as without identities.
func ApproverPrincipal(principal, busURL, as string) string {
	if as != "" && os.Getenv(IdentityEnv) == "" && os.Getenv("TOOLBUS_NATS_CREDS") == "" && developerSeed(busURL) != "" {
		return ""
	}
	return principal
}
