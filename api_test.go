package lock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// apiBudget is the most exported names the root module's public packages
// may have together: a small API is a feature (see CHANGELOG.md, v1 API).
const apiBudget = 120

// TestExportedNames counts the exported names of the root module's public
// packages (every package but internal ones, main packages and nested
// modules): package-level exported identifiers, and exported methods
// declared on exported types. It fails above apiBudget; run it with -v to
// see the names.
func TestExportedNames(t *testing.T) {
	names := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "." {
				return nil
			}
			if n := d.Name(); n == "internal" || n == "testdata" || strings.HasPrefix(n, ".") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a nested module
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		pkg := filepath.Dir(path)
		names[pkg] = append(names[pkg], exported(f)...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	total := 0
	for p, n := range names {
		pkgs = append(pkgs, p)
		total += len(n)
	}
	sort.Strings(pkgs)
	if len(pkgs) < 5 {
		t.Fatalf("found %d packages: the walk is broken", len(pkgs))
	}
	for _, p := range pkgs {
		sort.Strings(names[p])
		t.Logf("%-16s %3d  %s", p, len(names[p]), strings.Join(names[p], " "))
	}
	t.Logf("total %d (budget %d)", total, apiBudget)
	if total > apiBudget {
		t.Errorf("the public packages export %d names, more than the budget of %d: say each thing once", total, apiBudget)
	}
}

// exported returns f's exported package-level names, and Type.Method for
// the exported methods of exported types.
func exported(f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv == nil {
				out = append(out, d.Name.Name)
				continue
			}
			t := d.Recv.List[0].Type
			if s, ok := t.(*ast.StarExpr); ok {
				t = s.X
			}
			if ix, ok := t.(*ast.IndexExpr); ok {
				t = ix.X
			}
			if id, ok := t.(*ast.Ident); ok && id.IsExported() {
				out = append(out, id.Name+"."+d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						out = append(out, s.Name.Name)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							out = append(out, n.Name)
						}
					}
				}
			}
		}
	}
	return out
}
