package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/toolbus/toolbus/internal/audit"
	"github.com/toolbus/toolbus/internal/audit/checkpoint"
	"github.com/toolbus/toolbus/internal/bus"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/human"
	"github.com/toolbus/toolbus/internal/policy"
	"github.com/toolbus/toolbus/internal/redact"
)

func newAuditCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read, follow, export, verify and replay the audit trail",
		Long: `The audit trail is a stream on the bus that records every call: who called
what with which arguments, the policy's decision, the approver's answer and
the outcome. Secrets in arguments and outputs are hidden when printed.`,
		Example: `  toolbus audit list --since 24h
  toolbus audit show INVOCATION_ID
  toolbus audit whatif --policy ./stricter --fail-on-change`,
	}
	cmd.AddCommand(newAuditListCommand(false), newAuditShowCommand(), newAuditListCommand(true), newAuditTailCommand(),
		newAuditVerifyCommand(), newAuditWhatIfCommand(), newAuditInitCommand())
	holdsCommands(cmd)
	return cmd
}

func newAuditInitCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Make the audit stream on a NATS deployment with no toolbus bus node",
		Long: `Makes the audit stream (and the approvers' stream) on a NATS deployment of
your own, where no toolbus bus node makes it and no other member may: run it
once as an admin. A toolbus bus node makes its own.`,
		Example: "  TOOLBUS_NATS_CREDS=admin.creds toolbus audit init --max-age 720h --replicas 3",
		Args:    noArgs,
	}
	fs := cmd.Flags()
	maxAge := fs.Duration("max-age", bus.DefaultAuditMaxAge, "keep audit events this long (0: for good, until the trail fills)")
	maxBytes := fs.Int64("max-bytes", 0, "cap the audit stream at this many bytes: near it calls are refused (AUDIT_FULL), nothing is dropped (0: 1 GiB)")
	replicas := fs.Int("replicas", 0, "copies the cluster keeps of the audit stream (0: 3 when the connection knows of 3 servers, else 1)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return auditInit(busURLFor(cmd), *maxAge, *maxBytes, *replicas)
	}
	return cmd
}

// auditInit makes the audit stream on a NATS deployment with no toolbus
// bus node, where no part may: every member but an admin leaves it to
// the bus (docs/security.md, "On a NATS deployment of your own").
func auditInit(natsURL string, maxAge time.Duration, maxBytes int64, replicas int) error {
	if maxAge < 0 || maxBytes < 0 || replicas < 0 {
		return usageError{errors.New("audit init: --max-age, --max-bytes and --replicas cannot be negative")}
	}
	return withBus(natsURL, "toolbus-audit-init", func(ctx context.Context, b *bus.Bus) error {
		copies := replicas
		if copies == 0 && len(b.Conn().Servers()) >= 3 {
			copies = 3
		}
		if err := bus.EnsureAudit(ctx, b.JetStream(), bus.Config{AuditMaxAge: maxAge, AuditMaxBytes: maxBytes, Replicas: copies}); err != nil {
			return err
		}
		fmt.Printf("audit stream ready: %s (its records' large fields in %s, and %s for approvers)\n", events.AuditStream, events.BlobStream, events.ConfirmStream)
		return nil
	})
}

// auditFlags are the flags every audit command that reads the trail
// shares.
type auditFlags struct {
	since, until, redactFile *string
	patterns                 *[]string
}

func newAuditFlags(fs *pflag.FlagSet) *auditFlags {
	return &auditFlags{
		since:      fs.String("since", "", "from this time (RFC 3339) or this long ago (24h, 7d)"),
		until:      fs.String("until", "", "before this time (RFC 3339) or this long ago"),
		redactFile: fs.String("redact-patterns", "", "a `FILE` of further patterns (RE2, one a line) whose matches are hidden"),
		patterns:   fs.StringArray("redact", nil, "a further `PATTERN` (RE2) whose matches are hidden (repeatable)"),
	}
}

