package mcpserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandq/sandq/jobs"
)

// FileInput is a file written into the work dir before the program runs.
type FileInput struct {
	Path       string `json:"path" jsonschema:"the file's path relative to the work dir, such as data/input.csv"`
	Content    string `json:"content,omitempty" jsonschema:"the file's text"`
	ContentB64 string `json:"content_b64,omitempty" jsonschema:"the file's bytes in standard base64, instead of content"`
}

// RunCodeInput is run_code's input.
type RunCodeInput struct {
	Lang        string          `json:"lang" jsonschema:"the language, as list_languages names it (python, javascript, typescript, java, cpp, c, go, rust, ruby, r, bash) or an alias (py, js, ts, c++, golang, rs, rb, sh)"`
	Code        string          `json:"code" jsonschema:"the program's source; Java's public class may have any name"`
	Stdin       string          `json:"stdin,omitempty" jsonschema:"written to the program's standard input, which is then closed"`
	Files       []FileInput     `json:"files,omitempty" jsonschema:"files written into the work dir before the program starts"`
	Libraries   []string        `json:"libraries,omitempty" jsonschema:"packages to install first, in the language's package manager syntax: pip requirement specifiers for python (numpy==2.1), npm names for javascript and typescript, crates for rust, gems for ruby, CRAN names for r, Go module paths for go"`
	Limits      jobs.Limits     `json:"limits,omitzero" jsonschema:"resource limits of the run; an omitted limit is the operator's default"`
	OutputFiles []string        `json:"output_files,omitempty" jsonschema:"glob patterns (relative to the work dir, * does not cross /) of files to return as artifacts"`
	WaitSeconds int             `json:"wait_seconds,omitempty" jsonschema:"how long to wait for the job to end (default and cap: the server's, 600 s unless set otherwise); if it has not ended by then, the result gives its status and ID for get_job"`
	Tests       []jobs.TestCase `json:"tests,omitempty" jsonschema:"judge the program: compile it once and run it once per test case with the case's stdin; each case's output is compared with its expected_stdout (or judged by judge.checker); the result has a verdict per case and for the job (accepted, wrong_answer, time_limit, memory_limit, runtime_error, output_limit, compile_error, checker_error), and limits.cpu_ms is each case's CPU time"`
	Environment string          `json:"environment,omitempty" jsonschema:"run in this environment: an environment's name (env_list; its language must be lang) or image:REF for an image the operator allows; libraries are not installed then"`
	Network     []string        `json:"network,omitempty" jsonschema:"destinations the run may reach, host:port each (*.example.com:443 for subdomains), through the worker's egress proxy (HTTP and CONNECT); refused unless the operator's --run-allow-hosts and the key's network:egress scope allow them; default: no network"`
	Judge       *jobs.JudgeSpec `json:"judge,omitempty" jsonschema:"how the test cases are judged: compare (lines, the default; exact; tokens; float with abs_tol and rel_tol), or a checker program {lang, code} run with the files input, output and answer that exits 0 to accept; stop_on_first_failure (default true)"`
}

// JobIDInput names a job.
type JobIDInput struct {
	ID string `json:"id" jsonschema:"the job's ID, as run_code returned it"`
}

