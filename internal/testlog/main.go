// Command testlog renders `go test -json` output for people, as it
// arrives: one line per package, the whole output of every failing test,
// and at the end every skipped test with its reason, so a run that skipped
// tests says so. It exits 1 when a test or package failed, or the JSON
// stream ends without a package result (a crash); `make test` pipes
// `go test -json` into it.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type key struct{ pkg, test string }

func main() {
	os.Exit(render(os.Stdin, os.Stdout))
}

func render(in io.Reader, out io.Writer) int {
	var (
		output   = map[key]*strings.Builder{}
		skipped  []string
		failed   []string
		started  = map[string]bool{}
		finished = map[string]bool{}
		status   = 0
	)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			// Not an event: build errors and the like come through as is.
			fmt.Fprintln(out, string(line))
			continue
		}
		k := key{ev.Package, ev.Test}
		switch ev.Action {
		case "start":
			started[ev.Package] = true
		case "output":
			b := output[k]
			if b == nil {
				b = &strings.Builder{}
				output[k] = b
			}
			b.WriteString(ev.Output)
			if ev.Test == "" && !strings.HasPrefix(ev.Output, "=== ") && !strings.HasPrefix(ev.Output, "--- ") &&
				ev.Output != "PASS\n" && ev.Output != "FAIL\n" && !strings.HasPrefix(ev.Output, "ok ") && !strings.HasPrefix(ev.Output, "FAIL\t") &&
				!strings.HasPrefix(ev.Output, "?   \t") {
				// Package-level output (TestMain, panics): shown live.
				fmt.Fprint(out, ev.Output)
			}
		case "skip":
			if ev.Test != "" {
				skipped = append(skipped, fmt.Sprintf("%s %s: %s", ev.Package, ev.Test, skipReason(output[k])))
			} else {
				finished[ev.Package] = true
				fmt.Fprintf(out, "?   \t%s\t[no test files]\n", ev.Package)
			}
			delete(output, k)
		case "pass":
			if ev.Test == "" {
				finished[ev.Package] = true
				fmt.Fprintf(out, "ok  \t%s\t%.1fs\n", ev.Package, ev.Elapsed)
			}
			delete(output, k)
		case "fail":
			status = 1
			if ev.Test != "" {
				failed = append(failed, ev.Package+" "+ev.Test)
				if b := output[k]; b != nil {
					fmt.Fprint(out, b.String())
				}
			} else {
				finished[ev.Package] = true
				if b := output[k]; b != nil {
					fmt.Fprint(out, b.String())
				}
				fmt.Fprintf(out, "FAIL\t%s\t%.1fs\n", ev.Package, ev.Elapsed)
			}
			delete(output, k)
		}
	}
	for pkg := range started {
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
	slices.Sort(skipped)
	fmt.Fprintf(out, "\n%d tests skipped", len(skipped))
	if len(skipped) > 0 {
		fmt.Fprint(out, ":\n  "+strings.Join(skipped, "\n  "))
	}
	fmt.Fprintln(out)
	if len(failed) > 0 {
		fmt.Fprintf(out, "%d tests failed:\n  %s\n", len(failed), strings.Join(failed, "\n  "))
	}
	return status
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
