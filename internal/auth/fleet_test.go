package auth_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/identity"
)

func TestInitMakesAFleetAndAddsToIt(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "fleet")
	added, err := auth.Init(dir, auth.DefaultMembers())
	if err != nil {
		t.Fatal(err)
	}
	if len(added) != len(auth.Roles) {
		t.Fatalf("made %d members, want one per role", len(added))
	}
	seed, err := os.ReadFile(identity.SeedFile(dir, "agent"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(identity.SeedFile(dir, "agent")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a seed file's mode: %v %v", fi.Mode(), err)
	}
	if !strings.HasPrefix(string(seed), "SU") {
		t.Errorf("a seed file holds %q, not a user's seed", seed)
	}

	// Again, with one more: nothing existing changes.
	added, err = auth.Init(dir, append(auth.DefaultMembers(), auth.Member{Name: "bob", Role: auth.RoleAgent}))
	if err != nil {
		t.Fatal(err)
	}
	if len(added) != 1 || added[0].Name != "bob" {
		t.Fatalf("added %+v, want bob alone", added)
	}
	if again, _ := os.ReadFile(identity.SeedFile(dir, "agent")); string(again) != string(seed) {
		t.Error("running init again changed a member's key")
	}

	// Refused, and nothing written: a name with two roles, a bad name, a
	// seed file left with no entry.
	for _, bad := range [][]auth.Member{
		{{Name: "bob", Role: auth.RoleApprover}},
		{{Name: "carol", Role: auth.RoleAgent}, {Name: "Dave", Role: auth.RoleAgent}},
		{{Name: "x.y", Role: auth.RoleAgent}},
		{{Name: "_", Role: auth.RoleAgent}},
		{{Name: "erin", Role: "root"}},
	} {
		if _, err := auth.Init(dir, bad); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
	if _, err := os.Stat(identity.SeedFile(dir, "carol")); !os.IsNotExist(err) {
		t.Error("a refused init wrote a seed")
	}
	os.WriteFile(identity.SeedFile(dir, "frank"), []byte("SU..."), 0o600)
	if _, err := auth.Init(dir, []auth.Member{{Name: "frank", Role: auth.RoleAgent}}); err == nil {
		t.Error("an orphaned seed file was written over")
	}

	// The server's own parser reads the config, and each member gets
	// its role's permissions.
	_, users, err := auth.ServerAccounts(filepath.Join(dir, auth.ServerConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	roster, err := auth.LoadRoster(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != len(roster.Members) {
		t.Fatalf("%d users in the config, %d members", len(users), len(roster.Members))
	}
	for _, m := range roster.Members {
		i := slices.IndexFunc(users, func(u *server.NkeyUser) bool { return u.Nkey == m.PublicKey })
		if i < 0 {
			t.Errorf("%s is not in the config", m.Name)
			continue
		}
		u := users[i]
		want := auth.Permissions(m.Role, m.Name)
		if u.Account == nil || u.Account.Name != auth.GrantOf(m.Role, m.Name).Account {
			t.Errorf("%s (%s) is in account %v, want %s", m.Name, m.Role, u.Account, auth.GrantOf(m.Role, m.Name).Account)
		}
		if !slices.Equal(u.Permissions.Publish.Allow, want.Publish.Allow) ||
			!slices.Equal(u.Permissions.Subscribe.Allow, want.Subscribe.Allow) || (u.Permissions.Response == nil) != (want.Response == nil) {
			t.Errorf("%s: the config gives %+v", m.Name, u.Permissions)
		}
	}
}

// A member may publish a binding subject only with its own name in it:
// no role but bus and admin has a wildcard where a principal goes in a
// subject it publishes, except the executors, which send for others, and
// the facade, for its clients under its own name.
func TestOnlyExecutorsSendForOthers(t *testing.T) {
	t.Parallel()
	for _, r := range auth.Roles {
		p := auth.Permissions(r, "m")
		for _, s := range p.Publish.Allow {
			for _, binding := range []string{"tool.invoke.", "tool.cancel.", "tool.result.", "toolbus.answer.", events.RequestPrefix + "tool.invoke.", events.RequestPrefix + "tool.cancel."} {
				if !strings.HasPrefix(s, binding) || r == auth.RoleExecutor || r == auth.RoleBus || r == auth.RoleAdmin {
					continue
				}
				// A facade names its clients after its own name
				// (events.ClientPrincipal); no other role may.
				if !strings.HasSuffix(s, ".m") && (r != auth.RoleFacade || !strings.HasSuffix(s, ".m.*")) {
					t.Errorf("%s may publish %s", r, s)
				}
			}
			if s == ">" && r != auth.RoleBus && r != auth.RoleAdmin {
				t.Errorf("%s may publish anything", r)
			}
		}
		for _, s := range p.Subscribe.Allow {
			// In an account of its own, every inbox is the member's.
			if strings.HasPrefix(s, "_INBOX.") && s != identity.InboxPrefix("m")+".>" && auth.GrantOf(r, "m").Account == auth.ServicesAccount {
				t.Errorf("%s may hear %s", r, s)
			}
		}
	}
}
