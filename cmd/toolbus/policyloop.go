package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/aymanbagabas/go-udiff"
	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/human"
	"github.com/toolbus/toolbus/internal/identity"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/redact"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// The policy team's loop: push (to the whole fleet or a share of it),
// status, history, diff and rollback. What the fleet enforces lives in
// the policy bucket (internal/policy/fleet.go); every change is recorded
// in the trail as a policy.pushed event.

func newPolicyPushCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "push DIR",
		Short: "Test a policy set, sign it, then enforce it on the fleet or a share of it",
		Long: `Tests the policy set in DIR (a directory of .rego files) and, when it compiles
and its tests pass, signs it with the key this command connects with (or the
seed --sign names) and pushes it: every executor whose trust list holds the
key enforces it from the moment it receives it, and the push is recorded in
the audit stream.

--to PERCENT, --principals and --workspaces roll it out to a share of the
calls only (a staged rollout): the share is chosen by a stable hash of the
principal, so that one agent sees one policy; the stable revision goes on
for the rest. --to 100 completes the rollout.`,
		Example: `  toolbus policy push ./policy -m "deny curl to unknown hosts"
  toolbus policy push ./policy --to 10
  toolbus policy push ./policy --principals agent-7,agent-9
  toolbus policy push ./policy --to 100`,
	}
	to := cmd.Flags().Int("to", 100, "the percentage of principals the revision decides for (1-100); the rest keep the stable revision")
	principals := cmd.Flags().StringSlice("principals", nil, "principals whose calls the revision decides, whatever --to says")
	workspaces := cmd.Flags().StringSlice("workspaces", nil, "workspaces (an executor's --workspace-name) whose calls the revision decides")
	message := cmd.Flags().StringP("message", "m", "", "why: kept with the revision (policy history) and in the trail")
	sign := cmd.Flags().String("sign", "", "the seed file of the key to sign with (default: the identity this command connects with)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError{errors.New("policy push takes one directory")}
		}
		share := policy.Share{Percent: *to, Principals: *principals, Workspaces: *workspaces}
		if !cmd.Flags().Changed("to") && (len(*principals) > 0 || len(*workspaces) > 0) {
			share.Percent = 0 // only those named
		}
		if share.Percent < 0 || share.Percent > 100 {
			return usageError{fmt.Errorf("--to %d: a share is 0 to 100", share.Percent)}
		}
		return policyPush(busURLFor(cmd), args[0], *sign, *message, share)
	}
	return cmd
}

func policyPush(natsURL, dir, signWith, message string, share policy.Share) error {
	files, err := policy.LoadDir(dir)
	if err != nil {
		return err
	}
	key, err := pushKey(natsURL, signWith)
	if err != nil {
		return fmt.Errorf("policy refused, nothing pushed: %w", err)
	}
	return withBus(natsURL, "toolbus-policy", func(ctx context.Context, b *bus.Bus) error {
		if err := mayPushPolicy(ctx, b); err != nil {
			return err
		}
		id := cli.Identity("cli")
		pushed, rollout, err := policy.Push(ctx, b.JetStream(), files, policy.PushOptions{By: id.ID, Key: key, Message: message, Share: share})
		if err != nil {
			return fmt.Errorf("policy refused, nothing pushed: %w", err)
		}
		recordPolicyChange(ctx, b, id, pushed, rollout.Share.String(), message)
		if key == nil {
			fmt.Fprintln(os.Stderr, "warning: pushed unsigned (this command has no identity and no --sign): executors with a trust list refuse it")
		}
		shareNote := "executors apply it as they receive it"
		if rollout.Next == pushed.Revision {
			shareNote = fmt.Sprintf("rolled out to %s; %s stays for the rest (policy status)", rollout.Share, policy.RevisionOrOwn(rollout.Stable))
		}
		fmt.Printf("pushed %s (%d files, %d tests passed); %s\n", pushed.Revision, len(files), pushed.Tests, shareNote)
		return nil
	})
}

