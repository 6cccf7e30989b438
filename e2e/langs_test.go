package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

// langCase is one language's programs for the table test. compileErr is
// empty for interpreted languages.
type langCase struct {
	lang        string
	hello       string // prints "hello, world\n"
	stdin       string // copies stdin to stdout in upper case
	runtimeErr  string // fails at run time, printing errWant on stderr
	errWant     string
	compileErr  string // does not compile; the compiler says compileWant
	compileWant string
	timeout     string // never ends
	extra       []extraCase
}

// extraCase is a language-specific check: job must succeed with stdout.
type extraCase struct {
	name   string
	job    jobs.Job
	stdout string
}

const (
	stdinIn   = "round trip\nline two\n"
	stdinWant = "ROUND TRIP\nLINE TWO\n"
)

// rPlots runs a child Rscript that draws with base graphics and prints a
// ggplot2 chart at top level, neither closing its device, and then lists
// what the child left in $SANDQ_PLOTS_DIR, with each file's PNG signature.
// The agent makes the plots dir afresh, empty, before every run.
const rPlots = `cat("before:", length(list.files(Sys.getenv("SANDQ_PLOTS_DIR"), all.files = TRUE, no.. = TRUE)), "\n")
writeLines(c(
  "plot(1:10, main = 'base graphics')",
  "hist(rnorm(100))",
  "library(ggplot2)",
  "ggplot(data.frame(x = 1:3, y = c(2, 1, 3)), aes(x, y)) + geom_line()"
), "child.R")
stopifnot(system2("Rscript", "child.R") == 0)
d <- Sys.getenv("SANDQ_PLOTS_DIR")
for (f in list.files(d)) {
  b <- readBin(file.path(d, f), "raw", 8)
  cat(f, rawToChar(b[2:4]), file.size(file.path(d, f)) > 1000, "\n")
}
`

