package sandbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/langs"
)

// tsPrograms are TypeScript programs whose compile (sandq-tsc) and run are
// compared between a cold start and a compiler started ahead on a FIFO:
// a clean program, type errors (exit 2, tsc's diagnostics), a syntax error,
// an import of a file beside it and of a Node.js module, one that is
// missing, a byte-order mark, an empty file, a module, a run-time error.
var tsPrograms = map[string]string{
	"ok":      "const xs: number[] = [3, 1, 2].sort((a, b) => a - b);\nconsole.log(xs, process.argv.length);\n",
	"types":   "const n: number = 'x';\nfunction f(a: string): number { return a; }\nconsole.log(n, f('y'));\n",
	"syntax":  "console.log((1 + );\n",
	"import":  "import { x } from './util';\nimport * as fs from 'fs';\nconsole.log(x * 2, fs.existsSync('main.ts'));\n",
	"missing": "import { y } from './nope';\nconsole.log(y);\n",
	"bom":     "\ufeffconst s: string = 'bom';\nconsole.log(s);\n",
	"empty":   "",
	"module":  "export const z = 1;\nconsole.log(typeof module, typeof exports);\n",
	"throws":  "function boom(): never { throw new Error('at run time'); }\nboom();\n",
}

// ts builds a run request as the worker builds a TypeScript job's: the
// compile step (mods apply to it) then the run, then a look at what the
// compiler wrote.
func (tb *testBundle) ts(code string, mods ...func(*agent.Step)) *agent.RunRequest {
	lang, ok := langs.Lookup("typescript")
	if !ok {
		panic("no typescript")
	}
	req := tb.request(lang.Compile, []agent.File{{Path: "main.ts", Data: []byte(code)},
		{Path: "util.ts", Data: []byte("export const x: number = 21;\n")}}, mods...)
	req.Steps[0].Name, req.Steps[0].StopOnFailure = "compile", true
	for _, argv := range [][]string{lang.Run, {"cat", "main.js"}} {
		req.Steps = append(req.Steps, agent.Step{Name: "run", Argv: argv, Timeout: tb.lim.Timeout,
			OutputLimit: tb.lim.OutputBytes, Rlimits: tb.lim.Rlimits})
	}
	return req
}

func (tb *testBundle) runTS(t *testing.T, req *agent.RunRequest) []agent.StepResult {
	t.Helper()
	res, err := tb.pool.Run(context.Background(), tb.spec, req)
	require.NoError(t, err)
	require.NotEmpty(t, res.Steps, "files error: %s", res.FilesError)
	return res.Steps
}

// setupTS is setup with the typescript image.
func setupTS(t *testing.T, backend string, o setupOpts) *testBundle {
	tb := setup(t, backend, o)
	tb.spec.Image = "sandq/typescript:latest"
	return tb
}

// TestPrestartTSCIsAColdCompile: each program compiled cold and by the
// compiler started ahead for it (its snapshot booted, waiting on a FIFO
// where main.ts will be) gives the same steps, byte for byte: the
// compiler's diagnostics and exit, the program's run, the JavaScript it
// wrote.
func TestPrestartTSCIsAColdCompile(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setupTS(t, backend, setupOpts{})
		prestart := func(s *agent.Step) { s.Prestart = true }
		for name, code := range tsPrograms {
			cold := tb.runTS(t, tb.ts(code))
			asked := tb.runTS(t, tb.ts(code, prestart))
			require.False(t, cold[0].Prestarted, name)
			require.False(t, asked[0].Prestarted, "%s: the run before it asked for none", name)
			warm := warmRun(t, name, func() []agent.StepResult { return tb.runTS(t, tb.ts(code, prestart)) },
				func(r []agent.StepResult) bool { return r[0].Prestarted })
			for _, r := range [][]agent.StepResult{asked, warm} {
				require.Len(t, r, len(cold), name)
				for i := range cold {
					require.Equal(t, cold[i].ExitCode, r[i].ExitCode, "%s, step %d", name, i)
					require.Equal(t, stdout(cold[i]), stdout(r[i]), "%s, step %d", name, i)
					require.Equal(t, stderr(cold[i]), stderr(r[i]), "%s, step %d", name, i)
				}
			}
			switch name {
			case "ok":
				require.Len(t, cold, 3)
				require.Equal(t, "[ 1, 2, 3 ] 2\n", stdout(cold[1]), stderr(cold[1]))
			case "types":
				require.Equal(t, 2, cold[0].ExitCode)
				require.Contains(t, stdout(cold[0]), "main.ts(1,7): error TS2322")
			case "import":
				require.Equal(t, "42 true\n", stdout(cold[1]), stderr(cold[1]))
			case "missing":
				require.Contains(t, stdout(cold[0]), "error TS2307")
			}
		}
	})
}

// TestPrestartTSCFallsBackCold: a compile the compiler started ahead
// cannot serve as a cold one would starts cold, and right (another env or
// rlimits, a file at the staging name); an env that names files Node.js
// reads as it starts (NODE_OPTIONS) is never started ahead.
func TestPrestartTSCFallsBackCold(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, backend string) {
		tb := setupTS(t, backend, setupOpts{})
		prestart := func(s *agent.Step) { s.Prestart = true }
		code := tsPrograms["import"]
		cases := []struct {
			name string
			mod  func(*agent.Step)
			req  func(*agent.RunRequest)
		}{
			{"env", func(s *agent.Step) { s.Env = append(s.Env, "X=1") }, nil},
			{"rlimits", func(s *agent.Step) { s.Rlimits.CPU = 30 }, nil},
			{"not asked", func(s *agent.Step) { s.Prestart = false }, nil},
			{"staging name", func(*agent.Step) {}, func(r *agent.RunRequest) {
				r.Files = append(r.Files, agent.File{Path: ".sandq-prestart-main.ts", Data: []byte("x")})
			}},
		}
		for _, c := range cases {
			tb.runTS(t, tb.ts(code, prestart))
			require.True(t, tb.runTS(t, tb.ts(code, prestart))[0].Prestarted, c.name)
			req := tb.ts(code, prestart, c.mod)
			if c.req != nil {
				c.req(req)
			}
			r := tb.runTS(t, req)
			require.False(t, r[0].Prestarted, c.name)
			require.Len(t, r, 3, "%s: %s", c.name, stdout(r[0]))
			require.Equal(t, "42 true\n", stdout(r[1]), "%s: %s", c.name, stderr(r[1]))
		}
		opts := func(s *agent.Step) { s.Env = append(s.Env, "NODE_OPTIONS=--no-warnings") }
		for i := range 2 {
			r := tb.runTS(t, tb.ts(code, prestart, opts))
			require.False(t, r[0].Prestarted, "NODE_OPTIONS, run %d", i)
			require.Len(t, r, 3, "NODE_OPTIONS: %s", stderr(r[0]))
			require.Equal(t, "42 true\n", stdout(r[1]), stderr(r[1]))
		}
	})
}