// pushKey is the key a push signs with: the seed file named, else the
// identity the command connects with; nil for none.
func pushKey(natsURL, seedFile string) (nkeys.KeyPair, error) {
	if seedFile != "" {
		return identity.KeyOf(seedFile)
	}
	return cli.SigningKey(natsURL)
}

// mayPushPolicy asks the bus first: it refuses the push of one who may
// not, but says so only to the connection's error handler, and the push
// would wait for its answer until the deadline.
func mayPushPolicy(ctx context.Context, b *bus.Bus) error {
	if ok, err := b.MayPublish(ctx, policy.ActiveSubject()); err == nil && !ok {
		return fmt.Errorf("policy refused, nothing pushed: the bus does not let %s push a policy (publish %s); an admin's identity does", b.Principal(), policy.ActiveSubject())
	}
	return nil
}

// recordPolicyChange records a push or a rollback in the audit stream,
// with the revision's digest and signature, for an auditor to check.
func recordPolicyChange(ctx context.Context, b *bus.Bus, id events.Identity, p *policy.Pushed, share, message string) {
	d := p.Files.Digest()
	ev := &events.PolicyEvent{Header: events.Header{Sender: id}, Status: "pushed", Revision: p.Revision, Source: "bucket",
		Digest: hex.EncodeToString(d[:]), Share: share, Message: message}
	sig := p.Signature // this push's; a rollback's is the revision's first
	if sig == nil && len(p.Signatures) > 0 {
		sig = p.Signatures[0]
	}
	if sig != nil {
		ev.Signer, ev.Signature = sig.Signer, sig.Sig
	}
	data, err := events.Encode(ev)
	if err == nil {
		err = bus.RecordOnce(ctx, b.Conn(), events.SubjectPolicyPrefix+"pushed", "policy-pushed."+p.Revision+"."+events.NewCapability(), data)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "done, but not recorded in the audit stream: %v\n", err)
	}
}

func newPolicyStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "status",
		Aliases: []string{"show"},
		Short:   "Show which revision the fleet enforces, for which share",
		Long: `Shows what the fleet enforces: the stable revision, and during a staged rollout
the revision rolled out and its share; who pushed each, when, and who signed it.`,
		Example: "  toolbus policy status\n  toolbus policy status --json",
		Args:    noArgs,
	}
	asJSON := cmd.Flags().Bool("json", false, "print as JSON, the revisions' files included")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return policyStatus(busURLFor(cmd), *asJSON) }
	return cmd
}

func policyStatus(natsURL string, asJSON bool) error {
	return withBus(natsURL, "toolbus-policy", func(ctx context.Context, b *bus.Bus) error {
		r, err := policy.Active(ctx, b.JetStream())
		if err != nil {
			return err
		}
		shadow, err := policy.ActiveShadow(ctx, b.JetStream())
		if err != nil {
			return err
		}
		if r == nil {
			if asJSON {
				return writeJSON(os.Stdout, struct {
					Shadow *policy.Shadow `json:"shadow,omitempty"`
				}{shadow})
			}
			fmt.Printf("no policy pushed: executors enforce their own (the default is %s)\n", policy.Files(defaultpolicy.Default()).Revision())
			printShadow(shadow)
			return nil
		}
		kv, err := policy.Bucket(ctx, b.JetStream())
		if err != nil {
			return err
		}
		status := struct {
			*policy.Rollout
			StableSet *policy.Pushed `json:"stable_set,omitempty"`
			NextSet   *policy.Pushed `json:"next_set,omitempty"`
			Shadow    *policy.Shadow `json:"shadow,omitempty"`
		}{Rollout: r, Shadow: shadow}
		for _, s := range []struct {
			rev string
			to  **policy.Pushed
		}{{r.Stable, &status.StableSet}, {r.Next, &status.NextSet}} {
			if s.rev != "" {
				if *s.to, err = policy.Revision(ctx, kv, s.rev); err != nil {
					return err
				}
			}
		}
		if asJSON {
			return writeJSON(os.Stdout, status)
		}
		stableShare := "all calls"
		if r.Next != "" {
			stableShare = "the rest"
		}
		printRevision("stable", status.StableSet, stableShare)
		if r.Next != "" {
			printRevision("rolling out", status.NextSet, r.Share.String())
		}
		fmt.Printf("changed: %s by %s", human.Time(r.At), r.By)
		if r.Message != "" {
			fmt.Printf(": %s", r.Message)
		}
		fmt.Println()
		printShadow(shadow)
		return nil
	})
}

