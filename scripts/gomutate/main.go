// Command gomutate is a small mutation tester for Go code, in the manner
// of github.com/go-gremlins/gremlins: it changes one operator of the files
// it is given at a time and runs the tests of the packages named; a change
// the tests pass with is a mutant that LIVED. Files are never written: each
// mutant reaches the compiler through go test -overlay, so the worktree
// stays as it is and mutants can run side by side.
//
//	go run ./scripts/gomutate -test ./internal/builtin/ internal/builtin/workspace.go
//
// The operators are gremlins' defaults (conditionals boundary and
// negation, arithmetic, increment/decrement, invert negatives) and two of
// its optional ones that matter most for checks (invert logical, remove a
// boolean not). Only mutants on lines the tests cover are run, as gremlins
// does; the efficacy is killed / (killed + lived). A mutant that does not
// compile is NOT VIABLE and counts for neither.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

type mutant struct {
	file     string // absolute
	line     int
	col      int
	offset   int
	old, new string
	kind     string
}

func (m mutant) String() string {
	return fmt.Sprintf("%s:%d:%d %s %s -> %s", m.file, m.line, m.col, m.kind, m.old, m.new)
}

var (
	boundary = map[token.Token]token.Token{token.LSS: token.LEQ, token.LEQ: token.LSS, token.GTR: token.GEQ, token.GEQ: token.GTR}
	negation = map[token.Token]token.Token{token.EQL: token.NEQ, token.NEQ: token.EQL, token.LSS: token.GEQ, token.GEQ: token.LSS, token.GTR: token.LEQ, token.LEQ: token.GTR}
	arith    = map[token.Token]token.Token{token.ADD: token.SUB, token.SUB: token.ADD, token.MUL: token.QUO, token.QUO: token.MUL, token.REM: token.MUL}
	logical  = map[token.Token]token.Token{token.LAND: token.LOR, token.LOR: token.LAND}
)

// mutants lists the changes of one file.
func mutants(path string) ([]mutant, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []mutant
	add := func(pos token.Pos, old, new, kind string) {
		p := fset.Position(pos)
		out = append(out, mutant{file: path, line: p.Line, col: p.Column, offset: p.Offset, old: old, new: new, kind: kind})
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if to, ok := boundary[n.Op]; ok {
				add(n.OpPos, n.Op.String(), to.String(), "CONDITIONALS_BOUNDARY")
			}
			if to, ok := negation[n.Op]; ok {
				add(n.OpPos, n.Op.String(), to.String(), "CONDITIONALS_NEGATION")
			}
			if to, ok := arith[n.Op]; ok {
				add(n.OpPos, n.Op.String(), to.String(), "ARITHMETIC_BASE")
			}
			if to, ok := logical[n.Op]; ok {
				add(n.OpPos, n.Op.String(), to.String(), "INVERT_LOGICAL")
			}
		case *ast.IncDecStmt:
			to := token.DEC
			if n.Tok == token.DEC {
				to = token.INC
			}
			add(n.TokPos, n.Tok.String(), to.String(), "INCREMENT_DECREMENT")
		case *ast.UnaryExpr:
			switch n.Op {
			case token.SUB:
				add(n.OpPos, "-", " ", "INVERT_NEGATIVES")
			case token.NOT:
				add(n.OpPos, "!", " ", "REMOVE_NOT")
			}
		}
		return true
	})
	return out, nil
}

// covered reads a cover profile: file suffix → covered lines.
func covered(profile string) (map[string]map[int]bool, error) {
	f, err := os.Open(profile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]map[int]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") {
			continue
		}
		// name.go:l1.c1,l2.c2 statements count
		name, rest, ok := strings.Cut(line, ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 3 || fields[2] == "0" {
			continue
		}
		span := strings.Split(fields[0], ",")
		l1, _ := strconv.Atoi(strings.Split(span[0], ".")[0])
		l2, _ := strconv.Atoi(strings.Split(span[1], ".")[0])
		if out[name] == nil {
			out[name] = map[int]bool{}
		}
		for l := l1; l <= l2; l++ {
			out[name][l] = true
		}
	}
	return out, sc.Err()
}