// GetJobInput is get_job's input.
type GetJobInput struct {
	ID          string `json:"id" jsonschema:"the job's ID, as run_code returned it"`
	WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"wait this long for the job to end (0: answer at once)"`
}

// LanguagesOutput is list_languages' output.
type LanguagesOutput struct {
	Languages []Language `json:"languages"`
}

func (s *server) addJobTools(srv *mcp.Server) error {
	in, err := jsonschema.For[RunCodeInput](nil)
	if err != nil {
		return err
	}
	documentLimits(in.Properties["limits"])
	mcp.AddTool(srv, &mcp.Tool{Name: "run_code", Title: "Run code",
		Description: "Runs a program once in a fresh sandbox (no network unless the job's policy allows, operator and key permitting) and returns its status, exit code, stdout, stderr " +
			"and resource usage. Plots (matplotlib in python, R graphics) come back as images; files matching output_files as " +
			"resource links (read them with resources/read). Status is one of succeeded, failed, compile_error, timeout, oom, " +
			"output_limit, rejected, canceled, internal_error; any but succeeded is an error result. Send a progress token to get " +
			"progress notifications while the job is queued and running; cancelling the call cancels the job.",
		InputSchema: in, Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(false)},
	}, s.runCode)

	mcp.AddTool(srv, &mcp.Tool{Name: "get_job", Title: "Read a job",
		Description: "Reads a job's result by its ID (run_code's id): final, or queued/running. With wait_seconds, waits that long for it to end.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in GetJobInput) (*mcp.CallToolResult, *JobOutput, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		var r jobs.Result
		if in.WaitSeconds > 0 {
			r, err = s.await(ctx, req, b, in.ID, s.waitFor(in.WaitSeconds), false)
		} else {
			r, err = b.Job(ctx, in.ID, 0)
		}
		if err != nil {
			return errorResult(err), nil, nil
		}
		return s.jobResult(ctx, b, r)
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "cancel_job", Title: "Cancel a job",
		Description: "Cancels a job: a queued one ends canceled at once, a running one is killed and ends canceled with its output so far.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in JobIDInput) (*mcp.CallToolResult, *JobOutput, error) {
		b, err := s.backend(ctx, req.Extra)
		if err != nil {
			return errorResult(err), nil, nil
		}
		if err := b.Cancel(ctx, in.ID); err != nil {
			return errorResult(err), nil, nil
		}
		r, err := b.Job(ctx, in.ID, 5e9) // a running job's kill takes a moment
		if err != nil {
			return errorResult(err), nil, nil
		}
		res, out, err := s.jobResult(ctx, b, r)
		if res != nil {
			res.IsError = false // the cancel did what was asked
		}
		return res, out, err
	})

	mcp.AddTool(srv, &mcp.Tool{Name: "list_languages", Title: "List the languages",
		Description: "The languages sandq runs: names and aliases, the package manager that installs libraries, the toolchain version, whether plots are captured and whether sessions are offered.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, *LanguagesOutput, error) {
		list, err := Languages(ctx, s.cfg.Service)
		if err != nil {
			return errorResult(err), nil, nil
		}
		return nil, &LanguagesOutput{Languages: list}, nil
	})
	return nil
}

// runCode is run_code.
func (s *server) runCode(ctx context.Context, req *mcp.CallToolRequest, in RunCodeInput) (*mcp.CallToolResult, *JobOutput, error) {
	b, err := s.backend(ctx, req.Extra)
	if err != nil {
		return errorResult(err), nil, nil
	}
	files, err := jobFiles(in.Files)
	if err != nil {
		return errorResult(err), nil, nil
	}
	job := jobs.Job{Lang: in.Lang, Code: in.Code, Stdin: in.Stdin, Files: files, Libraries: in.Libraries,
		Limits: in.Limits, OutputFiles: in.OutputFiles, Tags: map[string]string{"via": "mcp"}, Tests: in.Tests, Judge: in.Judge,
		Environment: in.Environment}
	if in.Network != nil {
		job.Network = &jobs.NetworkPolicy{Allow: in.Network}
	}
	r, err := s.run(ctx, req, b, job, in.WaitSeconds)
	if err != nil {
		return errorResult(err), nil, nil
	}
	return s.jobResult(ctx, b, r)
}

// run enqueues job and waits for it (see await).
func (s *server) run(ctx context.Context, req *mcp.CallToolRequest, b Backend, job jobs.Job, waitSeconds int) (jobs.Result, error) {
	id, err := b.Enqueue(ctx, job)
	if err != nil {
		return jobs.Result{}, err
	}
	return s.await(ctx, req, b, id, s.waitFor(waitSeconds), true)
}

// jobFiles turns the input's files into a job's.
func jobFiles(in []FileInput) ([]jobs.File, error) {
	var out []jobs.File
	for i, f := range in {
		data := []byte(f.Content)
		if f.ContentB64 != "" {
			if f.Content != "" {
				return nil, &jobs.ValidationError{Field: fmt.Sprintf("files[%d]", i), Msg: "give content or content_b64, not both"}
			}
			var err error
			if data, err = base64.StdEncoding.DecodeString(f.ContentB64); err != nil {
				return nil, &jobs.ValidationError{Field: fmt.Sprintf("files[%d].content_b64", i), Msg: "not standard base64: " + err.Error()}
			}
		}
		out = append(out, jobs.File{Path: f.Path, ContentB64: data})
	}
	return out, nil
}

// documentLimits describes each limit's field of a Limits schema from
// jobs.LimitTable: its unit, default and cap.
func documentLimits(sc *jsonschema.Schema) {
	if sc == nil {
		return
	}
	for _, l := range jobs.LimitTable {
		p := sc.Properties[l.Name]
		if p == nil {
			continue
		}
		p.Description = fmt.Sprintf("%s; built-in default %g, cap %g (an operator may set others)", l.Unit, l.Default, l.Cap)
		p.Minimum = ptr(l.Min)
	}
}

// artifactURI is the resource URI of job id's artifact name.
func artifactURI(id, name string) string {
	return "sandq://jobs/" + url.PathEscape(id) + "/artifacts/" + url.PathEscape(name)
}

func ptr[T any](v T) *T { return &v }
