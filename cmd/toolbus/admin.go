package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/executor"
	"github.com/toolbus/toolbus/internal/human"
	"github.com/toolbus/toolbus/internal/policy"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// withBus runs f with a connection to the bus at natsURL.
func withBus(natsURL, name string, f func(ctx context.Context, b *bus.Bus) error) error {
	log, _ := cli.Logger("warn")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := cli.Connect(ctx, natsURL, name, log)
	if err != nil {
		return err
	}
	defer cli.Close(b)
	return f(ctx, b)
}

func newPolicyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Test, push, roll out, roll back and explain the fleet's policy",
		Long: `The policy is a set of Rego files that judges every call: ALLOW, DENY, or
ASK_USER, which waits for an approver. Executors enforce the built-in policy,
the one 'toolbus up --policy DIR' names, or the one pushed to the fleet.`,
		Example: `  toolbus policy test ./policy -v
  toolbus policy push ./policy --to 10 -m "deny curl to unknown hosts"
  toolbus policy status
  toolbus policy history
  toolbus policy rollback
  toolbus policy explain INVOCATION_ID`,
	}
	cmd.AddCommand(newPolicyTestCommand(), newPolicyPushCommand(), newPolicyStatusCommand(), newPolicyHistoryCommand(),
		newPolicyDiffCommand(), newPolicyRollbackCommand(), newPolicyShadowCommand(), newPolicyExplainCommand())
	holdsCommands(cmd)
	return cmd
}

func newPolicyTestCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "test [DIR]",
		Short: "Run a policy set's Rego tests",
		Long: `Runs the Rego tests (test_ rules) of the policy set in DIR, a directory of
.rego files, with OPA's tester; without DIR, the built-in policy's. Needs no
bus.`,
		Example: "  toolbus policy test\n  toolbus policy test ./policy -v",
	}
	verbose := cmd.Flags().BoolP("verbose", "v", false, "list every test")
	cmd.RunE = func(_ *cobra.Command, args []string) error { return policyTest(args, *verbose) }
	return cmd
}

// policyTest runs a policy set's Rego tests with OPA's tester.
func policyTest(rest []string, verbose bool) error {
	var err error
	files := policy.Files(defaultpolicy.Default())
	source := "the built-in default policy"
	if len(rest) > 1 {
		return usageError{errors.New("policy test takes at most one directory")}
	}
	if len(rest) == 1 {
		if files, err = policy.LoadDir(rest[0]); err != nil {
			return err
		}
		source = rest[0]
	}
	if err := policy.Check(files); err != nil {
		return err
	}
	results, err := policy.Test(context.Background(), files)
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return fmt.Errorf("%s has no Rego tests: a test is a rule named test_... in a file named *_test.rego (policy/README.md)", source)
	}
	passed, failed := 0, 0
	for _, r := range results {
		switch {
		case r.Pass:
			passed++
			if verbose {
				fmt.Printf("PASS %s\n", r.Name)
			}
		case r.Skip:
		default:
			failed++
			fmt.Printf("FAIL %s (%s) %s\n", r.Name, r.File, r.Error)
		}
	}
	fmt.Printf("%s: %d passed, %d failed\n", source, passed, failed)
	switch {
	case failed > 0:
		return fmt.Errorf("%d of the policy's tests failed", failed)
	case passed == 0:
		return fmt.Errorf("none of the policy's tests passed: every one was skipped")
	}
	return nil
}

func newAllowlistCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "allowlist",
		Short: "List and revoke the answers approvers asked to remember",
		Long: `The allowlist holds the "always allow" answers of approvers: a tool, an MCP
server, a command or a path the policy then allows without asking.`,
		Example: "  toolbus allowlist list\n  toolbus allowlist revoke KEY",
	}
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the allowlist's entries",
		Long:    "Lists the allowlist's entries: their key (for revoke), scope, tool, server, what they cover, who added them and when.",
		Example: "  toolbus allowlist list\n  toolbus allowlist list --json",
		Args:    noArgs,
	}
	listJSON := list.Flags().Bool("json", false, "print as JSON")
	list.RunE = func(cmd *cobra.Command, _ []string) error {
		return withBus(busURLFor(cmd), "toolbus-allowlist", func(ctx context.Context, b *bus.Bus) error {
			kv, err := executor.OpenAllowlistBucket(ctx, b.JetStream())
			if err != nil {
				return err
			}
			return allowlistList(ctx, kv, *listJSON)
		})
	}
	revoke := &cobra.Command{
		Use:   "revoke KEY...",
		Short: "Revoke allowlist entries",
		Long: `Revokes the allowlist entries of the given keys (see allowlist list). An
executor removes them and records who revoked what.`,
		Example: "  toolbus allowlist revoke $(toolbus allowlist list --json | jq -r '.[].key')",
	}
	revokeJSON := revoke.Flags().Bool("json", false, "print what was revoked as JSON: {\"revoked\": [KEY...], \"unknown\": [KEY...]}")
	revoke.RunE = func(cmd *cobra.Command, keys []string) error {
		if len(keys) == 0 {
			return usageError{errors.New("allowlist revoke takes the keys to revoke (see allowlist list)")}
		}
		return allowlistRevoke(busURLFor(cmd), keys, *revokeJSON)
	}
	cmd.AddCommand(list, revoke)
	holdsCommands(cmd)
	return cmd
}

