// Command testlog renders `go test -json` output for people, as it
// arrives: one line per package, the compiler's (and vet's) messages of a
// package that does not build, the whole output of every failing test, and
// at the end every skipped test with its reason and the counts, so a run
// that skipped tests says so. `make test` pipes `go test -json` into it,
// with -run and -pkg set to its RUN and PKG.
//
// It exits 1 when a test or package failed, the JSON stream ended without
// a package result (a crash), or the run would pass without testing what
// it says:
//
//   - no test ran: none passed or failed (a mistyped -run, a PKG without
//     tests, or every test it matched skipped). A test that only led to
//     subtests -run did not match (-run TestX/typo) does not count: go test
//     reports its package as having had no tests to run.
//   - a test skipped for any reason but missing benchmark data. Tests skip
//     only when ../shared/data is absent, and their skip message names it:
//     a skip counts as such when its message contains DataMarker. A missing
//     service or tool fails a test; a case that does not apply to a
//     backend or language is not created.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// DataMarker is what the message of an allowed skip contains: the one
// reason a test may skip is that the benchmark data is absent.
const DataMarker = "../shared/data"

// event is one line of `go test -json` (cmd/test2json, and the go
// command's build-output and build-fail events).
type event struct {
	Time        time.Time
	Action      string
	Package     string
	ImportPath  string // build-output, build-fail
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

type key struct{ pkg, test string }

// selection is what the run was asked to test, for the messages: make
// test's RUN and PKG.
type selection struct {
	run, pkg string
}

func main() {
	var sel selection
	flag.StringVar(&sel.run, "run", "", "the -run pattern go test was given (make test's RUN), for the messages")
	flag.StringVar(&sel.pkg, "pkg", "./...", "the packages go test was given (make test's PKG), for the messages")
	flag.Parse()
	os.Exit(render(os.Stdin, os.Stdout, sel))
}

// noTestsToRun is what a test binary prints when -run left it nothing to
// run, whatever parent tests of unmatched subtests it ran.
const noTestsToRun = "testing: warning: no tests to run\n"

func render(in io.Reader, out io.Writer, sel selection) int {
	var (
		output   = map[key]*strings.Builder{}
		skipped  []string
		badSkips []string
		failed   []string
		unbuilt  []string // packages that did not build
		started  = map[string]bool{}
		finished = map[string]bool{}
		ran      = map[string]int{} // tests passed or failed, per package
		noTests  = map[string]bool{}
		// buildFail is go test's line for a package that did not build
		// ("FAIL\tpkg [build failed]", or "[setup failed]").
		buildFail = map[string]string{}
		passes    = 0
		status    = 0
		// slow are the top-level tests that ended, for the slowest list.
		slow []timing
	)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			// Not an event: the go command's own errors come through as is.
			fmt.Fprintln(out, string(line))
			continue
		}
		k := key{ev.Package, ev.Test}
		switch ev.Action {
		case "build-output":
			// The compiler's and vet's messages, before the package's
			// "[build failed]".
			fmt.Fprint(out, ev.Output)
		case "build-fail":
			status = 1
		case "start":
			started[ev.Package] = true
		case "output":
			if ev.Output == noTestsToRun {
				// Attributed to the last test that printed, when that
				// was a parallel one.
				noTests[ev.Package] = true
			}
			if ev.Test == "" {
				// Package-level output: shown live unless it is go
				// test's own summary (which this replaces) or a test's
				// progress line.
				if strings.HasPrefix(ev.Output, "FAIL\t") && strings.HasSuffix(ev.Output, " failed]\n") {
					buildFail[ev.Package] = ev.Output
				}
				if ev.Output != noTestsToRun && !strings.HasPrefix(ev.Output, "=== ") && !strings.HasPrefix(ev.Output, "--- ") &&
					ev.Output != "PASS\n" && ev.Output != "FAIL\n" && !strings.HasPrefix(ev.Output, "ok ") &&
					!strings.HasPrefix(ev.Output, "FAIL\t") && !strings.HasPrefix(ev.Output, "?   \t") {
					fmt.Fprint(out, ev.Output)
				}
				continue
			}
			b := output[k]
			if b == nil {
				b = &strings.Builder{}
				output[k] = b
			}
			b.WriteString(ev.Output)
		case "skip":
			if ev.Test != "" {
				reason := skipReason(output[k])
				line := fmt.Sprintf("%s %s: %s", ev.Package, ev.Test, reason)
				skipped = append(skipped, line)
				if !strings.Contains(reason, DataMarker) {
					badSkips = append(badSkips, line)
					status = 1
				}
			} else {
				finished[ev.Package] = true
				fmt.Fprintf(out, "?   \t%s\t[no test files]\n", ev.Package)
			}
			delete(output, k)
		case "pass":
			if ev.Test != "" {
				slow = appendTiming(slow, ev)
				ran[ev.Package]++
				passes++
			} else {
				finished[ev.Package] = true
				note := ""
				if noTests[ev.Package] {
					note = " [no tests to run]"
				}
				fmt.Fprintf(out, "ok  \t%s\t%.1fs%s\n", ev.Package, ev.Elapsed, note)
			}
			delete(output, k)
		case "fail":
			status = 1
			if ev.Test != "" {
				slow = appendTiming(slow, ev)
				ran[ev.Package]++
				failed = append(failed, ev.Package+" "+ev.Test)
				if b := output[k]; b != nil {
					fmt.Fprint(out, b.String())
				}
			} else {
				finished[ev.Package] = true
				if ev.FailedBuild != "" {
					unbuilt = append(unbuilt, ev.Package)
					fmt.Fprint(out, cmp.Or(buildFail[ev.Package], "FAIL\t"+ev.Package+" [build failed]\n"))
				} else {
					fmt.Fprintf(out, "FAIL\t%s\t%.1fs\n", ev.Package, ev.Elapsed)
				}
			}
			delete(output, k)
		}
	}
	if err := sc.Err(); err != nil {
		status = 1
		fmt.Fprintf(out, "testlog: reading go test's output: %v\n", err)
	}
	for _, pkg := range slices.Sorted(maps.Keys(started)) {
		if !finished[pkg] {
			status = 1
			fmt.Fprintf(out, "FAIL\t%s\t(no result: the test binary died)\n", pkg)
			for k, b := range output {
				if k.pkg == pkg {
					fmt.Fprint(out, b.String())
				}
			}
		}
	}
	printSlowest(out, slow)
	slices.Sort(skipped)
	fmt.Fprintf(out, "\n%d tests skipped", len(skipped))
	if len(skipped) > 0 {
		fmt.Fprint(out, ":\n  "+strings.Join(skipped, "\n  "))
	}
	fmt.Fprintln(out)
	if len(badSkips) > 0 {
		slices.Sort(badSkips)
		fmt.Fprintf(out, "%d tests skipped for another reason than missing benchmark data (their message lacks %q): "+
			"a missing service or tool must fail the test, and a case that does not apply must not be created:\n  %s\n",
			len(badSkips), DataMarker, strings.Join(badSkips, "\n  "))
	}
	if len(unbuilt) > 0 {
		fmt.Fprintf(out, "%d packages did not build (the compiler's messages are above):\n  %s\n", len(unbuilt), strings.Join(unbuilt, "\n  "))
	}
	if len(failed) > 0 {
		fmt.Fprintf(out, "%d tests failed:\n  %s\n", len(failed), strings.Join(failed, "\n  "))
	}
	total := 0
	for pkg, n := range ran {
		if !noTests[pkg] {
			total += n
		}
	}
	if total == 0 && status == 0 {
		status = 1
		fmt.Fprintln(out, sel.nothingRan(len(skipped)))
	}
	fmt.Fprintf(out, "tests: %d passed, %d failed, %d skipped\n", passes, len(failed), len(skipped))
	return status
}

