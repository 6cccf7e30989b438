// Package eval runs functional-correctness evaluations on sandq: it loads
// problems (OpenAI HumanEval, or one language of HumanEvalPack) and
// samples in the human-eval format, assembles each sample into a program
// the way the reference harnesses do for its language, turns the program
// into a [jobs.Job], judges the job's [jobs.Result] as human-eval would
// ("passed", "failed: ...", "timed out"), and computes the unbiased pass@k
// estimator. Problems judged by standard input and expected output
// (CodeContests, APPS, sandq's stdio-jsonl) run as judged jobs instead
// (see "Judged formats" below).
//
// It exists so that evaluation semantics live in one tested place, apart
// from the transport: the enqueue CLI (`enqueue eval`) drives it through
// the queue, and a benchmark drives the same programs through a plain
// subprocess runner for comparison.
//
// # Program assembly
//
// One file per language holds its recipe (python.go, javascript.go,
// java.go, cpp.go, golang.go, rust.go), following the HumanEval /
// HumanEval-X / HumanEvalPack evaluation code as summarised in the data
// README (../shared/data/README.md):
//
//   - HumanEval (task IDs "HumanEval/N"): prompt + completion + "\n" +
//     test + "\n" + "check(entry_point)"; pass is exit 0 (and the marker,
//     as for every language below).
//   - HumanEvalPack python: the helper imports, then prompt + completion +
//     "\n" + test (which ends with its own check call); pass is exit 0.
//   - js: prompt + completion + "\n" + test; pass is exit 0 and an empty
//     stderr, because console.assert only prints. JavaScript/162 asks for
//     the npm package js-md5 through the job's libraries.
//   - java: Main.java; pass is exit 0 of `java -ea Main` after javac.
//   - cpp: the helper includes not already in the prompt, then the rest;
//     pass is a successful compile and exit 0.
//   - go: the prompt's import block is replaced by the test setup and an
//     import block of the helper packages the code uses outside comments
//     and string literals, in a module requiring testify v1.8.0 (go.mod and
//     go.sum travel as job files). sandq's Go language builds and runs a
//     program, so the file is main.go with a main that runs its Test
//     functions through testing.Main instead of main_test.go for go test.
//   - rust: fn main(){} and the declaration lines the prompt lacks, then
//     the rest. sandq's rust language builds and runs a program (with the
//     image's prebuilt crates rand 0.8, regex and md5), so the test module
//     loses #[cfg(test)] and a new main calls its #[test] functions, as
//     cargo test would run them; the sample's own main is renamed.
//
// Every program ends by printing an end-of-tests marker (see "Exiting
// early" below): after the last test, as the last thing it does.
//
// # Judging
//
// A sample passes when its job succeeded and the last non-blank line of
// its stdout is the program's marker (and, for js, it wrote nothing to
// stderr). A job that succeeded without the marker is "failed: tests did
// not run to the end". Failures, compile errors, timeouts, OOM kills,
// output floods and rejections are failed samples. Infrastructure failures
// (internal_error) and canceled jobs are not the sample's fault: they are
// excluded, neither passed nor failed, and left out of n for their task
// (see [Judge]). Nothing else is excluded: a program that ran and
// exited, with any status, is judged.
//
// # Exiting early
//
// Exit status 0 alone says nothing: a completion can end the process
// before a single test has run, and human-eval, which judges by the
// status, counts that as passed. A completion of has_close_elements can
// return, then call os._exit(0) at module level; process.exit(0) in
// JavaScript; System.exit(0) in a static initializer of Solution in Java;
// exit(0) in a global constructor in C++; os.Exit(0) in an init function
// in Go; std::process::exit(0) in the function under test, or in a
// function it puts in .init_array, in Rust. So each program prints a
// marker line after its last test has passed, and only a run whose stdout
// ends with it passes. Per language (each recipe file says more):
//
//   - python: a module-level statement after the last check call;
//   - js: a top-level statement after the test's calls;
//   - java: the test's main is renamed sandqTestMain and a new main of
//     class Main calls it, then prints;
//   - cpp: the test's main is renamed sandq_tests_<nonce> (and returns 0
//     at its end); the program's main, first in the file, ahead of any of
//     the sample's macros, calls it, then prints;
//   - go: testing.Main exits by itself, so every test runs wrapped, and the
//     cleanup of the last to finish prints and exits 0 once all have
//     passed (a test whose function did not return, as when it panicked,
//     has not passed: its cleanups run before testing marks it failed);
//   - rust: the generated main prints after its last test call.
//
// A failed test never reaches the print (an exception, a panic, an
// assert's abort, testing's exit 1); an early exit never reaches it
// either. Stdout that overflows its limit keeps its head and tail, so the
// marker at the end survives.
//
// The marker is "sandq-eval-end-" and a nonce of 128 bits from
// crypto/rand, drawn at every assembly: a completion cannot print it from
// a constant learned from the dataset or from this code. A fresh nonce
// per assembly would give a sample a new job ID at every run (IDs are
// derived from the job's content, batch.IDs), and a rerun could no longer
// resume; so the ID is derived from [ForID] of the job: its content with
// the nonce replaced by zeros and the marker's tag left out. The job
// carries its marker in a tag ([MarkerTag]), which reaches the Result but
// never the container, and the judge takes the marker from the Result: a
// job that an interrupted run enqueued, found again by a rerun under the
// same ID, is judged by the marker it ran with. A nonce derived from the
// sample (a hash of task and completion) would keep IDs stable without
// that, but anyone who knows the algorithm could compute it; a secret kept
// beside --out would be state to keep and lose. The nonce stays out of
// the results file: the C++ test function named after it is named without
// it in failure details.
//
// # Trust model
//
// The tests run in the candidate's own process (and, in C++ and Rust, its
// own translation unit). The marker stops a sample from passing by
// leaving before the tests end; it does not stop a sample that sets out to
// subvert them. Such code can read the marker from its own source file
// (main.py, main.js) or from its process's memory and print it, then exit;
// it can also change what the tests do: rebind console.assert in
// JavaScript, return values whose equality always holds, redefine
// macros the tests use in C++ or assert_eq! in Rust, or jump over lines
// with a Python trace function. Scores are honest for samples that are
// not written against the harness, as with human-eval; the sandbox, not
// the judge, is what contains hostile code. Running the tests in a
// separate process, one that the candidate's code cannot reach, would be
// the next step.
//
// # Judged formats
//
// [LoadStdioProblems] reads problems whose tests are standard input and
// expected standard output: CodeContests (as ../shared/data packages it;
// a final newline is added to each input, which the packager stripped),
// APPS (its call-based problems, tested through a function rather than
// standard input, are skipped with their reason, and counted), and
// sandq's stdio-jsonl (tests as [jobs.TestCase], a judge spec with
// an optional checker, limits, reference solutions). A sample's
// completion is a whole program, in the sample's language; it becomes one
// judged job ([StdioProblem.Job]: compiled once, run once per test), whose
// judge spec and limits are the problem's, filled from [JudgeDefaults].
// The worker judges it; [JudgeVerdict] reads the Result: a sample passes
// when its verdict is accepted. checker_error is excluded like
// internal_error, since the problem's checker failed, not the sample;
// every other verdict is a failure. The results line and the summary
// carry the verdicts ([SampleResult], [StdioProblems.Summarize]).
// Interactive problems (a judge talking with the program) are not
// supported.
//
// # pass@k
//
// [PassAtK] is the unbiased estimator of the HumanEval paper,
// 1 - C(n-c, k)/C(n, k), computed as a product as human-eval does to stay
// stable for large n; [Estimate] averages it over tasks and, like
// human-eval, reports a k only when every task has at least k samples.
package eval
