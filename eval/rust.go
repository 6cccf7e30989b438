package eval

import "strings"

// assembleRust puts "fn main(){}" and the declaration's lines in front of
// prompt + completion unless they are there already (the HumanEvalPack
// prompt carries both; a completion that repeats the function is not
// given its signature twice), then "\n" + test. The tests are #[test]
// functions (cargo test or rustc --test); the declarations use the crates
// rand, regex and md5.
func assembleRust(p Problem, completion string) Program {
	gen := p.Prompt + completion
	var b strings.Builder
	if !strings.Contains(gen, "fn main()") {
		b.WriteString("fn main(){}\n")
	}
	for _, line := range strings.Split(p.Declaration, "\n") {
		line = strings.TrimSpace(line)
		if strings.Contains(gen, line) {
			continue
		}
		if strings.HasPrefix(line, "fn") && strings.Contains(gen, strings.SplitN(line, "(", 2)[0]) {
			continue
		}
		b.WriteString(line + "\n")
	}
	// A generation that defines main twice keeps only the first.
	if parts := strings.Split(gen, "fn main()"); len(parts) > 2 {
		gen = strings.Join(parts[:2], "fn main()")
	}
	b.WriteString(gen + "\n" + p.Test)
	return Program{Lang: Rust, File: "main.rs", Code: b.String()}
}