// queryFlags registers the filters of list, export and tail; the
// returned function makes their query.
func queryFlags(fs *pflag.FlagSet) func() (audit.Query, error) {
	tool := fs.String("tool", "", "only calls of this tool")
	caller := fs.String("caller", "", "only calls of this caller (its id, agent or user)")
	verdict := fs.String("verdict", "", "only calls the policy judged ALLOW, DENY or ASK_USER")
	outcome := fs.String("outcome", "", "only calls that ended so: OK, an error type (POLICY_DENIED, ...) or PENDING")
	approver := fs.String("approver", "", "only calls this approver answered")
	traceID := fs.String("trace", "", "only calls of this trace (its 32-digit trace id, as a trace store shows it)")
	return func() (audit.Query, error) {
		if *verdict != "" && *verdict != "ALLOW" && *verdict != "DENY" && *verdict != "ASK_USER" {
			return audit.Query{}, usageError{fmt.Errorf("--verdict %q: want ALLOW, DENY or ASK_USER", *verdict)}
		}
		trace := strings.ToLower(*traceID)
		if trace != "" && audit.TraceID("00-"+trace+"-0000000000000000-00") == "" {
			return audit.Query{}, usageError{fmt.Errorf("--trace %q: want a trace id, 32 hexadecimal digits", *traceID)}
		}
		return audit.Query{Tool: *tool, Caller: *caller, Verdict: *verdict, Outcome: *outcome, Approver: *approver, Trace: trace}, nil
	}
}

// run connects to the bus at natsURL and runs f with the redactor the
// flags configure.
func (f *auditFlags) run(natsURL string, fn func(ctx context.Context, b *bus.Bus, red *redact.Redactor) error) error {
	red, err := f.redactor()
	if err != nil {
		return err
	}
	return withAuditBus(natsURL, func(ctx context.Context, b *bus.Bus) error { return fn(ctx, b, red) })
}

// redactor is the built-in rules plus the configured patterns.
func (f *auditFlags) redactor() (*redact.Redactor, error) {
	patterns := append([]string(nil), *f.patterns...)
	if *f.redactFile != "" {
		data, err := os.ReadFile(*f.redactFile)
		if err != nil {
			return nil, usageError{fmt.Errorf("--redact-patterns: %w", err)}
		}
		for line := range strings.Lines(string(data)) {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				patterns = append(patterns, line)
			}
		}
	}
	r, err := redact.New(patterns...)
	if err != nil {
		return nil, usageError{err}
	}
	return r, nil
}

// window sets q's Since and Until from --since and --until.
func (f *auditFlags) window(q *audit.Query) (err error) {
	now := time.Now()
	if q.Since, err = parseWhen("since", *f.since, now); err != nil {
		return err
	}
	q.Until, err = parseWhen("until", *f.until, now)
	return err
}

// parseWhen reads an RFC 3339 time, or a duration back from now ("7d"
// counts days).
func parseWhen(flagName, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err == nil && n >= 0 && fmt.Sprint(n) == days {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, usageError{fmt.Errorf("--%s %q: want an RFC 3339 time or how long ago (90m, 24h, 7d)", flagName, s)}
	}
	return now.Add(-d), nil
}