// slowest is how many of the slowest tests the end of a run lists: where
// a run's time goes, in CI's log too.
const slowest = 10

// timing is how long a top-level test ran (a parallel test's time paused
// not counted, as go test reports it).
type timing struct {
	pkg, test string
	elapsed   float64
}

// appendTiming appends a top-level test's pass or fail event to ts.
func appendTiming(ts []timing, ev event) []timing {
	if strings.Contains(ev.Test, "/") {
		return ts
	}
	return append(ts, timing{ev.Package, ev.Test, ev.Elapsed})
}

// printSlowest lists the slowest tests of ts, slowest first, when more
// than one test ran.
func printSlowest(out io.Writer, ts []timing) {
	if len(ts) < 2 {
		return
	}
	slices.SortStableFunc(ts, func(a, b timing) int { return cmp.Compare(b.elapsed, a.elapsed) })
	fmt.Fprintf(out, "\nslowest tests:\n")
	for _, t := range ts[:min(slowest, len(ts))] {
		fmt.Fprintf(out, "  %7.1fs %s %s\n", t.elapsed, t.pkg, t.test)
	}
}

// nothingRan says that no test ran, in terms of what was asked.
func (s selection) nothingRan(skipped int) string {
	pkg := cmp.Or(s.pkg, "./...")
	var msg string
	switch {
	case s.run != "" && skipped > 0:
		msg = fmt.Sprintf("RUN=%s ran no test in %s: every test it matched skipped (%d)", s.run, pkg, skipped)
	case s.run != "":
		msg = fmt.Sprintf("RUN=%s matched no test in %s", s.run, pkg)
	case skipped > 0:
		msg = fmt.Sprintf("PKG=%s ran no test: every test skipped (%d)", pkg, skipped)
	default:
		msg = fmt.Sprintf("PKG=%s has no test", pkg)
	}
	return "FAIL: " + msg + " (a run that tests nothing fails)"
}

// skipReason is the message a skipped test logged, on one line.
func skipReason(b *strings.Builder) string {
	if b == nil {
		return "(no reason given)"
	}
	var lines []string
	for l := range strings.Lines(b.String()) {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		return "(no reason given)"
	}
	return strings.Join(lines, " ")
}
