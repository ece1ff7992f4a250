package lock_test

import (
	"go/ast"
	"go/doc"
	"go/doc/comment"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// snippet is one Go snippet of a Markdown file or a doc comment.
type snippet struct {
	where string // file:line
	code  string
}

// TestDocSnippets checks that every Go snippet of every Markdown file and
// every doc comment of this repository (all four modules) is a part of a Go
// file's code, token for token (comments and layout aside), so that it
// compiles: CI builds every Go file. A snippet in a ```go fence is Go; an
// indented block of a doc comment is Go when it parses as Go statements or
// declarations (key tables and diagrams do not). Put a snippet in an
// example or a test and change both together.
func TestDocSnippets(t *testing.T) {
	var snippets []snippet
	var code [][]string // the token streams of every Go file
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "results") {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case strings.HasSuffix(path, ".md"):
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			snippets = append(snippets, markdownSnippets(path, string(src))...)
		case strings.HasSuffix(path, ".go"):
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			toks, ok := goTokens(string(src))
			if !ok {
				t.Errorf("%s does not scan as Go", path)
			}
			code = append(code, toks)
			s, err := docSnippets(path, src)
			if err != nil {
				return err
			}
			snippets = append(snippets, s...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(snippets) < 5 {
		t.Fatalf("found %d snippets: the walk is broken, this test would check nothing", len(snippets))
	}
	for _, s := range snippets {
		toks, ok := goTokens(s.code)
		if !ok || len(toks) == 0 {
			t.Errorf("%s: this Go snippet does not scan as Go:\n%s", s.where, s.code)
			continue
		}
		if !slices.ContainsFunc(code, func(file []string) bool { return containsRun(file, toks) }) {
			t.Errorf("%s: this Go snippet is in no Go file of the repository, so nothing compiles it; put it in an example or a test (and change both together):\n%s", s.where, s.code)
		}
	}
}

var goFence = regexp.MustCompile("(?s)```go\n(.*?)```")

// markdownSnippets returns the ```go blocks of a Markdown file.
func markdownSnippets(path, src string) []snippet {
	var out []snippet
	for _, m := range goFence.FindAllStringSubmatchIndex(src, -1) {
		line := 1 + strings.Count(src[:m[0]], "\n")
		out = append(out, snippet{where: path + ":" + strconv.Itoa(line), code: src[m[2]:m[3]]})
	}
	return out
}

// docSnippets returns the indented blocks of the doc comments of a Go file
// that parse as Go.
func docSnippets(path string, src []byte) ([]snippet, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, nil // a file that does not parse fails the build anyway
	}
	var groups []*ast.CommentGroup
	if f.Doc != nil {
		groups = append(groups, f.Doc)
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			groups = append(groups, d.Doc)
		case *ast.GenDecl:
			groups = append(groups, d.Doc)
		}
	}
	var out []snippet
	for _, g := range groups {
		if g == nil {
			continue
		}
		var block []string
		start := 0
		flush := func() {
			if len(block) > 0 && isGo(strings.Join(block, "\n")) {
				out = append(out, snippet{where: path + ":" + strconv.Itoa(start), code: strings.Join(block, "\n")})
			}
			block = nil
		}
		for _, c := range g.List {
			line := fset.Position(c.Pos()).Line
			text, ok := strings.CutPrefix(c.Text, "//")
			switch {
			case ok && strings.HasPrefix(text, "\t"):
				if len(block) == 0 {
					start = line
				}
				block = append(block, text[1:])
			case ok && strings.TrimSpace(text) == "" && len(block) > 0:
				block = append(block, "")
			default:
				flush()
			}
		}
		flush()
	}
	return out, nil
}

// looksGo matches what only Go code has among the indented blocks of this
// repository's doc comments (the others are key tables, payload formats and
// diagrams): a block that matches must be Go, and compile.
var looksGo = regexp.MustCompile(`:=|\bfunc\b|\bdefer\b|\breturn\b|(?m)^\s*}\)?\s*$`)

// isGo reports whether code parses as Go declarations or statements, or
// looks like Go (so that a snippet with an ellipsis is not let off).
func isGo(code string) bool {
	if looksGo.MatchString(code) {
		return true
	}
	fset := token.NewFileSet()
	if _, err := parser.ParseFile(fset, "", "package p\n"+code, 0); err == nil {
		return true
	}
	_, err := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+code+"\n}", 0)
	return err == nil
}

// goTokens returns src's Go tokens, without comments and without the
// semicolons the scanner inserts at line ends (so that a snippet's last
// line matches the same line inside a file).
func goTokens(src string) ([]string, bool) {
	var s scanner.Scanner
	fset := token.NewFileSet()
	ok := true
	s.Init(fset.AddFile("", -1, len(src)), []byte(src), func(token.Position, string) { ok = false }, 0)
	var out []string
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			return out, ok
		}
		if tok == token.SEMICOLON && lit == "\n" {
			continue
		}
		if lit == "" {
			lit = tok.String()
		}
		out = append(out, lit)
	}
}