func newAuditListCommand(export bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the recorded calls",
		Long: `Lists every invocation in the audit stream, oldest first, with its caller,
the policy's verdict, the approver's answer, the outcome and how long it
ran; the filters narrow the list. Secrets are hidden.`,
		Example: `  toolbus audit list --since 24h
  toolbus audit list --verdict DENY --json
  toolbus audit list --outcome POLICY_DENIED --caller agent:ci`,
		Args: noArgs,
	}
	if export {
		cmd.Use, cmd.Short = "export", "Export the recorded calls, one JSON object a line, for a SIEM"
		cmd.Long = `Writes every invocation in the audit stream (within the filters) as one JSON
object a line, secrets hidden, for a SIEM or an archive.

With --follow, writes the trail's events instead, one a line, as they are
stored, until Ctrl-C or SIGTERM: each with its sequence in the audit stream,
its subject, kind, principal and invocation, and the event itself, secrets
hidden. An export goes on after a stop where it stopped, every event once:
with --output the file is its own checkpoint (its last line); on stdout, give
--checkpoint a file to keep its place in. With --format otlp, it sends them
to an OpenTelemetry collector as log records instead (OTLP/HTTP, configured
by the OTEL_EXPORTER_OTLP_* variables). With --format opa-decision-log, it
writes the policy's decisions alone, in the shape of OPA's decision log, for
tooling built for OPA. A first start begins at --since,
else now. When the stream no longer holds events the export has not written
(they aged out while it was stopped), it says which and exits 1, unless
--accept-gaps lets it go on.`
		cmd.Example = `  toolbus audit export --since 7d > audit.jsonl
  toolbus audit export --follow --output /var/log/toolbus/audit.jsonl --since 30d
  toolbus audit export --follow --checkpoint /var/lib/toolbus/export.seq | my-shipper
  OTEL_EXPORTER_OTLP_ENDPOINT=http://collector:4318 toolbus audit export --follow --format otlp --checkpoint export.seq
  toolbus audit export --follow --format opa-decision-log --since 30d --checkpoint decisions.seq > decisions.jsonl`
	}
	fs := cmd.Flags()
	af := newAuditFlags(fs)
	query := queryFlags(fs)
	var asJSON *bool
	format := new(string)
	var ff *followFlags
	if export {
		format = fs.String("format", "jsonl", "export format: jsonl, one invocation (with --follow: one event) a line; with --follow, otlp: OpenTelemetry log records to the collector OTEL_EXPORTER_OTLP_LOGS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT names, or opa-decision-log: the policy's decisions, one a line, as OPA's decision log has them")
		ff = newFollowFlags(fs)
	} else {
		asJSON = fs.Bool("json", false, "print a JSON array of invocations")
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if export {
			if err := ff.check(cmd, *format); err != nil {
				return err
			}
			if *ff.follow {
				return followExport(busURLFor(cmd), af, ff, *format)
			}
		}
		q, err := query()
		if err != nil {
			return err
		}
		if err := af.window(&q); err != nil {
			return err
		}
		return af.run(busURLFor(cmd), func(ctx context.Context, b *bus.Bus, red *redact.Redactor) error {
			recs, _, err := audit.Read(ctx, b.JetStream(), q)
			if err != nil {
				return err
			}
			shown := make([]*audit.Record, len(recs))
			for i, r := range recs {
				shown[i] = audit.Redact(r, red)
			}
			switch {
			case export:
				return writeJSONLines(os.Stdout, shown)
			case *asJSON:
				return writeJSON(os.Stdout, shown)
			}
			return writeAuditTable(os.Stdout, shown)
		})
	}
	return cmd
}

// followFlags are the flags of audit export --follow.
type followFlags struct {
	follow, acceptGaps *bool
	output, checkpoint *string
}

func newFollowFlags(fs *pflag.FlagSet) *followFlags {
	return &followFlags{
		follow:     fs.Bool("follow", false, "write the trail's events, one a line, as they are stored, until stopped; a stopped export goes on where it stopped"),
		output:     fs.String("output", "", "with --follow: append to `FILE`, which is its own checkpoint (default: stdout)"),
		checkpoint: fs.String("checkpoint", "", "with --follow to stdout or a collector: keep the sequence of the last event written in `FILE`, and go on after it"),
		acceptGaps: fs.Bool("accept-gaps", false, "with --follow: go on past events the stream no longer holds (aged out before they were written), where the export would stop"),
	}
}

// callFilters are the flags of export that select calls, which an export
// of events does not.
var callFilters = []string{"tool", "caller", "verdict", "outcome", "approver", "until"}

