package toolbus_test

import (
	"encoding/json"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const pkgPath = "github.com/toolbus/toolbus/pkg/toolbus"

// TestAPINamesNoInternalType walks every exported name of the package,
// as the compiler sees it, and fails on any type from an internal
// package it reaches: a module outside this one could not name it.
func TestAPINamesNoInternalType(t *testing.T) {
	pkg := loadExported(t)
	var leaks []string
	seen := map[types.Type]bool{}
	var walk func(where string, typ types.Type)
	walk = func(where string, typ types.Type) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		switch typ := typ.(type) {
		case *types.Named:
			obj := typ.Obj()
			if p := obj.Pkg(); p != nil && isInternal(p.Path()) {
				leaks = append(leaks, where+": "+p.Path()+"."+obj.Name())
				return
			}
			if obj.Pkg() == nil || obj.Pkg().Path() != pkgPath {
				return // another public package's type: its own business
			}
			walk(where, typ.Underlying())
			for m := range typ.Methods() {
				if m.Exported() {
					walk(where+"."+m.Name(), m.Type())
				}
			}
		case *types.Pointer:
			walk(where, typ.Elem())
		case *types.Slice:
			walk(where, typ.Elem())
		case *types.Array:
			walk(where, typ.Elem())
		case *types.Map:
			walk(where, typ.Key())
			walk(where, typ.Elem())
		case *types.Chan:
			walk(where, typ.Elem())
		case *types.Signature:
			for v := range typ.Params().Variables() {
				walk(where+"(param)", v.Type())
			}
			for v := range typ.Results().Variables() {
				walk(where+"(result)", v.Type())
			}
		case *types.Struct:
			for f := range typ.Fields() {
				if f.Exported() {
					walk(where+"."+f.Name(), f.Type())
				}
			}
		case *types.Interface:
			for m := range typ.Methods() {
				if m.Exported() {
					walk(where+"."+m.Name(), m.Type())
				}
			}
		}
	}
	names := pkg.Scope().Names()
	exported := 0
	for _, name := range names {
		obj := pkg.Scope().Lookup(name)
		if !obj.Exported() {
			continue
		}
		exported++
		walk(name, obj.Type())
	}
	if exported < 10 {
		t.Fatalf("only %d exported names found; the walk looked at the wrong package", exported)
	}
	if len(leaks) > 0 {
		t.Errorf("the exported API names internal types:\n%s", strings.Join(leaks, "\n"))
	}
}

func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/") || strings.HasPrefix(path, "internal/")
}

// loadExported type-checks nothing itself: it reads the export data the
// go command built for the package.
func loadExported(t *testing.T) *types.Package {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Export", pkgPath).Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	files := map[string]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		files[p.ImportPath] = p.Export
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(files[path])
	})
	pkg, err := imp.Import(pkgPath)
	if err != nil {
		t.Fatalf("import %s: %v", pkgPath, err)
	}
	return pkg
}
