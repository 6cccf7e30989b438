package eval

// assembleJava is prompt + completion + "\n" + test in Main.java: the test
// holds "public class Main", compiled with javac and run with java -ea.
func assembleJava(p Problem, completion string) Program {
	return Program{Lang: Java, File: "Main.java", Code: p.Prompt + completion + "\n" + p.Test}
}
