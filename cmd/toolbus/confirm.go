package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/toolbus/toolbus/internal/approve"
	"github.com/toolbus/toolbus/internal/cli"
	"github.com/toolbus/toolbus/internal/confirmtui"
	"github.com/toolbus/toolbus/internal/events"
)

func newConfirmCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "confirm",
		Short: "Answer confirmation requests in the terminal",
		Long: `Answers the fleet's confirmation requests (the calls the policy asks a
person about) as the approver ID --as names (default approver:USER@HOST).

In a terminal it shows the pending requests and the selected one in detail;
keys: y allow once; a/t/s always (only those the policy offers, each with
what it would remember); e edit the arguments in $VISUAL/$EDITOR and send
them (judged again); n deny, with an optional reason the agent sees; d the
full diff and arguments; r recent decisions; ↑/↓ or j/k select; q quit.

With --json it is for scripts. It prints one JSON object per line, the
first once executors can ask it:

    {"event":"ready","approver":ID}
    {"event":"request","answerTo":TOKEN,"invocationId":ID,"request":{...the ConfirmRequest...},"deadline":TIME}
    {"event":"answered","answerTo":TOKEN,"invocationId":ID,"by":APPROVER,"outcome":OUTCOME}
    {"event":"rejected","answerTo":TOKEN,"invocationId":ID,"by":APPROVER,"outcome":OUTCOME,"reason":WHY}
    {"event":"closed","answerTo":TOKEN,"invocationId":ID,"errorType":TYPE,"reason":WHY}
    {"event":"ack","answerTo":TOKEN,"invocationId":ID,"accepted":BOOL,"reason":WHY}
    {"event":"error","line":N,"error":WHAT}
    {"event":"disconnected","reason":WHY}   (the bus is gone: nothing arrives or leaves)
    {"event":"reconnected"}

and reads answers, one JSON object per line, on stdin, each naming its
request by the answerTo of its request line (TOKEN, a JSON string). The
invocation id does not name a request: the caller chose it, another
caller may use the same one, and a call asked about again gets a new
request with a new answerTo.

    {"answerTo":TOKEN,"outcome":"proceed_once"}
    {"answerTo":TOKEN,"outcome":"modify_with_editor","args":{...}}
    {"answerTo":TOKEN,"outcome":"cancel","message":"why, for the agent"}

OUTCOME is proceed_once, proceed_always, proceed_always_tool,
proceed_always_server, modify_with_editor or cancel. A line that is not an
answer gets an error line and reading goes on; at the end of stdin the
command ends.`,
		Example: `  toolbus confirm
  toolbus confirm --as approver:alice

  # For a script: requests as JSON lines on stdout, answers on stdin.
  toolbus confirm --json --as approver:ci-bot`,
		Args: noArgs,
	}
	fs := cmd.Flags()
	as := fs.String("as", "", "the approver identity answers are sent as (default approver:USER@HOST)")
	asJSON := fs.Bool("json", false, "JSON lines on stdout and stdin, for scripts")
	logLevel := goFlags(fs, cli.LogFlag)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return runConfirm(busURLFor(cmd), *as, *asJSON, *logLevel)
	}
	return cmd
}

func runConfirm(natsURL, as string, asJSON bool, logLevel string) error {
	if !asJSON && !(term.IsTerminal(int(os.Stdout.Fd())) && term.IsTerminal(int(os.Stdin.Fd()))) {
		return usageError{errors.New("confirm needs a terminal; for scripts use --json")}
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)}
	}
	// The screen is the terminal's while the view runs: log lines wait in
	// memory and are printed once it is restored.
	var held heldLog
	var logOut io.Writer = os.Stderr
	if !asJSON {
		logOut = &held
	}
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level}))
	defer held.flush()

	ctx, stop := cli.SignalContext()
	defer stop()
	connectCtx, cancelConnect := context.WithTimeout(ctx, 30*time.Second)
	b, err := cli.Connect(connectCtx, natsURL, "toolbus-confirm", log)
	cancelConnect()
	if err != nil {
		return err
	}
	defer cli.Close(b)
	principal := cli.ApproverPrincipal(b.Principal(), natsURL, as)
	ap, err := approve.Start(ctx, b.Conn(), b.JetStream(), approve.Config{
		Identity: cli.ApproverIdentity(as), Principal: principal, Logger: log,
		Via: events.ViaTerminal, Who: cli.TerminalSigner(principal)})
	if err != nil {
		return err
	}
	defer ap.Stop()
	if asJSON {
		return confirmtui.RunJSON(ctx, ap, os.Stdin, os.Stdout)
	}
	editor := os.Getenv("VISUAL")
	if editor == "" {
		editor = os.Getenv("EDITOR")
	}
	// The host's state dir: every executor of this host hides it from its
	// tool processes (cli.ToolSecrets).
	return confirmtui.Run(ctx, ap, confirmtui.Editor{Command: editor, Dir: filepath.Join(cli.DefaultDataDir(), "edit")}, os.Stdin, os.Stdout)
}

// heldLog keeps the first 64 KiB of log output for later.
type heldLog struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	dropped bool
}

const heldLogMax = 64 << 10

func (h *heldLog) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buf.Len()+len(p) > heldLogMax {
		h.dropped = true
		return len(p), nil
	}
	return h.buf.Write(p)
}

func (h *heldLog) flush() {
	h.mu.Lock()
	defer h.mu.Unlock()
	os.Stderr.Write(h.buf.Bytes())
	if h.dropped {
		fmt.Fprintln(os.Stderr, "toolbus confirm: more log lines were dropped")
	}
}
