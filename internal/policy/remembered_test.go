package policy

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/events"
	"github.com/toolbus/toolbus/internal/policy/shell"
)

// remembered is the allowlist after approving, with "always", the lines
// `ls`, `cat README.md`, `git status` and one line of each command that
// can run code through its arguments: what the default policy's remember
// rule keeps of them.
func remembered(t *testing.T, p *Policy) []AllowEntry {
	t.Helper()
	var out []AllowEntry
	for _, line := range []string{"ls", "cat README.md", "git status", "find . -name x", "sed -n 1p f", "sort f",
		"rg foo", "make test", "npm test", "go test ./...", "tar tf a.tar"} {
		entries, err := p.Remember(context.Background(), shellInput(p, line), events.ProceedAlways)
		if err != nil || len(entries) == 0 {
			t.Fatalf("approving %q always remembers %v (%v)", line, entries, err)
		}
		out = append(out, entries...)
	}
	return out
}

// TestRememberedApprovalsCoverOnlyWhatIsUnderstood holds the review's
// lines, and more of each class, against the real analyser, bash's own
// parser and the default policy, with ls, cat, git status and others
// remembered: none may run unasked.
func TestRememberedApprovalsCoverOnlyWhatIsUnderstood(t *testing.T) {
	p := defaultPolicy(t)
	entries := remembered(t, p)
	for _, e := range entries {
		if e.Argv[0] == "ls" && (e.Exact || len(e.Argv) != 1) || e.Argv[0] == "git" && !e.Exact {
			t.Fatalf("remembered %+v", e)
		}
	}
	asked := []string{
		// wrappers, by their own option grammars
		"exec -a ls touch P", "xargs -E ls touch P", "env -S 'touch P' ls", "env --split-string='touch P' ls",
		"env --spl='touch P' ls", "xargs -a /dev/null -E ls touch P", "nice -n 5 touch P", "timeout -s KILL 5 touch P",
		"stdbuf -o0 touch P", "nohup touch P", "command touch P", "builtin eval 'touch P'", "busybox touch P",
		"env -u X touch P", "sudo ls", "sudo -u root ls", "time -o P ls", "env -Z ls", "xargs --frobnicate ls",
		// past a program, exec is a program of that name (found by the fuzz target)
		"env -S 'exec -a ls ls'", "{ env -S 'exec -a ls ls'; } # x", "nice exec -a ls ls", "env command ls", "/bin/exec -a ls ls",
		// after a pipe, time is a program (found by the fuzz target)
		"ls | time", "ls | time ls", "ls |& time -p ls", "ls | time touch P",
		// statements the analyser does not follow
		"ls; x='a[$(touch P)]'; (( x ))", "ls; declare -a 'a=($(touch P))'", "ls # \\\ntouch P", "LC_ALL=C ls",
		"PATH=/tmp ls", "for PATH in /tmp; do ls; done", "ls; let 'a[$(touch P)]'", "[[ -v a[$(touch P)] ]]; ls",
		"ls ${x:-$(touch P)}", "ls ${!x}", "ls $((1+1))", "ls; trap 'touch P' EXIT", "alias ls=touch", "ls | sh",
		"ls && bash -c 'touch P'", "ls $(touch P)", "ls `touch P`", "ls <(touch P)", "ls; eval ls", "source ./x; ls",
		"coproc ls", "cd -; ls", "ls; printf -v PATH /tmp", "ls; read PATH",
		// the program by name, exactly
		"./ls", "/x/ls", "/bin/ls", "l\\s; t\\ouch P", "{touch,P}",
		// writes and files outside the workspace
		"ls > /outside/file", "ls >> out.txt", "ls &> out.txt", "ls >& out.txt", "cat README.md > README.md", "ls /etc",
		"cat /etc/hostname", "ls ~", "cat <<< x > P",
		// remembered roots no longer cover code-running arguments
		"git -c alias.x='!touch P' x", "git status; git -c alias.x='!touch P' x", "git status --short", "git push",
		"find . -exec touch P ';'", "find . -name x -delete", "sed 'e touch P' f", "sed -n 1p f g", "awk 'BEGIN{system(\"touch P\")}'",
		"sort -o P f", "rg --pre 'touch P' foo", "make --eval 'x:;touch P' x", "npm exec touch P", "go run ./x",
		"tar xf a.tar", "tar tf a.tar --to-command='touch P'", "make test *", "ls | xargs git status",
		// interpreters fed a here-document or a here-string
		"python3 <<< 'import os'", "bash <<EOF\ntouch P\nEOF",
	}
	for _, line := range asked {
		t.Run(line, func(t *testing.T) {
			if d := p.Decide(context.Background(), shellInput(p, line, entries...)); d.Verdict == events.Allow {
				t.Errorf("allowed through the allowlist: %s", d.Reason)
			}
		})
	}
	allowed := []string{"ls", "ls -la", "ls -la src", "cat README.md", "cat docs/a.md docs/b.md", "git status",
		"ls && cat README.md", "ls 2>/dev/null", "ls > /dev/null 2>&1", "ls | cat", "nice ls", "timeout 5 ls", "ls *.go"}
	for _, line := range allowed {
		t.Run(line, func(t *testing.T) {
			if d := p.Decide(context.Background(), shellInput(p, line, entries...)); d.Verdict != events.Allow {
				t.Errorf("not allowed: %s %s", d.Verdict, d.Reason)
			}
		})
	}
}

