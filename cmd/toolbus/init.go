package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/auth"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/identity"
)

func newInitCommand() *cobra.Command {
	var add memberFlags
	var remove nameFlags
	cmd := &cobra.Command{
		Use:   "init DIR",
		Short: "Make a fleet's identities",
		Long: `Makes a fleet's identities in DIR: a seed per member (DIR/NAME.nk), the
roster, and the bus's authorization config (bus --identities DIR). Parts
connect with TOOLBUS_IDENTITY=DIR/NAME.nk.

With no --add it makes one member of each role, named after it. Run again,
it adds members and keeps every existing key. --remove takes members out: the
nodes refuse them once they read the identities again (SIGHUP).`,
		Example: `  toolbus init ./fleet
  toolbus init ./fleet --add executor:executor2 --add agent:ci
  toolbus init ./fleet --remove ci`,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("init takes one directory, got %q", args)}
			}
			return initFleet(args[0], add, remove)
		},
	}
	cmd.Flags().Var(&add, "add", "a member to make (repeatable); roles: bus, admin, registry, executor, approver, auditor, agent")
	cmd.Flags().Var(&remove, "remove", "a member to take out (repeatable): refused by the nodes once they read the identities again (SIGHUP), its connections closed")
	return cmd
}

// initFleet makes the members add in dir, with every role's default
// member when add is empty, or takes the members remove out.
func initFleet(dir string, add memberFlags, remove nameFlags) error {
	if len(remove) > 0 {
		if len(add) > 0 {
			return usageError{errors.New("init: --add and --remove go in separate runs")}
		}
		removed, err := auth.Remove(dir, remove)
		if err != nil {
			return err
		}
		for _, m := range removed {
			fmt.Printf("removed %-9s %s\n", m.Role, m.Name)
		}
		fmt.Println("\nRunning nodes refuse them once they read the identities again:  kill -HUP <bus pid>")
		return nil
	}
	want := []auth.Member(add)
	if len(want) == 0 {
		want = auth.DefaultMembers()
	}
	added, err := auth.Init(dir, want)
	if err != nil {
		return err
	}
	for _, m := range added {
		fmt.Printf("made %-9s %-16s %s\n", m.Role, m.Name, identity.SeedFile(dir, m.Name))
	}
	if len(added) == 0 {
		fmt.Println("nothing to make: every member exists")
	}
	fmt.Printf("\nThe bus admits only these members:  bus --identities %s\n", dir)
	fmt.Println("A running bus admits members added since on SIGHUP:  kill -HUP <bus pid>")
	fmt.Printf("Each part connects as one of them:  %s=%s toolbus ...\n", cli.IdentityEnv, filepath.Join(dir, "NAME"+identity.SeedSuffix))
	fmt.Printf("An operator's own nats-server.conf can include %s.\n", filepath.Join(dir, auth.ServerConfigFile))
	return nil
}

// nameFlags collects --remove NAME.
type nameFlags []string

func (n *nameFlags) String() string { return strings.Join(*n, ",") }

func (n *nameFlags) Type() string { return "NAME" }

func (n *nameFlags) Set(v string) error {
	if err := events.ValidPrincipal(v); err != nil {
		return err
	}
	*n = append(*n, v)
	return nil
}

// memberFlags collects --add ROLE:NAME.
type memberFlags []auth.Member

func (m *memberFlags) String() string {
	names := make([]string, len(*m))
	for i, member := range *m {
		names[i] = string(member.Role) + ":" + member.Name
	}
	return strings.Join(names, ",")
}

func (m *memberFlags) Type() string { return "ROLE:NAME" }

func (m *memberFlags) Set(v string) error {
	role, name, ok := strings.Cut(v, ":")
	if !ok {
		return fmt.Errorf("%q: want ROLE:NAME", v)
	}
	r, err := auth.ParseRole(role)
	if err != nil {
		return err
	}
	*m = append(*m, auth.Member{Name: name, Role: r})
	return nil
}