var langCases = []langCase{
	{
		lang:       "python",
		hello:      `print("hello, world")`,
		stdin:      "import sys\nsys.stdout.write(sys.stdin.read().upper())",
		runtimeErr: `raise RuntimeError("boom")`, errWant: "RuntimeError: boom",
		timeout: "while True:\n    pass",
	},
	{
		lang:       "javascript",
		hello:      `console.log("hello, world");`,
		stdin:      `process.stdout.write(require("fs").readFileSync(0, "utf8").toUpperCase());`,
		runtimeErr: `throw new Error("boom");`, errWant: "Error: boom",
		timeout: "for (;;) {}",
	},
	{
		lang:  "typescript",
		hello: "const msg: string = \"hello, world\";\nconsole.log(msg);",
		stdin: "import * as fs from \"fs\";\nconst input: string = fs.readFileSync(0, \"utf8\");\n" +
			"process.stdout.write(input.toUpperCase());",
		runtimeErr: "function fail(): never {\n  throw new Error(\"boom\");\n}\nfail();", errWant: "Error: boom",
		compileErr: "const n: number = \"not a number\";\nconsole.log(n);", compileWant: "main.ts(1,7): error TS2322",
		timeout: "while (true) {}",
		extra: []extraCase{{
			name: "ReadlineAndClasses",
			job: jobs.Job{Code: `import * as readline from "readline";
class Counter { constructor(private n = 0) {} add(k: number): this { this.n += k; return this; } get value(): number { return this.n; } }
const rl = readline.createInterface({ input: process.stdin });
const c = new Counter();
rl.on("line", (l: string) => c.add(Number(l)));
rl.on("close", () => console.log(c.value));
`, Stdin: "1\n2\n3\n"},
			stdout: "6\n",
		}},
	},
	{
		lang:  "java",
		hello: `public class Main { public static void main(String[] args) { System.out.println("hello, world"); } }`,
		stdin: `import java.io.IOException;
import java.nio.charset.StandardCharsets;

public class Main {
    public static void main(String[] args) throws IOException {
        System.out.print(new String(System.in.readAllBytes(), StandardCharsets.UTF_8).toUpperCase());
    }
}`,
		// assert only fails with -ea, which the run command sets.
		runtimeErr:  `public class Main { public static void main(String[] args) { assert 1 > 2 : "boom"; } }`,
		errWant:     "java.lang.AssertionError: boom",
		compileErr:  `public class Main { public static void main(String[] args) { int x = "boom"; } }`,
		compileWant: "Main.java:1: error: incompatible types",
		timeout:     `public class Main { public static void main(String[] args) { while (true) {} } }`,
		extra: []extraCase{{
			name: "StreamsAndThreads",
			job: jobs.Job{Code: `import java.util.*;
import java.util.concurrent.*;
import java.util.stream.*;

public class Main {
    public static void main(String[] args) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(8);
        List<Future<Integer>> fs = new ArrayList<>();
        for (int i = 1; i <= 8; i++) { final int k = i; fs.add(pool.submit(() -> k * k)); }
        int sum = 0;
        for (Future<Integer> f : fs) sum += f.get();
        pool.shutdown();
        System.out.println(sum + " " + IntStream.rangeClosed(1, 4).boxed().map(String::valueOf).collect(Collectors.joining(",")));
    }
}`},
			stdout: "204 1,2,3,4\n",
		}},
	},
	{
		lang:  "cpp",
		hello: "#include <iostream>\nint main() { std::cout << \"hello, world\" << std::endl; }",
		stdin: "#include <cctype>\n#include <iostream>\n#include <string>\n" +
			"int main() { std::string s; char c; while (std::cin.get(c)) s += std::toupper((unsigned char)c); std::cout << s; }",
		runtimeErr: "#include <stdexcept>\nint main() { throw std::runtime_error(\"boom\"); }", errWant: "what():  boom",
		compileErr: "int main() { return undefined_name; }", compileWant: "error: ‘undefined_name’ was not declared in this scope",
		timeout: "int main() { volatile unsigned long n = 0; for (;;) n++; }",
		extra: []extraCase{{
			// HumanEvalPack CPP/162: <openssl/md5.h> and -lcrypto.
			name: "OpenSSLMD5",
			job: jobs.Job{Code: `#include <openssl/md5.h>
#include <cstdio>
#include <cstring>
int main() {
    const char *s = "hello";
    unsigned char d[MD5_DIGEST_LENGTH];
    MD5((const unsigned char *)s, strlen(s), d);
    for (int i = 0; i < MD5_DIGEST_LENGTH; i++) printf("%02x", d[i]);
    printf("\n");
}`},
			stdout: "5d41402abc4b2a76b9719d911017c592\n",
		}, {
			// cc1plus needs ~290 MiB here: the language's default memory
			// (langs.Lang.Limits, 512 MiB) applies, as the job sets none.
			// It also needs ~8 s of CPU, so the timeout (compile: +30 s)
			// leaves room for a busy machine.
			name: "HeavyTemplates",
			job: jobs.Job{Code: "#include <bits/stdc++.h>\nint main() { std::regex r(\"a+b\"); std::map<std::string, std::vector<int>> m; " +
				"m[\"x\"].push_back(1); std::cout << std::regex_match(\"aab\", r) << m.size() << '\\n'; }",
				Limits: jobs.Limits{TimeoutMS: 120_000}},
			stdout: "11\n",
		}, {
			name:   "BitsStdcxx17",
			job:    jobs.Job{Code: "#include <bits/stdc++.h>\nint main() { auto [a, b] = std::pair{1, 2}; std::optional<int> o = a + b; std::cout << *o << '\\n'; }"},
			stdout: "3\n",
		}},
	},
	{
		lang:       "c",
		hello:      "#include <stdio.h>\nint main(void) { puts(\"hello, world\"); return 0; }",
		stdin:      "#include <ctype.h>\n#include <stdio.h>\nint main(void) { int c; while ((c = getchar()) != EOF) putchar(toupper(c)); return 0; }",
		runtimeErr: "#include <stdio.h>\n#include <stdlib.h>\nint main(void) { fprintf(stderr, \"boom\\n\"); abort(); }",
		errWant:    "boom",
		compileErr: "int main(void) { return undefined_name; }", compileWant: "error: ‘undefined_name’ undeclared",
		timeout: "int main(void) { volatile unsigned long n = 0; for (;;) n++; }",
		extra: []extraCase{{
			name:   "LibM",
			job:    jobs.Job{Code: "#include <math.h>\n#include <stdio.h>\nint main(void) { volatile double x = 2; printf(\"%.3f\\n\", sqrt(x)); return 0; }"},
			stdout: "1.414\n",
		}},
	},
	{
		lang:  "go",
		hello: "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello, world\") }\n",
		stdin: "package main\n\nimport (\n\t\"io\"\n\t\"os\"\n\t\"strings\"\n)\n\n" +
			"func main() {\n\tb, _ := io.ReadAll(os.Stdin)\n\tos.Stdout.WriteString(strings.ToUpper(string(b)))\n}\n",
		runtimeErr: "package main\n\nfunc main() { panic(\"boom\") }\n", errWant: "panic: boom",
		compileErr: "package main\n\nfunc main() { x := 1 }\n", compileWant: "declared and not used: x",
		timeout: "package main\n\nfunc main() {\n\tfor {\n\t}\n}\n",
		extra: []extraCase{{
			// testify v1.8.0 is in the image, offline.
			name: "Testify",
			job: jobs.Job{Code: `package main

import (
	"fmt"
	"slices"

	"github.com/stretchr/testify/assert"
)

type printer struct{}

func (printer) Errorf(format string, args ...any) { fmt.Printf(format, args...) }

func main() {
	fmt.Println(assert.Equal(printer{}, []int{1, 2, 3}, slices.Sorted(slices.Values([]int{3, 1, 2}))), max(2, 5))
}
`},
			stdout: "true 5\n",
		}},
	},
	{
		lang:       "rust",
		hello:      "fn main() {\n    println!(\"hello, world\");\n}\n",
		stdin:      "use std::io::Read;\n\nfn main() {\n    let mut s = String::new();\n    std::io::stdin().read_to_string(&mut s).unwrap();\n    print!(\"{}\", s.to_uppercase());\n}\n",
		runtimeErr: "fn main() {\n    panic!(\"boom\");\n}\n", errWant: "panicked",
		compileErr: "fn main() {\n    let x: i32 = \"boom\";\n}\n", compileWant: "error[E0308]: mismatched types",
		timeout: "fn main() {\n    loop {}\n}\n",
		extra: []extraCase{{
			// The image's prebuilt crates, offline (HumanEvalPack's Rust
			// declarations use all three).
			name: "Crates",
			job: jobs.Job{Code: `use rand::Rng;
use regex::Regex;

fn main() {
    let n: u32 = rand::thread_rng().gen_range(7..8);
    let re = Regex::new(r"^(\w+)@(\w+)$").unwrap();
    let caps = re.captures("sandq@example").unwrap();
    println!("{} {} {:x}", n, &caps[2], md5::compute(b"hello"));
}
`},
			stdout: "7 example 5d41402abc4b2a76b9719d911017c592\n",
		}, {
			// SANDQ_RUST_RAND=0.7 picks the image's other set: rand's API
			// before 0.8 (HumanEvalPack Rust/32 and Rust/50 use it).
			name: "Rand07",
			job: jobs.Job{Env: map[string]string{"SANDQ_RUST_RAND": "0.7"}, Code: `use rand::Rng;

fn main() {
    let n: u32 = rand::thread_rng().gen_range(7, 8);
    println!("{} {:x}", n, md5::compute(b"hello"));
}
`},
			stdout: "7 5d41402abc4b2a76b9719d911017c592\n",
		}},
	},
	{
		lang:       "ruby",
		hello:      `puts "hello, world"`,
		stdin:      `print STDIN.read.upcase`,
		runtimeErr: `raise "boom"`, errWant: "boom (RuntimeError)",
		timeout: "loop {}",
	},
	{
		lang:       "r",
		hello:      `cat("hello, world\n")`,
		stdin:      `cat(toupper(readLines(file("stdin"))), sep = "\n")`,
		runtimeErr: `stop("boom")`, errWant: "Error: boom",
		timeout: "repeat {}",
		extra: []extraCase{{
			// Two R processes and ggplot2: ~2 s of CPU, stretched on a busy machine.
			name: "Plots", job: jobs.Job{Code: rPlots, Limits: jobs.Limits{TimeoutMS: 60_000}},
			stdout: "before: 0 \nplot-001.png PNG TRUE \nplot-002.png PNG TRUE \nplot-003.png PNG TRUE \n",
		}, {
			// A program that closes the device and plots again overwrites nothing.
			name: "PlotsAfterDevOff",
			job: jobs.Job{Code: `plot(1)
invisible(dev.off())
plot(2)
graphics.off()
cat(list.files(Sys.getenv("SANDQ_PLOTS_DIR")), sep = "\n")
`},
			stdout: "plot-001.png\nplot-2-001.png\n",
		}},
	},
	{
		lang:       "bash",
		hello:      `echo "hello, world"`,
		stdin:      `tr '[:lower:]' '[:upper:]'`,
		runtimeErr: "set -u\necho \"$undefined_variable\"", errWant: "undefined_variable: unbound variable",
		timeout: "while :; do :; done",
	},
}