// check refuses the flags that do not go together.
func (ff *followFlags) check(cmd *cobra.Command, format string) error {
	switch {
	case format != "jsonl" && format != "otlp" && format != "opa-decision-log":
		return usageError{fmt.Errorf("audit export --format %q: want jsonl, or otlp or opa-decision-log with --follow", format)}
	case format != "jsonl" && !*ff.follow:
		return usageError{fmt.Errorf("audit export --format %s goes with --follow", format)}
	case format == "otlp" && *ff.output != "":
		return usageError{errors.New("audit export --format otlp sends to a collector: --output does not go with it (--checkpoint FILE keeps its place)")}
	case format == "opa-decision-log" && *ff.output != "":
		// An output file is its own checkpoint through lines of the
		// export's own shape; a decision log's are OPA's.
		return usageError{errors.New("audit export --format opa-decision-log writes to stdout: --output does not go with it (--checkpoint FILE keeps its place)")}
	}
	if !*ff.follow {
		for _, name := range []string{"output", "checkpoint", "accept-gaps"} {
			if cmd.Flags().Changed(name) {
				return usageError{fmt.Errorf("audit export: --%s goes with --follow", name)}
			}
		}
		return nil
	}
	for _, name := range callFilters {
		if cmd.Flags().Changed(name) {
			return usageError{fmt.Errorf("audit export --follow writes every event of the trail: --%s, which selects calls, does not go with it", name)}
		}
	}
	if *ff.output != "" && *ff.checkpoint != "" {
		return usageError{errors.New("audit export --follow: --output FILE is its own checkpoint; --checkpoint goes with stdout")}
	}
	return nil
}

// followExport runs audit export --follow: it reads where the export
// stopped from its output file or checkpoint, then follows the trail
// from there until it is stopped.
func followExport(natsURL string, af *auditFlags, ff *followFlags, format string) error {
	since, err := parseWhen("since", *af.since, time.Now())
	if err != nil {
		return err
	}
	log, err := cli.Logger("info")
	if err != nil {
		return err
	}
	cfg := audit.FollowConfig{Since: since, AcceptGaps: *ff.acceptGaps, Logger: log}
	var sink audit.Sink = &audit.ExportWriter{W: os.Stdout}
	if format == "opa-decision-log" {
		sink = &audit.DecisionLogWriter{W: os.Stdout}
	}
	if format == "otlp" {
		otlp, err := audit.NewOTLPSink(context.Background(), "toolbus")
		if err != nil {
			return err
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			otlp.Close(ctx)
		}()
		sink = otlp
	}
	switch {
	case *ff.output != "":
		file, last, err := audit.OpenExportFile(*ff.output)
		if err != nil {
			return fmt.Errorf("--output: %w", err)
		}
		defer file.Close()
		cfg.After, sink = last, file
	case *ff.checkpoint != "":
		if cfg.After, err = audit.ReadExportCheckpoint(*ff.checkpoint); err != nil {
			return fmt.Errorf("--checkpoint: %w", err)
		}
		sink = &audit.Checkpointed{Sink: sink, Path: *ff.checkpoint}
	}
	return af.run(natsURL, func(ctx context.Context, b *bus.Bus, red *redact.Redactor) error {
		cfg.Redactor = red
		return audit.Follow(ctx, b.JetStream(), cfg, sink)
	})
}

func newAuditShowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show INVOCATION_ID",
		Short: "Show one recorded call's whole story",
		Long: `Shows one invocation's whole story, event by event: the call, the policy's
decision, the confirmation asked and answered, the steps, the result. With
--explain, which rules of the policy make its decision (policy explain).`,
		Example: "  toolbus audit show INVOCATION_ID\n  toolbus audit show INVOCATION_ID --explain --policy ./policy",
	}
	fs := cmd.Flags()
	af := newAuditFlags(fs)
	asJSON := fs.Bool("json", false, "print the invocation and its events as JSON")
	explained := fs.Bool("explain", false, "say which rules of the policy make the call's decision (toolbus policy explain)")
	dir := fs.String("policy", "", "with --explain: explain under this policy set (default: the pushed policy, else the built-in one)")
	trace := fs.Bool("trace", false, "with --explain: print OPA's whole trace too")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError{errors.New("audit show takes one invocation id")}
		}
		if *explained {
			return explain(busURLFor(cmd), af, args[0], *dir, *trace, *asJSON)
		}
		since, err := parseWhen("since", *af.since, time.Now())
		if err != nil {
			return err
		}
		return af.run(busURLFor(cmd), func(ctx context.Context, b *bus.Bus, red *redact.Redactor) error {
			r, err := audit.Show(ctx, b.JetStream(), args[0], since)
			if err != nil {
				return err
			}
			r = audit.Redact(r, red)
			if *asJSON {
				return writeJSON(os.Stdout, r)
			}
			return writeStory(os.Stdout, r)
		})
	}
	return cmd
}

// withAuditBus is withBus with the time a read of a long history takes.
func withAuditBus(natsURL string, f func(ctx context.Context, b *bus.Bus) error) error {
	log, _ := cli.Logger("warn")
	ctx, cancel := cli.SignalContext()
	defer cancel()
	connectCtx, cancelConnect := context.WithTimeout(ctx, 30*time.Second)
	defer cancelConnect()
	b, err := cli.Connect(connectCtx, natsURL, "toolbus-audit", log)
	if err != nil {
		return err
	}
	defer cli.Close(b)
	return f(ctx, b)
}

func writeJSONLines(w io.Writer, recs []*audit.Record) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func writeAuditTable(w io.Writer, recs []*audit.Record) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tID\tTOOL\tCALLER\tVERDICT\tAPPROVER\tOUTCOME\tDURATION\tREASON")
	for _, r := range recs {
		fmt.Fprintln(tw, strings.Join(auditRow(r), "\t"))
	}
	return tw.Flush()
}

// auditRow is a record's columns in the table of audit list.
func auditRow(r *audit.Record) []string {
	approver, verdict := "-", string(r.Verdict)
	if r.Approver != nil {
		approver = r.Approver.ID + " (" + string(r.Answer) + ")"
	}
	if verdict == "" {
		verdict = "-"
	}
	duration := "-"
	if r.Executor != "" {
		duration = (time.Duration(r.DurationMillis) * time.Millisecond).String()
	}
	return []string{human.Time(r.Time), r.ID, r.Tool, r.Caller.ID, verdict, approver, outcomeText(r), duration, oneLine(r.Reason, 60)}
}

// outcomeText is a record's outcome with what stands beside it: the
// caller's own record, foreign records, a reused id.
func outcomeText(r *audit.Record) string {
	out := r.Outcome
	if c := r.CallerRecord; c != nil {
		out += " (caller's own record: " + c.Outcome
		if c.BeforeCall {
			out += ", made before the call"
		}
		out += ")"
	}
	if r.ForeignRecords > 0 {
		out += fmt.Sprintf(" (%d foreign records ignored)", r.ForeignRecords)
	}
	if r.ReusedID {
		out += " (reused id)"
	}
	if len(r.Attempts) > 1 {
		out += fmt.Sprintf(" (%d attempts)", len(r.Attempts))
	}
	return out
}

