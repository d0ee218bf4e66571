package auth

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/identity"
)

// The files of a fleet's directory.
const (
	// RosterFile lists the members: name, role, public key.
	RosterFile = "fleet.json"
	// ServerConfigFile is the nats-server authorization block for the
	// members: the embedded bus loads it, and an operator's own
	// nats-server.conf can include it.
	ServerConfigFile = "auth.conf"
	// PolicySignersFile is the fleet's trust list of policy signers: the
	// public keys of its admins, whose signed revisions executors
	// enforce (policy.LoadSigners).
	PolicySignersFile = "policy-signers"
	// RouteSecretFile holds the secret the cluster's nodes show each
	// other on their routes: a node without it cannot join.
	RouteSecretFile = "route.secret"
	// RouteUser is the name the nodes' routes authenticate as.
	RouteUser = "toolbus-route"
)

// Member is one identity of a fleet.
type Member struct {
	Name      string `json:"name"`
	Role      Role   `json:"role"`
	PublicKey string `json:"publicKey"`
}

// Roster is a fleet's members, as DIR/fleet.json holds them.
type Roster struct {
	Members []Member `json:"members"`
}

// DefaultMembers is who `toolbus init` makes when asked for nobody in
// particular: one of each role, named after it.
func DefaultMembers() []Member {
	out := make([]Member, len(Roles))
	for i, r := range Roles {
		out[i] = Member{Name: string(r), Role: r}
	}
	return out
}

// Init makes (or adds to) the fleet in dir: a seed file for each member
// of want not there yet, the roster, and the server's authorization
// config. Existing members keep their keys; a name that exists with
// another role is refused. It returns the members it added.
func Init(dir string, want []Member) ([]Member, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	roster, err := LoadRoster(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	// Every member asked for is checked before anything is written: a
	// bad one leaves the fleet as it was.
	var todo []Member
	for _, m := range want {
		if err := events.ValidPrincipal(m.Name); err != nil {
			return nil, err
		}
		if _, err := ParseRole(string(m.Role)); err != nil {
			return nil, fmt.Errorf("member %s: %w", m.Name, err)
		}
		if i := slices.IndexFunc(roster.Members, func(o Member) bool { return o.Name == m.Name }); i >= 0 {
			if roster.Members[i].Role != m.Role {
				return nil, fmt.Errorf("member %s is a %s already; a name has one role", m.Name, roster.Members[i].Role)
			}
			continue
		}
		if i := slices.IndexFunc(todo, func(o Member) bool { return o.Name == m.Name }); i >= 0 {
			if todo[i].Role != m.Role {
				return nil, fmt.Errorf("member %s is asked for twice, with two roles", m.Name)
			}
			continue
		}
		if _, err := os.Stat(identity.SeedFile(dir, m.Name)); err == nil {
			return nil, fmt.Errorf("member %s: %s exists with no entry in %s: remove it or add it back by hand", m.Name, identity.SeedFile(dir, m.Name), RosterFile)
		}
		todo = append(todo, m)
	}
	var added []Member
	for _, m := range todo {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		// O_EXCL: a seed file left by an earlier run is not overwritten.
		f, err := os.OpenFile(identity.SeedFile(dir, m.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("member %s: %w (a seed file with no entry in %s: remove it or add it back by hand)", m.Name, err, RosterFile)
		}
		_, err = f.Write(append(seed, '\n'))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
		m.PublicKey = pub
		roster.Members = append(roster.Members, m)
		added = append(added, m)
	}
	if err := makeRouteSecret(dir); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(roster, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, RosterFile), append(data, '\n')); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, PolicySignersFile), []byte(PolicySigners(roster))); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, ServerConfigFile), []byte(ServerConfig(roster))); err != nil {
		return nil, err
	}
	return added, nil
}

