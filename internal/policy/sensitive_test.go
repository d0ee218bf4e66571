package policy

import (
	"context"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// The default policy matches sensitive paths with regular expressions it
// makes from its lists (policy/constants.rego), against the path reversed.
// These tests hold it to a plain reading of the same lists, in Go: a path
// is sensitive when it is one of sensitive_files or under one of
// sensitive_dir_prefixes, or when its name matches a sensitive name (as
// path.Match reads * and ?) or a directory or path end is in it, and its
// name is no exception; without regard to case.

// sensitiveLists are the default policy's lists, read from the policy.
type sensitiveLists struct {
	names, exceptions, dirs, files, prefixes []string
}

var readLists = sync.OnceValues(func() (sensitiveLists, error) {
	files, err := LoadDir("../../policy")
	if err != nil {
		return sensitiveLists{}, err
	}
	opts := []func(*rego.Rego){rego.Query("data.toolbus"), rego.SetRegoVersion(ast.RegoV1)}
	for name, src := range files {
		if !isTest(name) {
			opts = append(opts, rego.Module(name, src))
		}
	}
	rs, err := rego.New(opts...).Eval(context.Background())
	if err != nil {
		return sensitiveLists{}, err
	}
	data := rs[0].Expressions[0].Value.(map[string]any)
	list := func(keys ...string) []string {
		var out []string
		for _, k := range keys {
			for _, v := range data[k].([]any) {
				out = append(out, strings.ToLower(v.(string)))
			}
		}
		slices.Sort(out)
		return out
	}
	return sensitiveLists{
		names: list("sensitive_names"), exceptions: list("sensitive_name_exceptions"),
		dirs: list("sensitive_dirs", "sensitive_path_ends"), files: list("sensitive_files"), prefixes: list("sensitive_dir_prefixes"),
	}, nil
})

// sensitiveByLists is the plain reading of the lists.
func sensitiveByLists(l sensitiveLists, p string) bool {
	lp := strings.ToLower(p)
	if slices.Contains(l.files, lp) {
		return true
	}
	for _, d := range l.prefixes {
		if strings.HasPrefix(lp, d+"/") {
			return true
		}
	}
	name := path.Base(lp)
	if strings.HasSuffix(lp, "/") {
		name = ""
	}
	matches := func(patterns []string) bool {
		for _, pat := range patterns {
			if ok, _ := path.Match(pat, name); ok && name != "" {
				return true
			}
		}
		return false
	}
	hit := matches(l.names)
	for _, d := range l.dirs {
		if lp == d || strings.HasPrefix(lp, d+"/") || strings.HasSuffix(lp, "/"+d) || strings.Contains(lp, "/"+d+"/") {
			hit = true
		}
	}
	return hit && !matches(l.exceptions)
}

// samplePaths makes paths around every entry of the lists: the entry
// itself, in other case, in and under directories, with text before and
// after it.
func samplePaths(l sensitiveLists) []string {
	fill := func(pat, star string) string { return strings.NewReplacer("*", star, "?", "z").Replace(pat) }
	var out []string
	for _, group := range [][]string{l.names, l.exceptions, l.dirs} {
		for _, pat := range group {
			for _, star := range []string{"x", "prod.local", ""} {
				n := fill(pat, star)
				for _, p := range []string{
					"/w/" + n, "/w/" + strings.ToUpper(n), "/w/a/" + n + "/b", "/w/" + n + ".bak", "/w/x" + n, "/w/" + n + "x",
					n, "/" + n, "/w/" + n + "/", "/home/u/.ssh/" + n, "/w/" + n + "/.env",
				} {
					out = append(out, p)
				}
			}
		}
	}
	for _, f := range append(slices.Clone(l.files), l.prefixes...) {
		out = append(out, f, strings.ToUpper(f), f+"/x", f+"x", "/w"+f, f+".d/x")
	}
	return append(out, "/w/README.md", "/w/src/main.go", "/home/u/.sshx/k", "/w/id_rsa.pub", "/w/.ssh/id_rsa.pub",
		"/w/.env.example", "/w/.env.example.bak", "/", "", "/w/.", "/w/..")
}

// TestSensitivePathsAgreeWithTheLists: the policy's expressions and the
// plain reading of the lists agree on every sample path.
func TestSensitivePathsAgreeWithTheLists(t *testing.T) {
	l, err := readLists()
	if err != nil {
		t.Fatal(err)
	}
	p := defaultPolicy(t)
	paths := samplePaths(l)
	denied, err := p.DeniedPaths(context.Background(), &Input{Paths: paths})
	if err != nil {
		t.Fatal(err)
	}
	sensitive := 0
	t.Logf("%d sample paths", len(paths))
	for _, path := range paths {
		want := sensitiveByLists(l, path)
		if denied[path] != want {
			t.Errorf("%q: the policy says sensitive=%v, the lists %v", path, denied[path], want)
		}
		if want {
			sensitive++
		}
	}
	if sensitive == 0 || sensitive == len(paths) {
		t.Fatalf("%d of %d sample paths are sensitive: the samples test nothing", sensitive, len(paths))
	}
}

// FuzzSensitivePath holds the policy's expressions to the plain reading
// of the lists for any path.
func FuzzSensitivePath(f *testing.F) {
	l, err := readLists()
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range samplePaths(l) {
		f.Add(p)
	}
	p := defaultPolicy(f)
	f.Fuzz(func(t *testing.T, path string) {
		if !strings.HasPrefix(path, "/") || strings.ContainsRune(path, 0) {
			return // the executor shows the policy absolute paths
		}
		denied, err := p.DeniedPaths(context.Background(), &Input{Paths: []string{path}})
		if err != nil {
			t.Fatal(err)
		}
		if want := sensitiveByLists(l, path); denied[path] != want {
			t.Errorf("%q: the policy says sensitive=%v, the lists %v", path, denied[path], want)
		}
	})
}