func main() {
	var (
		pkgs    = flag.String("test", "", "comma-separated packages whose tests judge the mutants (required)")
		run     = flag.String("run", "", "go test -run")
		skip    = flag.String("skip", "", "go test -skip")
		workers = flag.Int("workers", 1, "mutants tested at once")
		timeout = flag.Duration("timeout", 5*time.Minute, "go test -timeout for one mutant")
		module  = flag.String("module", "github.com/toolbus/toolbus", "the module path, to match the cover profile")
		only    = flag.String("only", "", "run only the mutants whose line (as printed: file:line:col KIND old -> new) this regexp matches")
	)
	flag.Parse()
	if *pkgs == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: gomutate -test ./pkg/ [-run re] [-skip re] [-workers n] file.go...")
		os.Exit(2)
	}
	root, _ := os.Getwd()
	tmp, err := os.MkdirTemp("", "gomutate")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(tmp)

	testArgs := func(extra ...string) []string {
		args := []string{"test", "-short", "-count=1", "-failfast", "-timeout", timeout.String()}
		if *run != "" {
			args = append(args, "-run", *run)
		}
		if *skip != "" {
			args = append(args, "-skip", *skip)
		}
		args = append(args, extra...)
		return append(args, strings.Split(*pkgs, ",")...)
	}

	// The baseline: the tests pass, and which lines they cover.
	var coverpkgs []string
	for _, f := range flag.Args() {
		coverpkgs = append(coverpkgs, "./"+filepath.Dir(f))
	}
	profile := filepath.Join(tmp, "cover.out")
	start := time.Now()
	if out, err := exec.Command("go", testArgs("-coverprofile", profile, "-coverpkg", strings.Join(coverpkgs, ","))...).CombinedOutput(); err != nil {
		fatal(fmt.Errorf("the tests fail without a mutant: %v\n%s", err, out))
	}
	fmt.Printf("baseline passed in %s\n", time.Since(start).Round(time.Second))
	cov, err := covered(profile)
	if err != nil {
		fatal(err)
	}

	var onlyRE *regexp.Regexp
	if *only != "" {
		if onlyRE, err = regexp.Compile(*only); err != nil {
			fatal(err)
		}
	}
	var all, runnable []mutant
	notCovered := map[string]int{}
	for _, f := range flag.Args() {
		abs, _ := filepath.Abs(f)
		ms, err := mutants(abs)
		if err != nil {
			fatal(err)
		}
		lines := cov[*module+"/"+filepath.ToSlash(f)]
		for _, m := range ms {
			if onlyRE != nil && !onlyRE.MatchString(rel(root, m)) {
				continue
			}
			all = append(all, m)
			if lines[m.line] {
				runnable = append(runnable, m)
			} else {
				notCovered[f]++
				fmt.Printf("NOT COVERED %s\n", rel(root, m))
			}
		}
	}

	status := make([]string, len(runnable))
	var wg sync.WaitGroup
	next := make(chan int)
	var mu sync.Mutex
	for range *workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				s := try(tmp, i, runnable[i], testArgs)
				mu.Lock()
				status[i] = s
				fmt.Printf("%-11s %s\n", s, rel(root, runnable[i]))
				mu.Unlock()
			}
		}()
	}
	for i := range runnable {
		next <- i
	}
	close(next)
	wg.Wait()

	type tally struct{ killed, lived, notViable, timedOut, notCovered int }
	per := map[string]*tally{}
	for i, m := range runnable {
		f, _ := filepath.Rel(root, m.file)
		if per[f] == nil {
			per[f] = &tally{}
		}
		switch status[i] {
		case "KILLED":
			per[f].killed++
		case "LIVED":
			per[f].lived++
		case "NOT VIABLE":
			per[f].notViable++
		case "TIMED OUT":
			per[f].timedOut++
		}
	}
	for f, n := range notCovered {
		if per[f] == nil {
			per[f] = &tally{}
		}
		per[f].notCovered = n
	}
	var files []string
	for f := range per {
		files = append(files, f)
	}
	sort.Strings(files)
	var sum tally
	fmt.Printf("\n%-45s %6s %6s %6s %6s %6s %8s\n", "file", "killed", "lived", "t/out", "n/v", "n/cov", "efficacy")
	for _, f := range files {
		t := per[f]
		sum.killed += t.killed
		sum.lived += t.lived
		sum.timedOut += t.timedOut
		sum.notViable += t.notViable
		sum.notCovered += t.notCovered
		fmt.Printf("%-45s %6d %6d %6d %6d %6d %7.1f%%\n", f, t.killed, t.lived, t.timedOut, t.notViable, t.notCovered, efficacy(t.killed+t.timedOut, t.lived))
	}
	fmt.Printf("%-45s %6d %6d %6d %6d %6d %7.1f%%\n", "total", sum.killed, sum.lived, sum.timedOut, sum.notViable, sum.notCovered, efficacy(sum.killed+sum.timedOut, sum.lived))
	fmt.Printf("%d mutants, %d run, in %s\n", len(all), len(runnable), time.Since(start).Round(time.Second))
}

func efficacy(killed, lived int) float64 {
	if killed+lived == 0 {
		return 100
	}
	return 100 * float64(killed) / float64(killed+lived)
}

// try runs the tests with m in place of its file, through an overlay.
func try(tmp string, i int, m mutant, testArgs func(...string) []string) string {
	src, err := os.ReadFile(m.file)
	if err != nil {
		fatal(err)
	}
	if !bytes.HasPrefix(src[m.offset:], []byte(m.old)) {
		fatal(fmt.Errorf("%v: the source does not hold %q there", m, m.old))
	}
	mutated := append(append(append([]byte{}, src[:m.offset]...), m.new...), src[m.offset+len(m.old):]...)
	dir := filepath.Join(tmp, strconv.Itoa(i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, filepath.Base(m.file))
	overlay := filepath.Join(dir, "overlay.json")
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": {m.file: file}})
	if err := os.WriteFile(file, mutated, 0o644); err != nil {
		fatal(err)
	}
	if err := os.WriteFile(overlay, ov, 0o644); err != nil {
		fatal(err)
	}
	cmd := exec.CommandContext(context.Background(), "go", testArgs("-overlay", overlay)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "LIVED"
	case bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")):
		return "NOT VIABLE"
	case bytes.Contains(out, []byte("panic: test timed out")):
		return "TIMED OUT"
	case errors.As(err, &exit):
		return "KILLED"
	}
	fatal(fmt.Errorf("%v: %v\n%s", m, err, out))
	return ""
}

func rel(root string, m mutant) string {
	r, err := filepath.Rel(root, m.file)
	if err != nil {
		r = m.file
	}
	return fmt.Sprintf("%s:%d:%d %s %s -> %s", r, m.line, m.col, m.kind, m.old, strings.TrimSpace(m.new))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "gomutate:", err)
	os.Exit(1)
}