func writeStory(w io.Writer, r *audit.Record) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "invocation %s: %s by %s\n", r.ID, r.Tool, r.Caller.ID)
	if len(r.Args) > 0 {
		fmt.Fprintf(bw, "arguments: %s\n", human.JSON(r.Args))
	}
	if r.Verdict != "" {
		fmt.Fprintf(bw, "policy:    %s (revision %s): %s\n", r.Verdict, r.PolicyRevision, r.Reason)
	}
	fmt.Fprintf(bw, "outcome:   %s", r.Outcome)
	switch {
	case r.Executor != "":
		fmt.Fprintf(bw, " from executor %s after %s", r.Executor, time.Duration(r.DurationMillis)*time.Millisecond)
		if r.AfterGiveUp {
			fmt.Fprint(bw, ", after the caller gave up")
		}
	default:
		fmt.Fprint(bw, ": no executor ended the call")
	}
	fmt.Fprintln(bw)
	if id := audit.TraceID(r.Trace); id != "" {
		fmt.Fprintf(bw, "trace:     %s (the executor's span: %s)\n", id, r.Trace)
	}
	if c := r.CallerRecord; c != nil {
		fmt.Fprintf(bw, "caller's own record (the caller's word, not the executor's): %s from %s", c.Outcome, c.Sender)
		if c.BeforeCall {
			fmt.Fprint(bw, ", recorded before the call was made")
		}
		fmt.Fprintln(bw)
	}
	if r.ForeignRecords > 0 {
		fmt.Fprintf(bw, "foreign records: %d results for this id recorded by another principal than the caller, ignored\n", r.ForeignRecords)
	}
	if r.ReusedID {
		fmt.Fprintf(bw, "reused id: %s used this id for an earlier call\n", r.Principal)
	}
	for _, a := range r.Attempts {
		fmt.Fprintf(bw, "attempt %d:  %s at %s", a.Attempt, a.Outcome, human.Time(a.Time))
		if a.Executor != "" {
			fmt.Fprintf(bw, " from %s", a.Executor)
		}
		if a.Attempt == max(r.Attempt, 1) && r.Executor != "" && a.Outcome == r.Outcome {
			fmt.Fprint(bw, " (the call's terminal result)")
		}
		if a.Error != "" {
			fmt.Fprintf(bw, ": %s", oneLine(a.Error, 100))
		}
		fmt.Fprintln(bw)
	}
	for _, e := range r.Events {
		fmt.Fprintf(bw, "  #%-8d %s  %-22s %-22s %s\n", e.Seq, e.Time.Local().Format("15:04:05.000"), e.Type, e.Sender, e.Summary)
	}
	return bw.Flush()
}

// oneLine is s with its whitespace collapsed, cut as firstLine cuts.
func oneLine(s string, n int) string { return firstLine(strings.Join(strings.Fields(s), " "), n) }

// errTampered and errIncomplete are verify's failures: the report says
// what. A trail that lost its start (or its latest checkpoints) is not
// called tampered, since retention does that too, but it is not ok
// either: nothing shows what the lost part held.
var (
	errTampered   = errors.New("the audit stream does not match its checkpoints")
	errIncomplete = errors.New("the audit trail is not whole: part of it is no longer in the stream")
)

func newAuditVerifyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check that no audit event is missing and every signed checkpoint matches",
		Long: `Checks the audit stream against the checkpoints the bus signs: no sequence
is missing, and every checkpoint matches the events it covers and is signed
with the bus owner's key; and every policy revision pushed is recorded with a
digest of its own and a valid signature (by a key of --policy-signers, when
given). Fails when the stream does not match (tampered), or when part of the
trail is no longer in the stream.`,
		Example: "  toolbus audit verify\n  toolbus audit verify --since 7d --key /srv/toolbus/checkpoint.pub",
		Args:    noArgs,
	}
	fs := cmd.Flags()
	since := fs.String("since", "", "from this time (RFC 3339) or this long ago (24h, 7d) (default: the whole stream)")
	keyFile := fs.String("key", "", "the bus owner's public key, which checkpoints must be signed with (default: "+checkpoint.PublicKeyFile+" in the data dir of the bus's toolbus up)")
	dataDir := fs.String("data", "", "the data `DIR` of the bus's toolbus up, where its key is (default: its context's, else toolbus up's default)")
	signersFile := fs.String("policy-signers", "", "a trust list of policy signers: every recorded push must be signed by one of them (default: any valid signature)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		url := busURLFor(cmd)
		if *keyFile == "" {
			dir := *dataDir
			if dir == "" {
				dir = dataDirOf(url)
			}
			*keyFile = filepath.Join(dir, checkpoint.PublicKeyFile)
		}
		var signers *policy.Signers
		if *signersFile != "" {
			var err error
			if signers, err = policy.LoadSigners(*signersFile); err != nil {
				return usageError{err}
			}
		}
		return auditVerify(url, *since, *keyFile, signers)
	}
	return cmd
}