// allowlistRevoke revokes keys through an executor, which records who
// revoked what.
func allowlistRevoke(natsURL string, keys []string, asJSON bool) error {
	return withBus(natsURL, "toolbus-allowlist", func(ctx context.Context, b *bus.Bus) error {
		reply, err := approve.Revoke(ctx, b.Conn(), cli.Identity("cli"), b.Principal(), keys)
		if reply == nil {
			return err
		}
		if asJSON {
			out := struct {
				Revoked []string `json:"revoked"`
				Unknown []string `json:"unknown"`
			}{append([]string{}, reply.Revoked...), append([]string{}, reply.Unknown...)}
			if werr := writeJSON(os.Stdout, out); werr != nil && err == nil {
				err = werr
			}
		} else {
			for _, key := range reply.Revoked {
				fmt.Println("revoked", key)
			}
		}
		if err == nil && len(reply.Unknown) > 0 {
			quoted := make([]string, len(reply.Unknown))
			for i, k := range reply.Unknown {
				quoted[i] = strconv.Quote(k)
			}
			err = fmt.Errorf("no allowlist entry %s", strings.Join(quoted, ", "))
		}
		return err
	})
}

func allowlistList(ctx context.Context, kv jetstream.KeyValue, asJSON bool) error {
	type row struct {
		Key string `json:"key"`
		events.AllowRecord
	}
	rows := []row{}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return err
	}
	for key := range lister.Keys() {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		var r events.AllowRecord
		if json.Unmarshal(e.Value(), &r) == nil {
			rows = append(rows, row{key, r})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].AddedAt.Before(rows[j].AddedAt) })
	if asJSON {
		return writeJSON(os.Stdout, rows)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tSCOPE\tTOOL\tSERVER\tCOVERS\tBY\tADDED")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Key, r.Scope, shown(r.Tool), shown(r.Server), shown(covers(r.AllowEntry)), shown(r.By), human.Time(r.AddedAt))
	}
	return w.Flush()
}

// covers says what an entry allows beyond its tool: a command line, a
// command with any arguments, a path.
func covers(e policy.AllowEntry) string {
	switch {
	case e.Scope == "command" && len(e.Argv) > 0 && e.Exact:
		return strings.Join(e.Argv, " ")
	case e.Scope == "command" && len(e.Argv) > 0:
		return strings.Join(e.Argv, " ") + " …"
	case e.Scope == "command":
		return e.Prefix + " …"
	}
	return e.Path
}

// shown is s for a terminal: "-" when empty, quoted when it holds
// anything but printable text (a remembered command line is an agent's
// words, and may hold escape sequences).
func shown(s string) string {
	switch {
	case s == "":
		return "-"
	case strings.IndexFunc(s, func(r rune) bool { return !unicode.IsGraphic(r) || r == '\t' }) >= 0:
		return strconv.QuoteToGraphic(s)
	}
	return s
}

func newCancelCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel INVOCATION_ID",
		Short: "Cancel a running call",
		Long: `Cancels the call INVOCATION_ID (toolbus call --id, or the id the audit
trail shows): the executor running it stops the tool, and the call ends
CANCELLED. Fails when no executor is running that call.`,
		Example: "  toolbus call run_shell_command --id build-1 --args '{\"command\": \"make\"}' &\n  toolbus cancel build-1",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{errors.New("cancel takes one invocation id")}
			}
			return cancelCall(busURLFor(cmd), args[0])
		},
	}
}

func cancelCall(natsURL, id string) error {
	return withBus(natsURL, "toolbus-cancel", func(ctx context.Context, b *bus.Bus) error {
		data, err := events.Encode(&events.CancelRequest{Header: events.Header{Sender: cli.Identity("cli")}, InvocationID: id})
		if err != nil {
			return err
		}
		// Every executor hears a cancel; the one running the call answers.
		inbox := b.Conn().NewRespInbox()
		sub, err := b.Conn().SubscribeSync(inbox)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		if err := b.Conn().PublishRequest(events.Request(events.SubjectCancel), inbox, data); err != nil {
			return err
		}
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			m, err := sub.NextMsg(time.Until(deadline))
			if err != nil {
				break
			}
			if string(m.Data) == "cancelled" {
				fmt.Println("cancelled", id)
				return nil
			}
		}
		return fmt.Errorf("no executor is running invocation %s", id)
	})
}
