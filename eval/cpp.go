package eval

import "strings"

// cppHelperIncludes are prepended to C++ programs unless the prompt
// includes them already (HumanEval-X's C++ import helper).
var cppHelperIncludes = []string{
	"stdlib.h", "algorithm", "math.h", "stdio.h", "vector", "string", "climits", "cstring", "iostream",
}

// assembleCPP is the helper includes the prompt lacks, then prompt +
// completion + "\n" + test (which holds main). Compiled as C++11.
// CPP/162 includes openssl/md5.h and needs -lcrypto at link time.
func assembleCPP(p Problem, completion string) Program {
	var b strings.Builder
	have := strings.ReplaceAll(p.Prompt, " ", "")
	for _, h := range cppHelperIncludes {
		inc := "#include<" + h + ">"
		if !strings.Contains(have, inc) {
			b.WriteString(inc + "\n")
		}
	}
	b.WriteString(p.Prompt + completion + "\n" + p.Test)
	return Program{Lang: CPP, File: "main.cpp", Code: b.String()}
}