// Remove takes members out of the fleet in dir: out of the roster and the
// server's authorization config, their seed files deleted. Nodes refuse
// them once they read the config again (SIGHUP), and close the
// connections they have. Every name is checked before anything changes;
// the bus's own members cannot be removed (the nodes connect as them).
// It returns the members removed.
func Remove(dir string, names []string) ([]Member, error) {
	roster, err := LoadRoster(dir)
	if err != nil {
		return nil, err
	}
	var removed []Member
	for _, name := range names {
		i := slices.IndexFunc(roster.Members, func(o Member) bool { return o.Name == name })
		switch {
		case i < 0:
			return nil, fmt.Errorf("member %s: not in %s", name, filepath.Join(dir, RosterFile))
		case roster.Members[i].Role == RoleBus:
			return nil, fmt.Errorf("member %s: the bus's own member; the nodes connect as it", name)
		}
		removed = append(removed, roster.Members[i])
		roster.Members = slices.Delete(roster.Members, i, i+1)
	}
	data, err := json.MarshalIndent(roster, "", "  ")
	if err != nil {
		return nil, err
	}
	// The config first: once it is written, the key is refused at the
	// next reload whatever happens to the rest.
	if err := writeFile(filepath.Join(dir, ServerConfigFile), []byte(ServerConfig(roster))); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, PolicySignersFile), []byte(PolicySigners(roster))); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, RosterFile), append(data, '\n')); err != nil {
		return nil, err
	}
	for _, m := range removed {
		if err := os.Remove(identity.SeedFile(dir, m.Name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, err
		}
	}
	return removed, nil
}