// TestLanguages runs every language through the queue: hello world, a stdin
// round trip, a runtime error (failed, with stderr), a compile error
// (compile_error, compiled languages only), a timeout, and a few
// language-specific checks. Then it measures hello world's latency, cold
// (a new container) and warm, and logs it with the compile step's usage.
func TestLanguages(t *testing.T) {
	t.Parallel()
	var names []string
	for _, c := range langCases {
		names = append(names, c.lang)
	}
	var registered []string
	for _, l := range langs.All() {
		registered = append(registered, l.Name)
	}
	require.ElementsMatch(t, registered, names, "every registered language has a case here")

	e := newEnv(t)
	e.startWorker("--concurrency", "2", "--warm", "")
	const waitFor = 10 * time.Minute // jobs queue behind each other on 2 cores

	t.Run("Table", func(t *testing.T) {
		for _, tc := range langCases {
			t.Run(tc.lang, func(t *testing.T) {
				t.Parallel()
				l, ok := langs.Lookup(tc.lang)
				require.True(t, ok)
				compiled := len(l.Compile) > 0
				require.Equal(t, compiled, tc.compileErr != "", "compile error case iff compiled")

				job := func(code string) jobs.Job { return jobs.Job{Lang: tc.lang, Code: code} }
				ids := map[string]string{
					"hello": e.enqueue(job(tc.hello)),
					"stdin": e.enqueue(jobs.Job{Lang: tc.lang, Code: tc.stdin, Stdin: stdinIn}),
					"error": e.enqueue(job(tc.runtimeErr)),
					"timeout": e.enqueue(jobs.Job{Lang: tc.lang, Code: tc.timeout,
						Limits: jobs.Limits{TimeoutMS: 2000}}),
				}
				if compiled {
					ids["compile"] = e.enqueue(job(tc.compileErr))
				}
				extra := map[string]string{}
				for _, x := range tc.extra {
					x.job.Lang = tc.lang
					extra[x.name] = e.enqueue(x.job)
				}

				r := e.wait(ids["hello"], waitFor)
				require.Equal(t, jobs.StatusSucceeded, r.Status, "%s\n%s", r.Reason, describe(r))
				require.Equal(t, "hello, world\n", r.Stdout)
				require.Empty(t, r.Stderr)
				if compiled {
					require.NotNil(t, r.Compile)
					require.Empty(t, r.Compile.Stdout+r.Compile.Stderr, "compilers are quiet on a clean program")
				} else {
					require.Nil(t, r.Compile)
				}

				r = e.wait(ids["stdin"], waitFor)
				require.Equal(t, jobs.StatusSucceeded, r.Status, "%s\n%s", r.Reason, describe(r))
				require.Equal(t, stdinWant, r.Stdout)

				r = e.wait(ids["error"], waitFor)
				require.Equal(t, jobs.StatusFailed, r.Status, "%s\n%s", r.Reason, describe(r))
				require.Contains(t, r.Stderr, tc.errWant)
				require.NotEmpty(t, r.Reason)

				r = e.wait(ids["timeout"], waitFor)
				require.Equal(t, jobs.StatusTimeout, r.Status, "%s\n%s", r.Reason, describe(r))

				if compiled {
					r = e.wait(ids["compile"], waitFor)
					require.Equal(t, jobs.StatusCompileError, r.Status, "%s\n%s", r.Reason, describe(r))
					require.NotNil(t, r.Compile)
					require.Contains(t, r.Compile.Stdout+r.Compile.Stderr, tc.compileWant)
					require.Empty(t, r.Stdout, "the program did not run")
				}

				for _, x := range tc.extra {
					r := e.wait(extra[x.name], waitFor)
					require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s\n%s", x.name, r.Reason, describe(r))
					require.Equal(t, x.stdout, r.Stdout, "%s\n%s", x.name, describe(r))
				}
			})
		}
	})

	// Latency, one job at a time: the first hello world of a language in a
	// fresh pool (new container), then the same again (warm, reused).
	t.Run("Latency", func(t *testing.T) {
		var report strings.Builder
		fmt.Fprintf(&report, "%-11s %9s %9s %9s %10s %9s %9s\n", "lang", "cold ms", "warm ms", "compile", "cc cpu ms", "cc rss", "run ms")
		for _, tc := range langCases {
			var took [2]time.Duration
			var r jobs.Result
			for i := range took {
				start := time.Now()
				r = e.wait(e.enqueue(jobs.Job{Lang: tc.lang, Code: tc.hello, Tenant: "latency"}), waitFor)
				took[i] = time.Since(start)
				require.Equal(t, jobs.StatusSucceeded, r.Status, "%s: %s\n%s", tc.lang, r.Reason, describe(r))
			}
			var cWall, cCPU, cRSS int64
			if r.Compile != nil {
				cWall, cCPU, cRSS = r.Compile.Usage.WallMS, r.Compile.Usage.CPUMS, r.Compile.Usage.MaxRSSKB/1024
			}
			fmt.Fprintf(&report, "%-11s %9d %9d %9d %10d %8dM %9d\n", tc.lang, took[0].Milliseconds(), took[1].Milliseconds(),
				cWall, cCPU, cRSS, r.Usage.WallMS)
		}
		t.Logf("hello world through the queue (enqueue to result):\n%s", report.String())
	})
}

// describe renders a result's outputs for failure messages.
func describe(r jobs.Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "status=%s exit=%v signal=%s\nstdout: %q\nstderr: %q\n", r.Status, deref(r.ExitCode), r.Signal, r.Stdout, r.Stderr)
	if r.Compile != nil {
		fmt.Fprintf(&b, "compile exit=%v: stdout %q stderr %q\n", deref(r.Compile.ExitCode), r.Compile.Stdout, r.Compile.Stderr)
	}
	return b.String()
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
