package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/human"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/redact"
	defaultpolicy "github.com/toolbus/toolbus/policy"
)

// wouldChange is whatif's failure under --fail-on-change: n decisions
// would change.
type wouldChange struct{ n int }

func (w wouldChange) Error() string { return fmt.Sprintf("%d decisions would change", w.n) }

func (wouldChange) ExitCode() int { return exitWouldChange }

func (wouldChange) ErrorType() string { return "WOULD_CHANGE" }

func newAuditWhatIfCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "whatif --policy DIR",
		Short: "Judge the recorded calls again under another policy set",
		Long: `Judges the recorded calls again under the policy set in DIR, executing
nothing, and reports which decisions would change: from what to what, for
which calls, with the old and the new reason.

With --fail-on-change it exits 3 when any would, so that CI can tell a policy
change that changes decisions from a failure to check (1) or a mistake in the
command line (2).`,
		Example: `  toolbus audit whatif --policy ./policy --since 7d
  toolbus audit whatif --policy ./policy --fail-on-change --json > whatif.json`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	af := newAuditFlags(fs)
	query := queryFlags(fs)
	dir := fs.String("policy", "", "the policy set to judge the recorded calls under, a `DIR` of .rego files; required")
	asJSON := fs.Bool("json", false, "print the report as JSON, every change with its call")
	calls := fs.Int("calls", 20, "calls shown for each kind of change (0: all)")
	failOnChange := fs.Bool("fail-on-change", false, "exit with status 3 when any verdict would change (for CI)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return auditWhatIf(busURLFor(cmd), af, query, *dir, *asJSON, *calls, *failOnChange)
	}
	return cmd
}

// auditWhatIf judges recorded calls again under another policy set.
func auditWhatIf(natsURL string, af *auditFlags, query func() (audit.Query, error), dir string, asJSON bool, calls int, failOnChange bool) error {
	if dir == "" {
		return usageError{errors.New("audit whatif needs --policy DIR, the policy set to judge the recorded calls under")}
	}
	q, err := query()
	if err != nil {
		return err
	}
	if err := af.window(&q); err != nil {
		return err
	}
	files, err := policy.LoadDir(dir)
	if err != nil {
		return usageError{err}
	}
	return af.run(natsURL, func(ctx context.Context, b *bus.Bus, red *redact.Redactor) error {
		pol, err := policy.Compile(ctx, files)
		if err != nil {
			return fmt.Errorf("the policy set %s is refused: %w", dir, err)
		}
		w, err := audit.RunWhatIf(ctx, b.JetStream(), q, pol)
		if err != nil {
			return err
		}
		redactChanges(w, red)
		if asJSON {
			err = writeJSON(os.Stdout, w)
		} else {
			err = writeWhatIf(os.Stdout, w, fmt.Sprintf("judged again under %s (%s)", dir, w.Revision), calls)
		}
		if err == nil && failOnChange && len(w.Changes) > 0 {
			return wouldChange{len(w.Changes)}
		}
		return err
	})
}

// redactChanges hides the secrets in a report's changes: their calls and
// the reasons of the new decisions.
func redactChanges(w *audit.WhatIf, red *redact.Redactor) {
	for i := range w.Changes {
		w.Changes[i].Record = audit.Redact(w.Changes[i].Record, red)
		w.Changes[i].Reason = red.Text(w.Changes[i].Reason)
	}
}

// writeWhatIf prints what another policy would change (audit whatif, on
// recorded calls; policy shadow report, on live ones): the decisions
// that would change, by verdict pair, then by tool and the rule (its
// reason) behind the new decision, with calls as examples.
func writeWhatIf(w io.Writer, r *audit.WhatIf, judged string, calls int) error {
	bw := bufio.NewWriter(w)
	changed := 0
	for _, c := range r.Changes {
		if c.From != c.To {
			changed++
		}
	}
	fmt.Fprintf(bw, "%d invocations; %d decisions %s in %s: %d would change, %d unchanged, %d keep their verdict with another reason",
		r.Invocations, r.Replayed, judged, r.Stats.Elapsed.Round(time.Millisecond), changed, r.Unchanged, r.SameVerdict)
	if r.NotJudged > 0 {
		fmt.Fprintf(bw, "; %d never judged (no decision with its input on record)", r.NotJudged)
	}
	fmt.Fprintln(bw)
	if r.Lossy > 0 {
		fmt.Fprintf(bw, "%d of the inputs held a file name that is not UTF-8, recorded approximately\n", r.Lossy)
	}
	changes := slices.Clone(r.Changes)
	slices.SortStableFunc(changes, func(a, b audit.Change) int {
		return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To), cmp.Compare(a.Record.Tool, b.Record.Tool), cmp.Compare(a.Reason, b.Reason))
	})
	for i := 0; i < len(changes); {
		from, to := changes[i].From, changes[i].To
		n := i
		for n < len(changes) && changes[n].From == from && changes[n].To == to {
			n++
		}
		fmt.Fprintf(bw, "\n%s → %s: %d\n", from, to, n-i)
		for k := i; k < n; {
			tool, rule := changes[k].Record.Tool, changes[k].Reason
			m := k
			for m < n && changes[m].Record.Tool == tool && changes[m].Reason == rule {
				m++
			}
			fmt.Fprintf(bw, "  %s, by the rule %q: %d\n", tool, oneLine(rule, 120), m-k)
			for e, c := range changes[k:m] {
				if calls > 0 && e == calls {
					fmt.Fprintf(bw, "    ... and %d more (--calls 0 shows all)\n", m-k-calls)
					break
				}
				rec := c.Record
				fmt.Fprintf(bw, "    %s  %s  %s  %s\n      was: %s\n", human.Time(rec.Time), rec.ID, rec.Caller.ID,
					oneLine(human.JSON(rec.Args), 100), oneLine(rec.Reason, 120))
			}
			k = m
		}
		i = n
	}
	if len(r.Failed) > 0 {
		fmt.Fprintf(bw, "\n%d recorded decisions could not be judged again:\n", len(r.Failed))
		for _, f := range r.Failed {
			fmt.Fprintf(bw, "  %s: %s\n", f.ID, f.Reason)
		}
	}
	return bw.Flush()
}

func newPolicyExplainCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "explain INVOCATION_ID",
		Short: "Say which rules of the policy make a recorded call's decision",
		Long: `Judges the recorded call INVOCATION_ID again under the pushed policy (or the
built-in one, or DIR's with --policy) with OPA's trace, and lists the rules
that held, in the order the evaluation reached them.`,
		Example: "  toolbus policy explain INVOCATION_ID\n  toolbus policy explain INVOCATION_ID --policy ./policy --trace",
	}
	fs := cmd.Flags()
	af := newAuditFlags(fs)
	dir := fs.String("policy", "", "explain under the policy set in this `DIR` of .rego files (default: the pushed policy, else the built-in one)")
	trace := fs.Bool("trace", false, "print OPA's whole trace too")
	asJSON := fs.Bool("json", false, "print the explanation as JSON")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError{errors.New("policy explain takes one invocation id")}
		}
		return explain(busURLFor(cmd), af, args[0], *dir, *trace, *asJSON)
	}
	return cmd
}

// explain prints why the policy of dir (or the active one) decides as it
// does about the recorded call id, read from the bus at natsURL.
func explain(natsURL string, af *auditFlags, id, dir string, trace, asJSON bool) error {
	since, err := parseWhen("since", *af.since, time.Now())
	if err != nil {
		return err
	}
	var files policy.Files
	if dir != "" {
		if files, err = policy.LoadDir(dir); err != nil {
			return usageError{err}
		}
	}
	return af.run(natsURL, func(ctx context.Context, b *bus.Bus, red *redact.Redactor) error {
		pol, source, err := explainingPolicy(ctx, b.JetStream(), files, dir)
		if err != nil {
			return err
		}
		r, ex, err := audit.Explain(ctx, b.JetStream(), id, since, pol)
		if err != nil {
			return err
		}
		ex.Trace = red.Text(ex.Trace)
		ex.Decision.Reason = red.Text(ex.Decision.Reason)
		r = audit.Redact(r, red)
		if asJSON {
			out := struct {
				ID       string            `json:"id"`
				Recorded map[string]string `json:"recorded"`
				Policy   string            `json:"policy"`
				Decision map[string]string `json:"decision"`
				Rules    []policy.RuleHit  `json:"rules"`
				Trace    string            `json:"trace,omitempty"`
			}{ID: r.ID, Recorded: map[string]string{"verdict": string(r.Verdict), "reason": r.Reason, "revision": r.PolicyRevision},
				Policy: source, Rules: ex.Rules,
				Decision: map[string]string{"verdict": string(ex.Decision.Verdict), "reason": ex.Decision.Reason, "revision": ex.Decision.Revision}}
			if trace {
				out.Trace = ex.Trace
			}
			return writeJSON(os.Stdout, out)
		}
		bw := bufio.NewWriter(os.Stdout)
		fmt.Fprintf(bw, "invocation %s: %s by %s, arguments %s\n", r.ID, r.Tool, r.Caller.ID, oneLine(human.JSON(r.Args), 200))
		fmt.Fprintf(bw, "recorded: %s (revision %s): %s\n", r.Verdict, r.PolicyRevision, r.Reason)
		fmt.Fprintf(bw, "%s (revision %s) decides: %s: %s\n", source, pol.Revision(), ex.Decision.Verdict, ex.Decision.Reason)
		if pol.Revision() != r.PolicyRevision {
			fmt.Fprintln(bw, "  (another revision than the one that decided)")
		}
		fmt.Fprintln(bw, "rules that held, in the order the evaluation reached them:")
		for _, h := range ex.Rules {
			fmt.Fprintf(bw, "  %s:%d  %s\n", h.File, h.Row, h.Rule)
		}
		if trace {
			fmt.Fprintf(bw, "\nOPA's trace:\n%s", ex.Trace)
		}
		return bw.Flush()
	})
}

// explainingPolicy compiles files when given, else the policy pushed to
// the fleet, else the built-in default, and says which it is.
func explainingPolicy(ctx context.Context, js jetstream.JetStream, files policy.Files, dir string) (*policy.Policy, string, error) {
	source := "the policy set " + dir
	if files == nil {
		active, err := policy.ActiveStable(ctx, js)
		if err != nil {
			return nil, "", err
		}
		if active != nil {
			files, source = active.Files, "the pushed policy "+active.Revision
		} else {
			files, source = policy.Files(defaultpolicy.Default()), "the built-in policy"
		}
	}
	pol, err := policy.Compile(ctx, files)
	if err != nil {
		return nil, "", fmt.Errorf("%s is refused: %w", source, err)
	}
	return pol, source, nil
}
