package testkit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/redislocker/lock/backend"
)

// optional maps each optional capability of package backend to its type.
// Forwards fails when package backend declares an interface that is not
// listed here or in required: add it here, and to every wrapper that
// checks with Forwards.
var optional = map[string]reflect.Type{
	"Batcher":       reflect.TypeFor[backend.Batcher](),
	"ExtendBatcher": reflect.TypeFor[backend.ExtendBatcher](),
	"Resolver":      reflect.TypeFor[backend.Resolver](),
	"HandOffer":     reflect.TypeFor[backend.HandOffer](),
	"Inspector":     reflect.TypeFor[backend.Inspector](),
	"Sharer":        reflect.TypeFor[backend.Sharer](),
}

// required are the interfaces of package backend that every backend has.
var required = []string{"Backend", "Lock", "Queue", "Notifier"}

// Forwards checks that wrapper, a type that wraps a backend (a test spy,
// the core's observer), implements every interface that package backend
// declares in backendDir, so that no optional capability of the backend
// it wraps is hidden from its users. A capability a wrapper drops never
// runs behind it.
func Forwards(t *testing.T, wrapper reflect.Type, backendDir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(backendDir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no source files of package backend in %s: %v", backendDir, err)
	}
	fset := token.NewFileSet()
	var found []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.IsExported() {
				if _, ok := ts.Type.(*ast.InterfaceType); ok {
					found = append(found, ts.Name.Name)
				}
			}
			return true
		})
	}
	for _, name := range found {
		if slices.Contains(required, name) {
			continue
		}
		typ, ok := optional[name]
		if !ok {
			t.Errorf("package backend declares interface %s, which testkit.Forwards does not know: list it in its optional map, and forward it in every wrapper", name)
			continue
		}
		if !wrapper.Implements(typ) {
			t.Errorf("%v does not implement backend.%s: the capability of the backend it wraps is hidden", wrapper, name)
		}
	}
	for name := range optional {
		if !slices.Contains(found, name) {
			t.Errorf("testkit.Forwards lists %s, which package backend no longer declares", name)
		}
	}
}