// recordedPushes checks every policy push the trail recorded: its digest
// is its revision's, and it is signed (by one of signers, when given).
func recordedPushes(signers *policy.Signers) checkpoint.Check {
	return func(_ uint64, subject string, data []byte) string {
		if subject != events.SubjectPolicyPrefix+"pushed" {
			return ""
		}
		ev, err := events.Decode[events.PolicyEvent](data)
		if err != nil {
			return fmt.Sprintf("a policy push that does not decode: %v", err)
		}
		if err := policy.CheckRecorded(ev, signers); err != nil {
			return err.Error()
		}
		return ""
	}
}

func auditVerify(natsURL, since, keyFile string, signers *policy.Signers) error {
	from, err := parseWhen("since", since, time.Now())
	if err != nil {
		return err
	}
	pub, err := checkpoint.ReadPublicKey(keyFile)
	if err != nil {
		return usageError{err}
	}
	return withAuditBus(natsURL, func(ctx context.Context, b *bus.Bus) error {
		rep, err := checkpoint.VerifyWith(ctx, b.JetStream(), from, pub, recordedPushes(signers))
		if err != nil {
			return err
		}
		fmt.Printf("messages %d (#%d..#%d), checkpoints matching %d, after the last checkpoint %d\n",
			rep.Messages, rep.FirstSeq, rep.LastSeq, rep.Checkpoints, rep.Unchecked)
		for _, g := range rep.Gaps {
			fmt.Printf("missing: #%d..#%d\n", g[0], g[1])
		}
		for _, p := range rep.Problems {
			fmt.Println("problem:", p)
		}
		if lost := rep.Lost(); lost != "" {
			fmt.Println("lost:", lost)
		}
		if rep.ChainUnknown != "" {
			fmt.Printf("chain head unknown: %s; a loss of the latest checkpoints would not show\n", rep.ChainUnknown)
		}
		switch {
		case !rep.Intact():
			return errTampered
		case !rep.OK() && rep.Messages == 0:
			fmt.Println("nothing remains to verify")
			return errIncomplete
		case !rep.OK():
			fmt.Printf("what remains verifies: no sequence is missing from #%d on and every checkpoint left matches\n", rep.FirstSeq)
			if rep.LostEvents[1] > 0 || rep.LostCheckpoints > 0 || rep.LostUncounted {
				fmt.Println("(--since checks only what is left from a given time on)")
			}
			return errIncomplete
		}
		fmt.Println("ok: no sequence is missing and every checkpoint matches")
		return nil
	})
}

func newAuditTailCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "tail",
		Short:   "Follow the audit trail: print invocations as they end",
		Long:    "Prints each invocation as it ends, live, within the filters, until Ctrl-C. Secrets are hidden.",
		Example: "  toolbus audit tail\n  toolbus audit tail --verdict DENY --json",
		Args:    noArgs,
	}
	fs := cmd.Flags()
	af := newAuditFlags(fs)
	query := queryFlags(fs)
	asJSON := fs.Bool("json", false, "print each invocation as a JSON line")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		q, err := query()
		if err != nil {
			return err
		}
		return af.run(busURLFor(cmd), func(ctx context.Context, b *bus.Bus, red *redact.Redactor) error {
			enc := json.NewEncoder(os.Stdout)
			fmt.Fprintln(os.Stderr, "following the audit stream; Ctrl-C to stop")
			return audit.Tail(ctx, b.JetStream(), q, func(r *audit.Record) {
				r = audit.Redact(r, red)
				if *asJSON {
					enc.Encode(r)
					return
				}
				fmt.Println(strings.Join(auditRow(r), "  "))
			})
		})
	}
	return cmd
}