func printShadow(s *policy.Shadow) {
	if s != nil {
		fmt.Printf("in shadow:   %s, since %s by %s (policy shadow report)\n", s.Revision, human.Time(s.At), s.By)
	}
}

func printRevision(what string, p *policy.Pushed, share string) {
	if p == nil {
		fmt.Printf("%-12s the executors' own policy (%s)\n", what+":", share)
		return
	}
	names := make([]string, 0, len(p.Files))
	for n := range p.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Printf("%-12s %s (%s)\n  pushed:    %s by %s\n  signed by: %s\n  files:     %s\n", what+":", p.Revision, share,
		human.Time(p.At), p.By, signerOf(p), strings.Join(names, ", "))
	if p.Message != "" {
		fmt.Printf("  message:   %s\n", p.Message)
	}
}

func signerOf(p *policy.Pushed) string {
	if len(p.Signatures) == 0 {
		return "(unsigned)"
	}
	keys := make([]string, len(p.Signatures))
	for i, s := range p.Signatures {
		keys[i] = s.Signer
	}
	return strings.Join(keys, ", ")
}

func newPolicyHistoryCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history",
		Short: "List every revision pushed: who, when, why, its tests and the share it holds",
		Long: `Lists every policy revision pushed to the fleet, the newest first: its time,
its author (the pusher, as the bus proved it), the tests that passed, the share
of the fleet it holds now, its signer and the pusher's message. The history
lives on the bus.`,
		Example: "  toolbus policy history\n  toolbus policy history --json",
		Args:    noArgs,
	}
	asJSON := cmd.Flags().Bool("json", false, "print as JSON, files included")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return withBus(busURLFor(cmd), "toolbus-policy", func(ctx context.Context, b *bus.Bus) error {
			history, err := policy.History(ctx, b.JetStream())
			if err != nil {
				return err
			}
			r, err := policy.Active(ctx, b.JetStream())
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(os.Stdout, history)
			}
			if len(history) == 0 {
				fmt.Println("no policy pushed")
				return nil
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "REVISION\tPUSHED\tBY\tTESTS\tHOLDS\tSIGNED BY\tMESSAGE")
			for _, p := range history {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.Revision, human.Time(p.At), p.By, p.Tests, holds(r, p.Revision), shortKey(signerOf(p)), oneLine(p.Message, 60))
			}
			return w.Flush()
		})
	}
	return cmd
}

// holds says the share of the fleet's calls revision decides now.
func holds(r *policy.Rollout, revision string) string {
	switch {
	case r == nil:
		return "-"
	case r.Next == revision:
		return r.Share.String()
	case r.Stable == revision && r.Next != "":
		return "the rest"
	case r.Stable == revision:
		return "all"
	}
	return "-"
}

func shortKey(k string) string {
	if len(k) > 12 && !strings.HasPrefix(k, "(") {
		return k[:12] + "…"
	}
	return k
}

func newPolicyDiffCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "diff REV [REV]",
		Short: "Show what changed between two revisions, file by file",
		Long: `Shows a unified diff of the files of two pushed revisions; with one, from it to
the stable revision in force (or the built-in policy when none was pushed).
"builtin" names the built-in policy.`,
		Example: "  toolbus policy diff sha256:1f0c9e2a7b3d4c5e\n  toolbus policy diff sha256:1f0c9e2a7b3d4c5e sha256:8e7d6c5b4a392817",
		Args:    cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withBus(busURLFor(cmd), "toolbus-policy", func(ctx context.Context, b *bus.Bus) error {
				kv, err := policy.Bucket(ctx, b.JetStream())
				if err != nil {
					return err
				}
				if len(args) == 1 {
					r, err := policy.Active(ctx, b.JetStream())
					if err != nil {
						return err
					}
					to := "builtin"
					if r != nil && r.Stable != "" {
						to = r.Stable
					}
					args = append(args, to)
				}
				sets := make([]policy.Files, 2)
				for i, rev := range args {
					if rev == "builtin" {
						sets[i] = policy.Files(defaultpolicy.Default())
						continue
					}
					p, err := policy.Revision(ctx, kv, rev)
					if err != nil {
						return err
					}
					sets[i] = p.Files
				}
				fmt.Print(diffSets(args[0], sets[0], args[1], sets[1]))
				return nil
			})
		},
	}
}

// diffSets is the unified diff of two policy sets, a file at a time.
func diffSets(fromName string, from policy.Files, toName string, to policy.Files) string {
	var names []string
	for n := range from {
		names = append(names, n)
	}
	for n := range to {
		if _, ok := from[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		d := udiff.Unified(fromName+"/"+n, toName+"/"+n, from[n], to[n])
		b.WriteString(d)
	}
	if b.Len() == 0 {
		return "the two revisions have the same files\n"
	}
	return b.String()
}

func newPolicyRollbackCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rollback [REV]",
		Short: "Return the fleet to a revision: the previous one by default",
		Long: `Returns the whole fleet to REV, a revision pushed before (policy history); without
it, ends a staged rollout (its stable revision stays for every call), or else
returns to the stable revision in force before this one. Executors enforce it as
they receive it, and only when its signature is one their trust list holds.`,
		Example: "  toolbus policy rollback\n  toolbus policy rollback sha256:1f0c9e2a7b3d4c5e",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rev := ""
			if len(args) == 1 {
				rev = args[0]
			}
			return withBus(busURLFor(cmd), "toolbus-policy", func(ctx context.Context, b *bus.Bus) error {
				if err := mayPushPolicy(ctx, b); err != nil {
					return err
				}
				id := cli.Identity("cli")
				r, err := policy.Rollback(ctx, b.JetStream(), rev, id.ID)
				if err != nil {
					return fmt.Errorf("nothing rolled back: %w", err)
				}
				if r.Stable != "" {
					kv, err := policy.Bucket(ctx, b.JetStream())
					if err != nil {
						return err
					}
					if p, err := policy.Revision(ctx, kv, r.Stable); err == nil {
						recordPolicyChange(ctx, b, id, p, "all", r.Message)
					}
				}
				fmt.Printf("%s: the fleet enforces %s for every call\n", r.Message, policy.RevisionOrOwn(r.Stable))
				return nil
			})
		},
	}
}

func newPolicyShadowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shadow",
		Short: "Run a candidate policy beside the one in force, on live calls, enforcing nothing",
		Long: `A candidate in shadow is judged by every executor beside the policy in force, on
every call, off the call's path: it decides nothing, and each call it would
have decided otherwise (its verdict, or the rule behind it) is recorded.
'shadow report' says what it would have changed; 'shadow stop' ends it. One
candidate at a time; a push or a rollback of the policy in force ends it.`,
		Example: `  toolbus policy shadow push ./policy-next -m "deny curl"
  toolbus policy shadow report --since 1h
  toolbus policy shadow stop`,
	}
	push := &cobra.Command{
		Use:   "push DIR",
		Short: "Test and sign a candidate, and put it in shadow on every executor",
		Long: `Tests the policy set in DIR and, when it compiles and its tests pass, signs it
as a push is signed and makes it the candidate in shadow, in place of any
other: every executor whose trust list holds the key judges each call with it
too, after the policy in force decided, and enforces nothing of it.`,
		Example: `  toolbus policy shadow push ./policy-next -m "deny curl to unknown hosts"`,
		Args:    cobra.ExactArgs(1),
	}
	message := push.Flags().StringP("message", "m", "", "why: kept with the revision (policy history)")
	sign := push.Flags().String("sign", "", "the seed file of the key to sign with (default: the identity this command connects with)")
	push.RunE = func(cmd *cobra.Command, args []string) error {
		natsURL := busURLFor(cmd)
		files, err := policy.LoadDir(args[0])
		if err != nil {
			return err
		}
		key, err := pushKey(natsURL, *sign)
		if err != nil {
			return fmt.Errorf("candidate refused, nothing in shadow: %w", err)
		}
		return withBus(natsURL, "toolbus-policy", func(ctx context.Context, b *bus.Bus) error {
			if err := mayPushPolicy(ctx, b); err != nil {
				return err
			}
			id := cli.Identity("cli")
			pushed, err := policy.PushShadow(ctx, b.JetStream(), files, policy.PushOptions{By: id.ID, Key: key, Message: *message})
			if err != nil {
				return fmt.Errorf("candidate refused, nothing in shadow: %w", err)
			}
			fmt.Printf("%s in shadow (%d files, %d tests passed): executors judge every call with it too, and enforce nothing of it; policy shadow report says what it would change\n",
				pushed.Revision, len(files), pushed.Tests)
			return nil
		})
	}
	stop := &cobra.Command{
		Use:     "stop",
		Short:   "End the shadow",
		Long:    "Ends the shadow: executors stop judging calls with the candidate, and record their last counts.",
		Example: "  toolbus policy shadow stop",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withBus(busURLFor(cmd), "toolbus-policy", func(ctx context.Context, b *bus.Bus) error {
				if err := mayPushPolicy(ctx, b); err != nil {
					return err
				}
				rev, err := policy.StopShadow(ctx, b.JetStream())
				switch {
				case err != nil:
					return err
				case rev == "":
					fmt.Println("no candidate was in shadow")
				default:
					fmt.Printf("%s is no longer in shadow\n", rev)
				}
				return nil
			})
		},
	}
	cmd.AddCommand(push, newPolicyShadowReportCommand(), stop)
	return cmd
}

func newPolicyShadowReportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Say what the candidate in shadow would have changed, on the live calls",
		Long: `Reads what the executors recorded of the candidate in shadow (the newest, or
--revision's), and says, by verdict pair, tool and rule, how many of the live
calls it would have decided otherwise, with examples: the report of 'audit
whatif', with its filters, on live traffic instead of a replay.`,
		Example: "  toolbus policy shadow report\n  toolbus policy shadow report --since 1h --tool run_shell_command --json",
		Args:    noArgs,
	}
	fs := cmd.Flags()
	af := newAuditFlags(fs)
	query := queryFlags(fs)
	revision := fs.String("revision", "", "the candidate to report on (default: the newest)")
	asJSON := fs.Bool("json", false, "print the report as JSON, every change with its call")
	calls := fs.Int("calls", 20, "calls shown for each kind of change (0: all)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		q, err := query()
		if err != nil {
			return err
		}
		if err := af.window(&q); err != nil {
			return err
		}
		return af.run(busURLFor(cmd), func(ctx context.Context, b *bus.Bus, red *redact.Redactor) error {
			w, counts, err := audit.ShadowReport(ctx, b.JetStream(), q, *revision)
			if err != nil {
				return err
			}
			if w.Revision == "" {
				fmt.Println("no candidate in shadow has judged a call (policy shadow push)")
				return nil
			}
			redactChanges(w, red)
			if *asJSON {
				return writeJSON(os.Stdout, struct {
					*audit.WhatIf
					Counts *audit.ShadowCounts `json:"counts"`
				}{w, counts})
			}
			judged := fmt.Sprintf("judged live by the candidate %s on %d executors (%d dropped: its queue was full)", w.Revision, counts.Executors, counts.Dropped)
			return writeWhatIf(os.Stdout, w, judged, *calls)
		})
	}
	return cmd
}
