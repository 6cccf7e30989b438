package eval

import (
	"fmt"
	"regexp"
)

var (
	// javaTestMain matches the main method the test declares.
	javaTestMain = regexp.MustCompile(`(\bstatic\s+void\s+)main(\s*\()`)
	// javaMainClass matches the opening of the test's class Main.
	javaMainClass = regexp.MustCompile(`\bpublic\s+(?:final\s+)?class\s+Main\s*\{`)
)

// assembleJava is prompt + completion + "\n" + test in Main.java: the test
// holds "public class Main", compiled with javac and run with java -ea.
//
// The test's main method is renamed sandqTestMain, and a new main, the
// first member of class Main, calls it and then prints the end-of-tests
// marker: after every check of the test has run, and not if a check threw
// (the exception leaves main) or the program exited first
// (System.exit(0) in a static initializer of the sample's class, which
// runs at its first use in the test, or in the method under test).
func assembleJava(p Problem, completion, marker string) (Program, error) {
	if n := len(javaTestMain.FindAllStringIndex(p.Test, -1)); n != 1 {
		return Program{}, fmt.Errorf("eval: task %s: its test declares %d main methods; want 1", p.TaskID, n)
	}
	test := javaTestMain.ReplaceAllString(p.Test, "${1}sandqTestMain$2")
	at := javaMainClass.FindStringIndex(test)
	if at == nil {
		return Program{}, fmt.Errorf("eval: task %s: its test has no public class Main", p.TaskID)
	}
	test = test[:at[1]] + javaMain(marker) + test[at[1]:]
	return Program{Lang: Java, File: "Main.java", Code: p.Prompt + completion + "\n" + test}, nil
}

// javaMain is the main method added to class Main. It declares Throwable,
// which covers whatever the test's main declares (Java/162's
// NoSuchAlgorithmException).
func javaMain(marker string) string {
	return "\n    // Added by sandq's eval: run the test's main, then say the tests ran to the end.\n" +
		"    public static void main(String[] args) throws Throwable {\n" +
		"        sandqTestMain(args);\n" +
		`        System.out.print("\n` + marker + `\n");` + "\n" +
		"        System.out.flush();\n" +
		"    }\n"
}
