package policy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// oldSensitive is the default policy's sensitive(p) as it was before the
// leads (constants.rego) guarded it: the regular expressions alone.
const oldSensitive = `package toolbus_old

import data.toolbus_constants

sensitive(p) if regex.match(toolbus_constants.path_pattern, lower(p))

sensitive(p) if {
	r := strings.reverse(lower(p))
	regex.match(toolbus_constants.reversed_pattern, r)
	not regex.match(toolbus_constants.reversed_exception, r)
}
`

// TestLeadsChangeNoVerdict: sensitive(p) with the leads and without them
// (the regular expressions alone) agree on many paths: made around every
// entry of the lists, in other case, with a / after, deep, and at random
// from parts of the entries; under the default lists, under lists a team
// could write (wildcards anywhere, an entry with a /), and under empty
// ones. The rules are evaluated as written, as opa test does.
func TestLeadsChangeNoVerdict(t *testing.T) {
	l, err := readLists()
	if err != nil {
		t.Fatal(err)
	}
	files, err := LoadDir("../../policy")
	if err != nil {
		t.Fatal(err)
	}
	opts := []func(*rego.Rego){rego.SetRegoVersion(ast.RegoV1), rego.StrictBuiltinErrors(true), rego.Module("old.rego", oldSensitive)}
	for name, src := range files {
		if !isTest(name) {
			opts = append(opts, rego.Module(name, src))
		}
	}
	paths := leadPaths(l)
	lists := map[string]string{
		"default": "",
		"extended": ` with data.toolbus.sensitive_names as {"id_*", "*.pem", ".env", "se?ret*.y?ml", "*cred*", "a*b?c", "?", "dir/name", "*.tar.*", "x*"}` +
			` with data.toolbus.sensitive_name_exceptions as {"*.pub", "?.md", "secret.yml"}` +
			` with data.toolbus.sensitive_dirs as {".ssh", "*-keys", "vault?"}` +
			` with data.toolbus.sensitive_path_ends as {".aws/credentials", ".config/*/token", "*/private"}` +
			` with data.toolbus.sensitive_files as {"/etc/shadow", "/Etc/Passwd"}` +
			` with data.toolbus.sensitive_dir_prefixes as {"/etc/sudoers.d", "/Var/Secrets"}`,
		"no names":      ` with data.toolbus.sensitive_names as set()`,
		"no dirs":       ` with data.toolbus.sensitive_dirs as set() with data.toolbus.sensitive_path_ends as set()`,
		"no files":      ` with data.toolbus.sensitive_files as set()`,
		"no prefixes":   ` with data.toolbus.sensitive_dir_prefixes as set()`,
		"no exceptions": ` with data.toolbus.sensitive_name_exceptions as set()`,
	}
	ctx := context.Background()
	for name, with := range lists {
		query := fmt.Sprintf(`new := {p | some p in input; data.toolbus.sensitive(p)}%s; old := {p | some p in input; data.toolbus_old.sensitive(p)}%s`, with, with)
		rs, err := rego.New(append(opts, rego.Query(query), rego.Input(paths))...).Eval(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		newSet, oldSet := rs[0].Bindings["new"].([]any), rs[0].Bindings["old"].([]any)
		in := func(set []any) map[string]bool {
			m := make(map[string]bool, len(set))
			for _, v := range set {
				m[v.(string)] = true
			}
			return m
		}
		newIn, oldIn := in(newSet), in(oldSet)
		for _, p := range paths {
			if newIn[p] != oldIn[p] {
				t.Errorf("%s: %q: sensitive=%v with the leads, %v by the expressions alone", name, p, newIn[p], oldIn[p])
			}
		}
		if len(oldIn) == 0 || len(oldIn) == len(paths) {
			t.Errorf("%s: %d of %d paths are sensitive: the paths test nothing", name, len(oldIn), len(paths))
		}
		t.Logf("%s: %d of %d paths sensitive", name, len(oldIn), len(paths))
	}
}

// leadPaths are the sample paths of the lists and their variants, and
// paths put together at random from parts of the entries.
func leadPaths(l sensitiveLists) []string {
	base := samplePaths(l)
	var parts []string
	for _, group := range [][]string{l.names, l.exceptions, l.dirs, l.files, l.prefixes,
		{"se?ret*.y?ml", "a*b?c", "dir/name", "*-keys", "vault?", ".config/*/token", "/var/secrets", "x*", "*.tar.*"}} {
		for _, pat := range group {
			for _, star := range []string{"", "x", "q.z", "*", "?"} {
				p := strings.NewReplacer("*", star, "?", "k").Replace(pat)
				parts = append(parts, p, strings.ToUpper(p), strings.Trim(p, "/"))
				if len(p) > 2 {
					parts = append(parts, p[1:], p[:len(p)-1])
				}
			}
		}
	}
	parts = append(parts, "", ".", "..", "w", "home", "u", "README.md", "id_", "id", ".env.", "ENV", "pub", ".pub", "crédit", "Ω")
	rng := rand.New(rand.NewPCG(29, 1))
	out := make([]string, 0, 4*len(base)+6000)
	for _, p := range base {
		out = append(out, p, strings.ToUpper(p), p+"/", "/deep/a/b/c/d/e"+p)
	}
	for range 6000 {
		var b strings.Builder
		if rng.IntN(5) > 0 {
			b.WriteString("/")
		}
		for j, n := 0, 1+rng.IntN(6); j < n; j++ {
			if j > 0 {
				b.WriteString("/")
			}
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		if rng.IntN(6) == 0 {
			b.WriteString("/")
		}
		out = append(out, b.String())
	}
	return out
}
