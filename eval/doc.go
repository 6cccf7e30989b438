// Package eval runs HumanEval-style functional-correctness evaluations on
// sandq: it loads problems (OpenAI HumanEval, or one language of
// HumanEvalPack) and samples in the human-eval format, assembles each
// sample into a program the way the reference harnesses do for its
// language, turns the program into a [jobs.Job], judges the job's
// [jobs.Result] as human-eval would ("passed", "failed: ...", "timed
// out"), and computes the unbiased pass@k estimator.
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
//     test + "\n" + "check(entry_point)"; pass is exit 0.
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
// # Judging
//
// A sample passes when its job succeeded (and, for js, wrote nothing to
// stderr). Failures, compile errors, timeouts, OOM kills, output floods and
// rejections are failed samples. Infrastructure failures (internal_error)
// and canceled jobs are not the sample's fault: they are excluded, neither
// passed nor failed, and left out of n for their task (see [Judge]).
//
// # pass@k
//
// [PassAtK] is the unbiased estimator of the HumanEval paper,
// 1 - C(n-c, k)/C(n, k), computed as a product as human-eval does to stay
// stable for large n; [Estimate] averages it over tasks and, like
// human-eval, reports a k only when every task has at least k samples.
package eval
