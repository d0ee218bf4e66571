// Package identity is how a part connects to the bus as a member of a
// fleet with identities (`toolbus init`): the member's seed file names
// it, the connection authenticates with the seed, and replies come under
// the member's own inbox prefix, where no other member may listen. It
// needs only nats.go, so a caller that connects links no server.
package identity

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/internal/events"
)

// SeedSuffix ends the name of a member's seed file: DIR/<name>.nk.
const SeedSuffix = ".nk"

// SeedFile is where member name's seed is kept in a fleet's dir.
func SeedFile(dir, name string) string { return filepath.Join(dir, name+SeedSuffix) }

// InboxPrefix is where name's replies come: a prefix of its own, which
// no other identity may subscribe to, so no member hears another's
// results.
func InboxPrefix(name string) string { return "_INBOX." + name }

// NameOfSeedFile is the member a seed file is of: its name without
// SeedSuffix. The name only picks the subjects a part publishes on; the
// bus lets the key publish only its own member's.
func NameOfSeedFile(path string) (string, error) {
	name, ok := strings.CutSuffix(filepath.Base(path), SeedSuffix)
	if !ok {
		return "", fmt.Errorf("identity %s: a seed file's name is the member's name and %s", path, SeedSuffix)
	}
	if err := events.ValidPrincipal(name); err != nil {
		return "", fmt.Errorf("identity %s: %w", path, err)
	}
	return name, nil
}

// Connect is how a part connects as the member whose seed file is
// seedFile: the member's name, and the NATS options that authenticate
// with the seed and take replies under the member's own inbox prefix.
func Connect(seedFile string) (name string, opts []nats.Option, err error) {
	if name, err = NameOfSeedFile(seedFile); err != nil {
		return "", nil, err
	}
	nkey, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		return "", nil, fmt.Errorf("identity %s: %w", seedFile, err)
	}
	return name, []nats.Option{nkey, nats.CustomInboxPrefix(InboxPrefix(name))}, nil
}

// KeyOf is the key pair of the member whose seed file is seedFile: what
// signs for it (a policy set it pushes).
func KeyOf(seedFile string) (nkeys.KeyPair, error) {
	data, err := os.ReadFile(seedFile)
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	seed, err := nkeys.ParseDecoratedNKey(data)
	if err != nil {
		return nil, fmt.Errorf("identity %s: %w", seedFile, err)
	}
	return seed, nil
}
