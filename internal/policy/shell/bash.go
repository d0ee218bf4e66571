package shell

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"mvdan.cc/sh/v3/syntax"
)

// The analyser reads lines with mvdan.cc/sh's parser; bash runs them with
// its own. Where the two read a line differently (bash ends a comment at
// the newline after `# \`, the parser continued it), the policy would
// judge commands that are not the ones that run. So before a shell line is
// allowed, bash itself is asked how it reads the line: `bash --pretty-print
// FILE` (bash 5.2 and later) parses a script and prints it back in
// canonical form without running any of it. The printed form is parsed
// again by the analyser's parser, and the commands of both readings are
// compared word for word. Any difference, a bash too old to pretty-print,
// or no bash at all makes the line opaque. (`bash --pretty-print -c LINE`
// would run LINE: the script is always given as a file, here
// /dev/stdin.)

var bashPath = sync.OnceValues(func() (string, error) { return exec.LookPath("bash") })

// bashCheckTimeout bounds one run of bash's parser.
const bashCheckTimeout = 5 * time.Second

// CheckWithBash asks bash's own parser how it reads the line and every
// script nested in it, the first time it is called on s; later calls ask
// nothing and return "". When bash reads any of them differently than the
// analysis, or cannot be asked, the reason is added to Opaque and
// returned; otherwise it returns "". Nothing of the line runs. Bash's
// answers are kept for the process (bounded), so the same line costs one
// run of bash.
func (s *Analysis) CheckWithBash(ctx context.Context) string {
	if s.checked {
		return ""
	}
	s.checked = true
	for _, script := range append([]string{s.line}, s.scripts...) {
		if reason := bashDisagrees(ctx, script); reason != "" {
			s.opaque(reason)
			return reason
		}
	}
	return ""
}

// BashChecked reports whether CheckWithBash has been called on s.
func (s *Analysis) BashChecked() bool { return s.checked }

// Line is the line s analysed, for the audit trail to record, or "" when
// it did not parse (ParseError is set).
func (s *Analysis) Line() string { return s.line }

func bashDisagrees(ctx context.Context, line string) string {
	if reason, ok := bashReadings.get(line); ok {
		return reason
	}
	printed, err := bashPrint(ctx, line)
	if err != nil {
		// Not kept: bash may be there next time, or the call was
		// cancelled.
		return "bash's own parser could not be asked how it reads the line: " + err.Error()
	}
	reason := comparedReading(line, printed)
	bashReadings.put(line, reason)
	return reason
}

// comparedReading says why bash, which printed line as printed, reads it
// differently than the analyser, or "".
func comparedReading(line, printed string) string {
	want, ok := signature(line)
	if !ok {
		return "the line does not parse"
	}
	got, ok := signature(printed)
	if !ok || !slices.Equal(got, want) {
		return "bash reads the line differently than the analyser"
	}
	return ""
}

// bashReadings keeps what bash's parser said of the lines it was shown:
// the same bytes always read the same, and a replay of recorded calls
// (toolbus audit whatif) shows bash the same lines many times. Bounded;
// it starts over when full.
var bashReadings = readings{max: 4096, maxBytes: 4 << 20}

type readings struct {
	mu            sync.Mutex
	m             map[string]string
	bytes         int
	max, maxBytes int
}

func (r *readings) get(line string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reason, ok := r.m[line]
	return reason, ok
}

func (r *readings) put(line, reason string) {
	if len(line) > r.maxBytes/64 {
		return // a line that long is seldom seen twice
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= r.max || r.bytes+len(line) > r.maxBytes {
		r.m, r.bytes = make(map[string]string), 0
	}
	r.m[line] = reason
	r.bytes += len(line) + len(reason)
}

// bashPrint is bash's canonical form of line, from its own parser.
func bashPrint(ctx context.Context, line string) (string, error) {
	bash, err := bashPath()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, bashCheckTimeout)
	defer cancel()
	// Not through the executor's confined starter: bash only parses here
	// (--pretty-print runs none of the line, the model's though it is),
	// with an empty environment (no BASH_ENV to source), and only its
	// output is read. It is the policy's own parser, not a tool process.
	cmd := exec.CommandContext(ctx, bash, "--pretty-print", "/dev/stdin")
	cmd.Stdin = strings.NewReader(line)
	cmd.Env = []string{} // no BASH_ENV, nothing of the executor's environment
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errOut.String())
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return "", &bashError{err: err, stderr: msg}
	}
	return out.String(), nil
}

type bashError struct {
	err    error
	stderr string
}

func (e *bashError) Error() string {
	if e.stderr == "" {
		return e.err.Error()
	}
	return e.err.Error() + ": " + e.stderr
}

// signature lists what a script runs, in order: every simple command's
// words (as bash passes them when literal, else their source), every
// declare clause, redirection and function name.
func signature(script string) ([]string, bool) {
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), "")
	if err != nil {
		return nil, false
	}
	var sig []string
	syntax.Walk(file, func(node syntax.Node) bool {
		switch n := node.(type) {
		case *syntax.CallExpr:
			var b strings.Builder
			b.WriteString("cmd")
			for _, as := range n.Assigns {
				b.WriteString("\x00=" + source(script, as))
			}
			for _, w := range n.Args {
				v := evalWord(script, w)
				b.WriteString("\x00" + v.value)
			}
			sig = append(sig, b.String())
		case *syntax.DeclClause:
			sig = append(sig, "decl\x00"+n.Variant.Value)
		case *syntax.Redirect:
			target := ""
			if n.Word != nil {
				target = evalWord(script, n.Word).value
			}
			sig = append(sig, "redir\x00"+n.Op.String()+"\x00"+target)
		case *syntax.FuncDecl:
			sig = append(sig, "func\x00"+funcName(n))
		}
		return true
	})
	return sig, true
}
