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
}

// Assemble builds the program that checks completion against problem p,
// following the recipe of p's dataset and language (see the package doc).
func Assemble(p Problem, completion string) (Program, error) {
	lang, flavor, err := TaskLang(p.TaskID)
	if err != nil {
		return Program{}, err
	}
	switch lang {
	case Python:
		return assemblePython(p, flavor, completion), nil
	case JavaScript:
		return assembleJavaScript(p, completion), nil
	case Java:
		return assembleJava(p, completion), nil
	case CPP:
		return assembleCPP(p, completion), nil
	case Go:
		return assembleGo(p, completion)
	case Rust:
		return assembleRust(p, completion)
	}
	return Program{}, fmt.Errorf("eval: task %s: no recipe for %s", p.TaskID, lang)
}

// Job returns the job that runs the program: its language, code, files,
// libraries and environment. The caller sets the ID, limits, queue and tags.
func (p Program) Job() jobs.Job {
	return jobs.Job{
		Lang:      string(p.Lang),
		Code:      p.Code,
		Files:     p.Files,
		Libraries: p.Libraries,
		Env:       p.Env,
	}
}
