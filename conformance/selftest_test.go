package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// subprocessTimeout bounds one run of the suite in a subprocess. The
// subprocess gets a -test.timeout a little shorter, so that a hang dumps its
// goroutines instead of being killed silently.
const subprocessTimeout = 3 * time.Minute

// mustRun lists subtests that every run of the whole suite must start, so
// that a suite that silently does nothing fails the self-test.
var mustRun = []string{"mutual-exclusion", "fifo-order", "wake-on-release", "fencing"}

var (
	runLine  = regexp.MustCompile(`(?m)^=== RUN\s+TestBrokenBackend/([^/\s]+)\s*$`)
	failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: TestBrokenBackend/(\S+)`)
)

// suiteRun is the outcome of one subprocess run of TestBrokenBackend.
type suiteRun struct {
	out     string
	err     error    // the subprocess's exit error, nil if it passed
	ran     []string // top-level subtests started, in order
	failed  []string // top-level subtests failed, sorted
	failedN []string // every failed subtest, nested ones included
	took    time.Duration
	fatal   string // why the run itself failed, if it did
}

// maxSubprocesses bounds the runs of the suite at once. They mostly wait
// on timers (all of them together take about 17 s of CPU over their 90 s),
// so more of them than cores run well: every broken backend and the control
// run at once (the whole suite's wall time, not eight runs' worth at a time).
const maxSubprocesses = 32

// startEvery paces the starts of the runs. A test binary starting under
// -race, and the first properties of its suite, take a burst of CPU: 34 of
// them at the same instant once starved a 600 ms bound of a test binary
// running beside this one. One start per startEvery spreads that burst
// over a few seconds, so this package needs no machine-wide lock.
const startEvery = 250 * time.Millisecond

// startSuites starts runSuite for every kind, the given order being the
// order of the starts (put the longest runs first), one per startEvery and
// at most maxSubprocesses at a time, and returns where each result arrives.
func startSuites(kinds []string, props func(kind string) []string) map[string]<-chan suiteRun {
	sem := make(chan struct{}, maxSubprocesses)
	out := make(map[string]<-chan suiteRun, len(kinds))
	chans := make([]chan suiteRun, len(kinds))
	for i, kind := range kinds {
		chans[i] = make(chan suiteRun, 1)
		out[kind] = chans[i]
	}
	go func() {
		pace := time.NewTicker(startEvery)
		defer pace.Stop()
		for i, kind := range kinds {
			if i > 0 {
				<-pace.C
			}
			sem <- struct{}{}
			go func() {
				defer func() { <-sem }()
				chans[i] <- runSuite(kind, props(kind))
			}()
		}
	}()
	return out
}

// runSuite runs TestBrokenBackend with $LOCK_CONFORMANCE_BROKEN=kind in a
// subprocess of the current test binary; props restricts it to these
// top-level properties (nil: the whole suite).
func runSuite(kind string, props []string) suiteRun {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	pattern := "^TestBrokenBackend$"
	if len(props) > 0 {
		quoted := make([]string, len(props))
		for i, p := range props {
			quoted[i] = regexp.QuoteMeta(p)
		}
		pattern += "/^(" + strings.Join(quoted, "|") + ")$"
	}
	ctx, cancel := context.WithTimeout(context.Background(), subprocessTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe,
		"-test.run="+pattern,
		"-test.v",
		"-test.count=1",
		"-test.timeout="+(subprocessTimeout-15*time.Second).String(),
	)
	// The broken runs fail rapid properties: no fail files in the tree.
	cmd.Env = append(os.Environ(), brokenEnv+"="+kind, "RAPID_NOFAILFILE=1")
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r := suiteRun{out: string(out), err: err, took: time.Since(start)}
	if ctx.Err() != nil {
		r.fatal = fmt.Sprintf("%s: the suite did not finish within %v; output:\n%s", kind, subprocessTimeout, tail(r.out, 200))
		return r
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		r.fatal = fmt.Sprintf("%s: running %s: %v", kind, exe, err)
		return r
	}
	for _, m := range runLine.FindAllStringSubmatch(r.out, -1) {
		if !slices.Contains(r.ran, m[1]) {
			r.ran = append(r.ran, m[1])
		}
	}
	for _, m := range failLine.FindAllStringSubmatch(r.out, -1) {
		r.failedN = append(r.failedN, m[1])
		top, _, _ := strings.Cut(m[1], "/")
		if !slices.Contains(r.failed, top) {
			r.failed = append(r.failed, top)
		}
	}
	slices.Sort(r.failed)
	return r
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines cut]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// TestSuiteCatchesBrokenBackends checks that the suite can fail: each
// deliberately broken backend (brokenKinds) must fail under the property
// it breaks, and under no other (but those alsoFails lists), and the same
// harness over the unbroken memorybackend must pass the whole suite (so the
// failures come from the breakage).
func TestSuiteCatchesBrokenBackends(t *testing.T) {
	kinds := make([]string, 0, len(brokenKinds))
	for k := range brokenKinds {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	// The runs of the whole suite (the control and the step breakages)
	// take longest: they start first.
	order := []string{controlName}
	for _, k := range kinds {
		if stepKinds[k] {
			order = append(order, k)
		}
	}
	for _, k := range kinds {
		if !stepKinds[k] {
			order = append(order, k)
		}
	}
	runs := startSuites(order, func(kind string) []string {
		switch {
		case stepKinds[kind]:
			return nil // the whole suite
		case sharedKinds[kind] != nil:
			return sharedPropNames // every shared property
		}
		return brokenKinds[kind]
	})

	for _, kind := range kinds {
		want := brokenKinds[kind]
		t.Run(kind, func(t *testing.T) {
			r := <-runs[kind]
			if r.fatal != "" {
				t.Fatal(r.fatal)
			}
			t.Logf("%s: failing properties %v (subtests %v), in %v", kind, r.failed, r.failedN, r.took.Round(time.Millisecond))
			for _, p := range want {
				if !slices.Contains(r.ran, p) {
					t.Errorf("%s: the subprocess did not run TestBrokenBackend/%s (ran %v); the suite did nothing?",
						kind, p, r.ran)
				} else if !slices.Contains(r.failed, p) {
					t.Errorf("%s: the suite did not catch the broken backend: property %q passed (failing: %v)",
						kind, p, r.failed)
				}
			}
			var extra []string
			for _, p := range r.failed {
				if !slices.Contains(want, p) && !slices.Contains(alsoFails[kind], p) {
					extra = append(extra, p)
				}
			}
			if len(extra) > 0 {
				// Many suites ran at once: a timing property may have
				// failed from load. Only a failure that repeats alone
				// counts.
				again := runSuite(kind, extra)
				t.Logf("%s: %v failed too; alone again: failing %v", kind, extra, again.failed)
				for _, p := range again.failed {
					if slices.Contains(extra, p) {
						t.Errorf("%s: property %q failed too, also when run alone: a broken backend should fail only under the property it breaks (or say why in alsoFails)", kind, p)
					}
				}
				if again.fatal != "" {
					t.Error(again.fatal)
				}
			}
			if r.err == nil {
				t.Errorf("%s: the subprocess exited 0 although it should fail", kind)
			}
			if t.Failed() {
				t.Logf("%s: subprocess output:\n%s", kind, tail(r.out, 100))
			}
		})
	}

	t.Run("control", func(t *testing.T) {
		r := <-runs[controlName]
		if r.fatal != "" {
			t.Fatal(r.fatal)
		}
		t.Logf("control: ran %d properties %v, failing %v, in %v", len(r.ran), r.ran, r.failed, r.took.Round(time.Millisecond))
		for _, p := range mustRun {
			if !slices.Contains(r.ran, p) {
				t.Errorf("control: the suite did not run TestBrokenBackend/%s (ran %v)", p, r.ran)
			}
		}
		if len(r.failed) > 0 || r.err != nil {
			t.Errorf("control: the unbroken memorybackend failed %v (subtests %v, exit %v); output:\n%s",
				r.failed, r.failedN, r.err, tail(r.out, 100))
		}
		// The memorybackend offers shared ids: their properties must run
		// and pass, not be skipped.
		for _, p := range sharedPropNames {
			if !strings.Contains(r.out, "--- PASS: TestBrokenBackend/"+p+" ") {
				t.Errorf("control: TestBrokenBackend/%s did not pass (skipped?)", p)
			}
		}
		if !strings.Contains(r.out, "--- PASS: TestBrokenBackend ") {
			t.Errorf("control: no PASS line for TestBrokenBackend; output:\n%s", tail(r.out, 50))
		}
	})
}