// containsRun reports whether sub is a contiguous run of s.
func containsRun(s, sub []string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i] == sub[0] && slices.Equal(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// TestDocSnippetsCheck: the check finds a snippet inside a file whatever
// its layout and comments, and catches one that differs in one token or
// is elided, and an ellipsis block of a doc comment counts as Go.
func TestDocSnippetsCheck(t *testing.T) {
	file, _ := goTokens("package p\n\nfunc f() {\n\tb, err := New(c, nil) // a comment\n\tif err != nil {\n\t\treturn\n\t}\n}\n")
	has := func(code string) bool {
		toks, ok := goTokens(code)
		return ok && containsRun(file, toks)
	}
	if !has("b, err := New(c, nil)\nif err != nil {\n    return\n}") {
		t.Error("a snippet of the file, laid out differently, was not found")
	}
	if has("b, err := New(c, &Options{})") || has("b, err := New(c, nil)\n...") {
		t.Error("a snippet that is not in the file was found")
	}
	src := []byte("// Package p.\n//\n//\tb, err := p.New(nil)\n//\t...\n//\n//\tkey | value\npackage p\n")
	s, err := docSnippets("p.go", src)
	if err != nil || len(s) != 1 || !strings.Contains(s[0].code, "p.New") {
		t.Errorf("docSnippets = %+v, %v; want the one Go block (with its ellipsis), not the table", s, err)
	}
}

// TestDocLinks checks that every doc link ([Name], [Type.Method],
// [pkg.Name]) of the exported doc comments of this repository's packages
// (all four modules) names something that exists: go doc and pkgsite
// render it as a link, where a link to a renamed or removed name would stay
// as plain brackets, pointing nowhere.
func TestDocLinks(t *testing.T) {
	fset := token.NewFileSet()
	pkgs := map[string][]*ast.File{} // by directory and package name
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "results") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil // a file that does not parse fails the build anyway
		}
		key := filepath.Dir(path) + " (package " + f.Name.Name + ")"
		pkgs[key] = append(pkgs[key], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 10 {
		t.Fatalf("found %d packages: the walk is broken, this test would check nothing", len(pkgs))
	}
	for key, files := range pkgs {
		bad, err := brokenDocLinks(fset, files)
		if err != nil {
			t.Errorf("%s: %v", key, err)
		}
		for _, b := range bad {
			t.Errorf("%s: %s: a doc link that names nothing in reach (a renamed or removed name, or a package this one does not import)", key, b)
		}
	}
}

// brokenLink matches what is left of a doc link that did not resolve: an
// identifier or a dotted name in square brackets, not right after a word
// (so that an index such as acks[i] is not one).
var brokenLink = regexp.MustCompile(`(?:^|[^\w\]])(\[\*?[A-Za-z_]\w*(?:\.\w+)*\])`)

// brokenDocLinks returns, as "Name: [Link]", the doc links of the exported
// doc comments of one package's files that do not resolve; code blocks are
// left out.
func brokenDocLinks(fset *token.FileSet, files []*ast.File) ([]string, error) {
	dp, err := doc.NewFromFiles(fset, files, "example.com/"+files[0].Name.Name)
	if err != nil {
		return nil, err
	}
	var out []string
	check := func(where, text string) {
		var walk func(b comment.Block)
		walk = func(b comment.Block) {
			var plain strings.Builder
			var texts []comment.Text
			switch b := b.(type) {
			case *comment.Paragraph:
				texts = b.Text
			case *comment.Heading:
				texts = b.Text
			case *comment.List:
				for _, it := range b.Items {
					for _, c := range it.Content {
						walk(c)
					}
				}
			}
			for _, x := range texts {
				if p, ok := x.(comment.Plain); ok {
					plain.WriteString(string(p))
				}
				plain.WriteByte(' ')
			}
			for _, m := range brokenLink.FindAllStringSubmatch(plain.String(), -1) {
				out = append(out, where+": "+m[1])
			}
		}
		for _, b := range dp.Parser().Parse(text).Content {
			walk(b)
		}
	}
	check("package doc", dp.Doc)
	for _, v := range append(dp.Consts, dp.Vars...) {
		check(strings.Join(v.Names, ", "), v.Doc)
	}
	for _, f := range dp.Funcs {
		check(f.Name, f.Doc)
	}
	for _, ty := range dp.Types {
		check(ty.Name, ty.Doc)
		for _, v := range append(ty.Consts, ty.Vars...) {
			check(strings.Join(v.Names, ", "), v.Doc)
		}
		for _, f := range append(ty.Funcs, ty.Methods...) {
			check(ty.Name+"."+f.Name, f.Doc)
		}
	}
	return out, nil
}

// TestDocLinksCheck: the check finds a link to a name that does not exist,
// and lets pass a link that resolves, an index expression and a code block.
func TestDocLinksCheck(t *testing.T) {
	src := "// Package p has [T], [T.M], [strings.Cut], acks[i] and [Gone].\n" +
		"//\n//\tx := m[Key]\n//\ty := [Code]\npackage p\n\n" +
		"import \"strings\"\n\n" +
		"// T is a type; see [Missing.M].\ntype T struct{}\n\n" +
		"// M is a method.\nfunc (T) M() { _ = strings.Cut }\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	bad, err := brokenDocLinks(fset, []*ast.File{f})
	want := []string{"package doc: [Gone]", "T: [Missing.M]"}
	if err != nil || !slices.Equal(bad, want) {
		t.Errorf("brokenDocLinks = %q, %v; want %q", bad, err, want)
	}
}

// readmeBudget is the most lines README.md may have: it is the newcomer's
// path (what it is, install, the two commands, an API tour, the guarantees
// table, links); everything else has a page under docs/ or a package doc.
const readmeBudget = 200

// TestReadmeLength keeps README.md within readmeBudget lines.
func TestReadmeLength(t *testing.T) {
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > readmeBudget {
		t.Errorf("README.md has %d lines, more than %d: move what is not for a newcomer to docs/", n, readmeBudget)
	}
}