// TestDenyHoldsWhereTheDangerIsVisible: these fell back to ASK before.
func TestDenyHoldsWhereTheDangerIsVisible(t *testing.T) {
	p := defaultPolicy(t)
	home, _ := os.UserHomeDir()
	lines := map[string]string{
		"{rm,-rf,/}":                             "recursive removal",
		"bash -c -- 'rm -rf /'":                  "recursive removal",
		"bash -o errexit -c 'rm -rf /'":          "recursive removal",
		"bash <<< 'rm -rf /'":                    "recursive removal",
		"bash <<'EOF'\nrm -rf /\nEOF":            "recursive removal",
		"sh -s <<EOF\nrm -rf /\nEOF":             "recursive removal",
		"echo 'rm -rf /' | bash":                 "recursive removal",
		"rm -rf /*/":                             "recursive removal",
		"rm -rf /*/*":                            "recursive removal",
		"cd / && rm -rf *":                       "recursive removal",
		"env -S 'rm -rf /'":                      "recursive removal",
		"xargs -E x rm -rf /":                    "recursive removal",
		"find . -exec rm -rf / ';'":              "recursive removal",
		"exec -a ls rm -rf /":                    "recursive removal",
		"f(){ f|f& };f":                          "fork bomb",
		"bomb() { bomb | bomb & }; bomb":         "fork bomb",
		"function f { f & f; }; f":               "fork bomb",
		"a(){ b|b& }; b(){ a|a& }; a":            "fork bomb",
		"f(){ $FUNCNAME|$FUNCNAME& };f":          "fork bomb",
		"while true; do sleep 1 & done":          "fork bomb",
		"while :; do (bash &); done":             "fork bomb",
		"for ((;;)); do bash & done":             "fork bomb",
		"until false; do yes > /dev/null & done": "fork bomb",
		"dd if=/dev/zero of=/dev/mapper/vg-root": "writes onto the disk",
		"dd of=/dev/disk/by-id/ata-X":            "writes onto the disk",
		"dd of=/dev/dm-0":                        "writes onto the disk",
		"shred /dev/sda":                         "writes onto the disk",
		"wipefs -a /dev/sdb":                     "writes onto the disk",
		"mkfs.ext4 /dev/nvme0n1p1":               "makes a file system",
		"cat .en[v]":                             "sensitive path /w/.env",
		"cat .en?":                               "sensitive path /w/.env",
		"cat ~/.ss[h]/id_rsa":                    "sensitive path /home/ada/.ssh/id_rsa",
		"cat ~root/.ssh/id_rsa":                  "sensitive path /root/.ssh/id_rsa",
		"cat \"$HOME/.ssh/id_rsa\"":              "sensitive path /home/ada/.ssh/id_rsa",
		"cat .env.production.local":              "sensitive path /w/.env.production.local",
		"cat {.e,.f}nv":                          "sensitive path /w/.env",
		"cat id_rsa":                             "sensitive path /w/id_rsa",
		"cat server.KEY":                         "sensitive path /w/server.KEY",
	}
	_ = home
	for line, says := range lines {
		t.Run(line, func(t *testing.T) {
			d := p.Decide(context.Background(), shellInput(p, line, remembered(t, p)...))
			if d.Verdict != events.Deny || !strings.Contains(d.Reason, says) {
				t.Errorf("got %s (%s), want DENY saying %q", d.Verdict, d.Reason, says)
			}
		})
	}
	// The directory a line runs in is judged: cat id_rsa in .ssh.
	sh := shell.Analyze("cat config")
	in := shellInput(p, "cat config")
	in.Paths = sh.Locate("/w/.ssh", "/home/ada", p.Samples())
	if d := p.Decide(context.Background(), in); d.Verdict != events.Deny || !strings.Contains(d.Reason, "/w/.ssh") {
		t.Errorf("a line run in .ssh: %s (%s)", d.Verdict, d.Reason)
	}
}
