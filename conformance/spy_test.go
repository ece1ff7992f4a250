package conformance

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
// TestSpyForwardsEveryCapability fails when package backend gains an
// interface that is not listed here: add it, and forward it in spy.go.
var optional = map[string]reflect.Type{
	"Batcher":       reflect.TypeFor[backend.Batcher](),
	"ExtendBatcher": reflect.TypeFor[backend.ExtendBatcher](),
	"Resolver":      reflect.TypeFor[backend.Resolver](),
	"HandOffer":     reflect.TypeFor[backend.HandOffer](),
	"Inspector":     reflect.TypeFor[backend.Inspector](),
}

// required are the interfaces of package backend that every backend has.
var required = []string{"Backend", "Lock", "Queue", "Notifier"}

// TestSpyForwardsEveryCapability checks that the spy the suite wraps
// around every backend has every interface package backend declares: a
// capability it lacked would never run under the suite (as ExtendBatch
// once did not).
func TestSpyForwardsEveryCapability(t *testing.T) {
	dir := filepath.Join("..", "backend")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no source files of package backend in %s: %v", dir, err)
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
	spyType := reflect.TypeFor[*spy]()
	for _, name := range found {
		if slices.Contains(required, name) {
			continue
		}
		typ, ok := optional[name]
		if !ok {
			t.Errorf("package backend declares interface %s, which the suite does not know: list it in optional and forward it in spy.go", name)
			continue
		}
		if !spyType.Implements(typ) {
			t.Errorf("the spy does not implement backend.%s: no backend's %s runs under the suite", name, name)
		}
	}
	for name := range optional {
		if !slices.Contains(found, name) {
			t.Errorf("optional lists %s, which package backend no longer declares", name)
		}
	}
}
