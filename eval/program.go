package eval

import (
	"fmt"

	"github.com/sandq/sandq/jobs"
)

// Program is a sample assembled into something to run: the source of the
// program and what else its job carries.
type Program struct {
	// Lang is the language, a sandq language name.
	Lang Lang
	// File is the name the recipe gives the source file ("main.py",
	// "Main.java", "main_test.go", ...). The worker writes the code under
	// its language's own source name; File says what the recipe expects,
	// for languages where the name matters (Java's public class Main, Go's
	// _test suffix).
	File string
	// Code is the source text.
	Code string
	// Files are further input files (Go's go.mod and go.sum).
	Files []jobs.File
	// Libraries are packages the program needs installed (JavaScript/162:
	// js-md5).
	Libraries []string
	// Env is the program's environment (Rust: the crate set).
	Env map[string]string
	// StderrFails makes any output on stderr a failure, even with exit 0:
	// JavaScript's console.assert prints instead of throwing.
	StderrFails bool
	// Marker is the end-of-tests marker: the line the program prints on
	// stdout after its last test has passed, as the last thing it does
	// before a normal exit ("sandq-eval-end-" and a random nonce drawn at
	// assembly). A run passes only if its stdout ends with it (see
	// [Judge]); [Program.Job] carries it in the job's MarkerTag.
	Marker string
}

// Assemble builds the program that checks completion against problem p,
// following the recipe of p's dataset and language (see the package doc),
// and ending with the print of an end-of-tests marker whose nonce is
// drawn from crypto/rand: two assemblies of one sample differ in it.
func Assemble(p Problem, completion string) (Program, error) {
	return assembleWith(p, completion, newNonce())
}

// assembleWith is Assemble with the marker's nonce given.
func assembleWith(p Problem, completion, nonce string) (Program, error) {
	lang, flavor, err := TaskLang(p.TaskID)
	if err != nil {
		return Program{}, err
	}
	marker := markerOf(nonce)
	var prog Program
	switch lang {
	case Python:
		prog = assemblePython(p, flavor, completion, marker)
	case JavaScript:
		prog = assembleJavaScript(p, completion, marker)
	case Java:
		prog, err = assembleJava(p, completion, marker)
	case CPP:
		prog, err = assembleCPP(p, completion, nonce)
	case Go:
		prog, err = assembleGo(p, completion, marker)
	case Rust:
		prog, err = assembleRust(p, completion, marker)
	default:
		return Program{}, fmt.Errorf("eval: task %s: no recipe for %s", p.TaskID, lang)
	}
	if err != nil {
		return Program{}, err
	}
	prog.Marker = marker
	return prog, nil
}

// Job returns the job that runs the program: its language, code, files,
// libraries and environment, and the marker in its tags (MarkerTag). The
// caller sets the ID (from [ForID] of the job, for an ID that stays the
// same from one assembly to the next), limits and queue, and may add tags.
func (p Program) Job() jobs.Job {
	return jobs.Job{
		Lang:      string(p.Lang),
		Code:      p.Code,
		Files:     p.Files,
		Libraries: p.Libraries,
		Env:       p.Env,
		Tags:      map[string]string{MarkerTag: p.Marker},
	}
}
