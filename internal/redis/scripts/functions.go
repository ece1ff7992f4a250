package scripts

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
)

// Library is the scripts as one Redis 7 function library (FUNCTION LOAD),
// for FCALL: each script is a function of it, [Script.Function]. It is
// built from the same Lua files as the scripts, with no change to their
// logic (see newLibrary).
type Library struct {
	Name   string // "lock_" and the first 12 hex digits of the SHA1 of Body (with the functions' names left out)
	Body   string // the library's code, after its "#!lua" line
	Source string // what FUNCTION LOAD takes: the "#!lua name=<Name>" line, then Body
}

// Lib is the function library of every script of the package.
var Lib Library

// library is the order in which the package's scripts are put in Lib: all
// of them, so that every Script has its Function.
var library = []*Script{&Acquire, &AcquireShared, &AcquireMany, &Release, &Extend, &Leave, &Heartbeat, &Inspect, &ForceRelease, &Wire}

func init() {
	Lib = newLibrary(files, library)
}

// newLibrary builds the library of scripts and sets each one's Function.
//
// A script's text is lib.lua, its shared parts and its own file (see
// load). In the library, lib.lua and the shared parts are its top level,
// in the order a script has them (every file's part before its
// "-- [slow path]" line, then the parts after it), so that their helpers
// are made once, when the library loads, and not on every call. Their
// top-level statements may only be local declarations (see hoist). Each
// script's own file is the body of its function, which takes its keys and
// arguments as KEYS and ARGV: the library's locals that the helpers read.
// A top-level local whose value is not a constant (it is computed, or a
// script assigns it: state of one call) is declared at the top level and
// set anew at the start of every call, as a script sets it. So a function
// behaves as its script: the same statements on the same values.
func newLibrary(fsys fs.FS, scripts []*Script) Library {
	parts := []string{"lib"}
	for _, s := range scripts {
		for _, p := range s.parts {
			if !contains(parts, p) {
				parts = append(parts, p)
			}
		}
	}
	// Every line of every file: where a script may assign a local of the
	// top level.
	var all []string
	for _, f := range parts {
		all = append(all, strings.Split(read(fsys, f), "\n")...)
	}
	for _, s := range scripts {
		all = append(all, strings.Split(read(fsys, s.Name), "\n")...)
	}
	var fast, slow []string
	var fastSet, slowSet []string // statements that set the per-call locals
	for _, f := range parts {
		head, tail := splitSlow(read(fsys, f))
		code, set := hoist(all, f, head)
		fast, fastSet = append(fast, code), append(fastSet, set...)
		code, set = hoist(all, f, tail)
		slow, slowSet = append(slow, code), append(slowSet, set...)
	}
	perCall := append(fastSet, slowSet...)
	var b strings.Builder
	b.WriteString("-- The scripts of the lock as one function library (see package scripts).\n")
	b.WriteString("local KEYS, ARGV\n")
	b.WriteString(strings.Join(append(fast, slow...), "\n"))
	// The functions' names depend on the library's name, which is the
	// digest of all but them: they are written with a placeholder first.
	const placeholder = "\x00LIB\x00"
	for _, s := range scripts {
		fmt.Fprintf(&b, "\nredis.register_function('%s_%s', function(keys, args)\nKEYS, ARGV = keys, args\n", placeholder, s.Name)
		for _, set := range perCall {
			b.WriteString(set + "\n")
		}
		b.WriteString(read(fsys, s.Name))
		b.WriteString("\nend)\n")
	}
	sum := sha1.Sum([]byte(b.String()))
	name := "lock_" + hex.EncodeToString(sum[:])[:12]
	body := strings.ReplaceAll(b.String(), placeholder, name)
	for _, s := range scripts {
		s.Function = name + "_" + s.Name
	}
	return Library{Name: name, Body: body, Source: "#!lua name=" + name + "\n" + body}
}

// read returns the file lua/<name>.lua of fsys.
func read(fsys fs.FS, name string) string {
	b, err := fs.ReadFile(fsys, "lua/"+name+".lua")
	if err != nil {
		panic(err)
	}
	return string(b)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

var (
	// topLocal is a top-level local declaration of one name with a value.
	topLocal = regexp.MustCompile(`^local ([A-Za-z_][A-Za-z0-9_]*) = (.*)$`)
	// constant is a literal value: a number, a string, true or false.
	constant = regexp.MustCompile(`^(-?[0-9][0-9xXa-fA-F.]*|'[^'\\]*'|"[^"\\]*"|true|false)$`)
)

// hoist returns src, part of the shared file f, as the library's top
// level, and the statements that set its per-call locals at the start of
// every call. Redis runs a library's top level once, at FUNCTION LOAD,
// where it may not call redis.call nor even tonumber: so a top-level local
// whose value is not a constant, or which a script assigns (state of one
// call, as fences), is declared without a value there and set on every
// call instead. A top-level statement must be a comment, a local
// declaration, or the "end" of a local function; a declaration of a
// per-call local must fit on its line. hoist panics otherwise: the file
// needs a change for the library.
//
// all is every line of the library's files, where hoist looks for the
// assignments.
func hoist(all []string, f, src string) (code string, perCall []string) {
	lines := strings.Split(src, "\n")
	for i, line := range lines {
		switch {
		case line == "", strings.HasPrefix(line, "--"), line == "end",
			strings.HasPrefix(line, " "), strings.HasPrefix(line, "\t"),
			strings.HasPrefix(line, "local function "):
			continue
		}
		m := topLocal.FindStringSubmatch(line)
		if m == nil {
			panic(fmt.Sprintf("scripts: lua/%s.lua: %q: the function library takes only local declarations and local functions at the top level", f, line))
		}
		name, value := m[1], strings.TrimSpace(stripComment(m[2]))
		if constant.MatchString(value) && !assigned(all, name) {
			continue
		}
		if strings.Count(value, "(") != strings.Count(value, ")") || strings.Count(value, "{") != strings.Count(value, "}") ||
			strings.HasSuffix(value, "{") || strings.HasSuffix(value, "(") {
			panic(fmt.Sprintf("scripts: lua/%s.lua: %q: a per-call local must be declared on one line", f, line))
		}
		lines[i] = "local " + name
		perCall = append(perCall, name+" = "+value)
	}
	return strings.Join(lines, "\n"), perCall
}

// stripComment returns s without a trailing "--" comment outside quotes.
func stripComment(s string) string {
	var quote byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			return s[:i]
		}
	}
	return s
}

// assigned reports whether a line of Lua text assigns name, or one of its
// fields, anywhere but in a local declaration: "name =", "name[k] =",
// "name.k =", "a, name =", or changes it with a table function
// ("table.insert(name, ..."). A false positive only costs a per-call
// assignment.
func assigned(lines []string, name string) bool {
	var assign, call *regexp.Regexp
	for _, line := range lines {
		if !strings.Contains(line, name) {
			continue
		}
		if assign == nil {
			q := regexp.QuoteMeta(name)
			assign = regexp.MustCompile(`^\s*(?:[A-Za-z_][\w.\[\]'"]*\s*,\s*)*` + q + `\b[\w.\[\]'"]*\s*(?:,\s*[\w.\[\]'"]+\s*)*=[^=]`)
			call = regexp.MustCompile(`table\.\w+\(\s*` + q + `\b`)
		}
		if assign.MatchString(line) || call.MatchString(line) {
			return true
		}
	}
	return false
}