// writeFile replaces path whole: a reader never sees half of it.
func writeFile(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// makeRouteSecret writes dir's route secret, unless it has one.
func makeRouteSecret(dir string) error {
	path := filepath.Join(dir, RouteSecretFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(base64.RawURLEncoding.EncodeToString(b) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// RouteSecret reads dir's route secret (a fleet made before there was
// one gets it from `toolbus init DIR` run again).
func RouteSecret(dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, RouteSecretFile))
	if err != nil {
		return "", fmt.Errorf("the cluster's route secret: %w (run toolbus init %s again to make it, and give it to every node)", err, dir)
	}
	secret := strings.TrimSpace(string(data))
	if len(secret) < 32 {
		return "", fmt.Errorf("the cluster's route secret in %s is too short", filepath.Join(dir, RouteSecretFile))
	}
	return secret, nil
}

// LoadRoster reads dir/fleet.json.
func LoadRoster(dir string) (Roster, error) {
	var r Roster
	data, err := os.ReadFile(filepath.Join(dir, RosterFile))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s: %w", filepath.Join(dir, RosterFile), err)
	}
	for _, m := range r.Members {
		if err := events.ValidPrincipal(m.Name); err != nil {
			return r, fmt.Errorf("%s: %w", RosterFile, err)
		}
		if _, err := ParseRole(string(m.Role)); err != nil {
			return r, fmt.Errorf("%s: member %s: %w", RosterFile, m.Name, err)
		}
		if !nkeys.IsValidPublicUserKey(m.PublicKey) {
			return r, fmt.Errorf("%s: member %s: %q is not a user's public nkey", RosterFile, m.Name, m.PublicKey)
		}
	}
	return r, nil
}

// ServerConfig is the nats-server accounts block for r's members, in
// nats-server's own config syntax: the services account, with JetStream,
// its members (one nkey user each, with its role's permissions), what it
// exports and what it imports from the members' accounts (an approver's
// ping); then one account for each member that lives in its own,
// importing only its Grant's subjects and exporting its Grant's
// Exports to the services account alone. An export names the accounts
// that may import it, so the file cannot be widened by adding an import
// alone.
func ServerConfig(r Roster) string {
	var b strings.Builder
	b.WriteString("# toolbus fleet identities, written by `toolbus init`; regenerate rather than edit.\n")
	b.WriteString("# Each member may publish its binding subjects only with its own name; agents, the\n")
	b.WriteString("# MCP facade, approvers and auditors each live in an account of their own: see internal/auth.\n")
	b.WriteString("accounts {\n")
	var own []Member
	services := map[string][]string{} // subject -> importing accounts
	streams := map[string][]string{}
	for _, m := range r.Members {
		g := GrantOf(m.Role, m.Name)
		if g.Account == ServicesAccount {
			continue
		}
		own = append(own, m)
		for _, s := range g.Services {
			services[s] = append(services[s], g.Account)
		}
		for _, s := range g.Streams {
			streams[s] = append(streams[s], g.Account)
		}
	}
	fmt.Fprintf(&b, "  %s {\n    jetstream: enabled\n    users = [\n", ServicesAccount)
	for _, m := range r.Members {
		if g := GrantOf(m.Role, m.Name); g.Account == ServicesAccount {
			writeUser(&b, m, g.Permissions)
		}
	}
	b.WriteString("    ]\n    exports = [\n")
	for _, s := range slices.Sorted(maps.Keys(services)) {
		// Answers stream back (heartbeats, progress, chunks) until the
		// responder's last; a mapping no answer refreshed for
		// serviceResponseIdle is dropped.
		fmt.Fprintf(&b, "      { service: %q, response_type: stream, response_threshold: %q, accounts: %s }\n", s, serviceResponseIdle.String(), list(services[s]))
	}
	for _, s := range slices.Sorted(maps.Keys(streams)) {
		fmt.Fprintf(&b, "      { stream: %q, accounts: %s }\n", s, list(streams[s]))
	}
	b.WriteString("    ]\n    imports = [\n")
	for _, m := range own {
		g := GrantOf(m.Role, m.Name)
		for _, s := range g.Exports {
			// Each member's own, from each: several approvers all
			// answer a ping, and the first answer is enough.
			fmt.Fprintf(&b, "      { service: { account: %q, subject: %q } }\n", g.Account, s)
		}
	}
	b.WriteString("    ]\n  }\n")
	for _, m := range own {
		g := GrantOf(m.Role, m.Name)
		fmt.Fprintf(&b, "  %q {\n    users = [\n", g.Account)
		writeUser(&b, m, g.Permissions)
		b.WriteString("    ]\n    imports = [\n")
		for _, s := range g.Services {
			fmt.Fprintf(&b, "      { service: { account: %s, subject: %q }, to: %q }\n", ServicesAccount, s, LocalSubject(s))
		}
		for _, s := range g.Streams {
			fmt.Fprintf(&b, "      { stream: { account: %s, subject: %q } }\n", ServicesAccount, s)
		}
		b.WriteString("    ]\n    exports = [\n")
		for _, s := range g.Exports {
			fmt.Fprintf(&b, "      { service: %q, accounts: [%s] }\n", s, ServicesAccount)
		}
		b.WriteString("    ]\n  }\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// serviceResponseIdle is how long the bus keeps the way back to a
// requester in another account open with no answer on it: an executor
// sends a heartbeat every second while it runs a call, and ends the
// stream with its result.
const serviceResponseIdle = 2 * time.Minute

func writeUser(b *strings.Builder, m Member, p *server.Permissions) {
	fmt.Fprintf(b, "      # %s (%s)\n      {\n        nkey: %q\n        permissions: {\n", m.Name, m.Role, m.PublicKey)
	fmt.Fprintf(b, "          publish: { allow: %s }\n", list(p.Publish.Allow))
	fmt.Fprintf(b, "          subscribe: { allow: %s }\n", list(p.Subscribe.Allow))
	if p.Response != nil {
		fmt.Fprintf(b, "          allow_responses: { max: %d, expires: %q }\n", p.Response.MaxMsgs, p.Response.Expires.String())
	}
	b.WriteString("        }\n      }\n")
}

func list(subjects []string) string {
	q := make([]string, len(subjects))
	for i, s := range subjects {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// PolicySigners is the trust list of a roster's policy signers: one
// public key a line, each after a comment naming its member. Every admin
// may push policy, so every admin's key signs it.
func PolicySigners(roster Roster) string {
	var b strings.Builder
	b.WriteString("# toolbus policy signers: executors enforce a pushed policy revision only\n# when one of these keys signed it. Written by toolbus init; see docs/fleet.md.\n")
	for _, m := range roster.Members {
		if m.Role == RoleAdmin {
			fmt.Fprintf(&b, "# %s (%s)\n%s\n", m.Name, m.Role, m.PublicKey)
		}
	}
	return b.String()
}

// ServerAccounts reads the accounts and nkey users of an accounts config
// with nats-server's own parser: what the embedded bus enforces is
// exactly what a standalone nats-server given the same file would.
func ServerAccounts(configFile string) ([]*server.Account, []*server.NkeyUser, error) {
	opts, err := server.ProcessConfigFile(configFile)
	if err != nil {
		return nil, nil, fmt.Errorf("identities: %w", err)
	}
	if len(opts.Nkeys) == 0 {
		return nil, nil, fmt.Errorf("identities: %s names no nkey users", configFile)
	}
	if !slices.ContainsFunc(opts.Accounts, func(a *server.Account) bool { return a.Name == ServicesAccount }) {
		return nil, nil, fmt.Errorf("identities: %s has no %s account (a config from before accounts: run toolbus init %s again)", configFile, ServicesAccount, filepath.Dir(configFile))
	}
	return opts.Accounts, opts.Nkeys, nil
}
