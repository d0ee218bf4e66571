package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The built command: help that was asked for exits 0 on stdout, a
// mistake in the command line exits 2.
func TestCommandLine(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "agent")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, tt := range []struct {
		args         []string
		code         int
		stdout, says string
	}{
		{[]string{"--help"}, 0, "Examples:", ""},
		{[]string{"-h"}, 0, "Usage:", ""},
		{nil, 2, "", "give the prompt as arguments"},
		{[]string{"--frobnicate", "hello"}, 2, "", "flag provided but not defined: -frobnicate"},
	} {
		cmd := exec.Command(bin, tt.args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.says) {
			t.Errorf("agent %v: exit %d, stdout %.200q, stderr %.200q; want exit %d", tt.args, code, stdout.String(), stderr.String(), tt.code)
		}
	}
}
