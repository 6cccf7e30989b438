package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandq/sandq/internal/config"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

// runFlags are the `run` command's flags as parsed.
type runFlags struct {
	lang, id, queue, isolation, tenant, environment string

	timeout                                                        time.Duration
	memoryMB, pids, outputBytes, diskMB, tmpMB, nofile, fileSizeMB int64
	cpus                                                           float64

	stdin, stdinFile                                      string
	args, env, files, outputFiles, libraries, tags, allow []string
	runAllowHosts                                         []string
	maxRetry                                              int
	wait, json, follow                                    bool
	waitTimeout                                           time.Duration
	jobJSON                                               string
}

// maxJobJSONBytes bounds what --job-json reads, so a wrong file is not
// slurped whole. A valid job is smaller: 1 MiB of code and 10 MiB of
// inline files, base64 in JSON, by default.
const maxJobJSONBytes = 64 * jobs.MiB

func (a *app) newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run [FILE|-]",
		Short: "Enqueue a program as a job, and optionally wait for its result",
		Long: `Enqueue the program in FILE (or on stdin: "-", or no FILE when stdin is not a
terminal) as a sandq job.

Without --wait, print the job ID (with --json, {"id", "queue", "existing",
"status"}) and exit 0. Enqueueing is idempotent by --id: if the job already
exists, nothing new is enqueued; the ID is printed and stderr says so.

With --follow, print the program's output as it runs (stdout to stdout,
stderr to stderr, the compile step's to stderr), then the status line as
--wait does; the job is enqueued with live output ("stream": true).

With --wait, block until the job ends, then print the program's stdout and
stderr byte for byte to this command's stdout and stderr, followed by one
status line on stderr ("sandq: job ID succeeded (exit 0, 23 ms wall)"), and
exit with a status that mirrors the job's (below). With --wait --json, print
the Result as JSON on stdout instead, and nothing else there.

Ctrl-C while waiting stops waiting; the job goes on. The message says how
to resume waiting (enqueue wait ID) and how to cancel the job (enqueue
cancel ID).

The job is checked before Redis is touched: an invalid one (unknown
language, limits above the caps, bad paths...) prints "enqueue: invalid
job: ..." and exits 64.

--lang defaults to the language whose name or alias is FILE's extension
(prog.py → python). Languages: ` + langList() + `.

--job-json reads a whole job (the JSON of jobs.Job) instead; FILE and flags
given on the command line then override its fields. Lists (--arg, --file,
--output-file, --lib) replace the job's; --env and --tag are merged key by
key. A zero or empty flag value leaves the job's field as it is.

` + exitStatusHelp,
		Example: `  enqueue run hello.py
  echo 'print(42)' | enqueue run --lang py --wait
  enqueue run --wait --timeout 2s --memory 128 --arg x --env DEBUG=1 prog.py
  enqueue run --follow --timeout 5m train.py
  enqueue run --id report-7 --file data.csv:in/data.csv --output-file 'out/*.png' report.py
  enqueue run --job-json job.json --queue critical --wait --json
  enqueue run --environment jq-md5 --lang js --wait prog.js
  enqueue run --allow api.example.com:443 --wait fetch.py`,
		Args: usageArgs(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.newClientAllowing(f.runAllowHosts)
			if err != nil {
				return err
			}
			defer c.Close()
			o, err := a.loadRunOptions(cmd, args, &f, c.Policy())
			if err != nil {
				return err
			}
			j, err := buildJob(o)
			if err != nil {
				return usageError(cmd, err)
			}
			if f.follow {
				j.Stream = true
			}
			info, err := c.Enqueue(cmd.Context(), j)
			if ve, ok := errors.AsType[*jobs.ValidationError](err); ok {
				return &exitError{code: exitRejected, err: describeInvalid(ve, j, o)}
			}
			if err != nil {
				return a.failure(cmd, err)
			}
			if info.Existing {
				fmt.Fprintf(a.stderr, "enqueue: job %s already exists (status %s); nothing new was enqueued\n", info.ID, info.Status)
			}
			if f.follow {
				return a.follow(cmd, c, info.ID, f.waitTimeout)
			}
			if f.wait {
				return a.await(cmd, c, info.ID, f.json, f.waitTimeout)
			}
			if f.json {
				return writeJSON(a.stdout, enqueueInfoJSON{ID: info.ID, Queue: info.Queue, Existing: info.Existing, Status: info.Status})
			}
			_, err = fmt.Fprintln(a.stdout, info.ID)
			return err
		},
	}

	fl := cmd.Flags()
	fl.SortFlags = false
	fl.StringVarP(&f.lang, "lang", "l", "", "language: "+langList()+" (default: from FILE's extension)")
	fl.StringVar(&f.id, "id", "", "job ID, [A-Za-z0-9_.:-]{1,128}; enqueueing an existing ID is a no-op (default: random)")
	fl.StringVar(&f.queue, "queue", "", "queue: critical, default or batch (default \"default\")")
	fl.StringVar(&f.isolation, "isolation", "", "container isolation: reuse (a scrubbed pooled container) or fresh (default \"reuse\")")
	fl.DurationVar(&f.timeout, "timeout", 0, "wall-clock limit of the run, such as 2s (default 10s)")
	fl.Int64Var(&f.memoryMB, "memory", 0, "memory limit in MiB, swap off (default 256)")
	fl.Float64Var(&f.cpus, "cpus", 0, "CPU quota in cores, such as 0.5 (default 1)")
	fl.Int64Var(&f.pids, "pids", 0, "process and thread limit (default 128)")
	fl.Int64Var(&f.outputBytes, "output-bytes", 0, "bytes kept of each of stdout and stderr (default 1 MiB)")
	fl.Int64Var(&f.diskMB, "disk", 0, "work dir size in MiB (default 256)")
	fl.Int64Var(&f.tmpMB, "tmp", 0, "/tmp size in MiB (default 64)")
	fl.Int64Var(&f.nofile, "nofile", 0, "open file limit (default 256)")
	fl.Int64Var(&f.fileSizeMB, "file-size", 0, "largest file the program may write, in MiB (default 64)")
	fl.StringVar(&f.stdin, "stdin", "", "the program's standard input")
	fl.StringVar(&f.stdinFile, "stdin-file", "", `file whose content is the program's standard input ("-": this command's stdin)`)
	fl.StringArrayVar(&f.args, "arg", nil, "argument for the program (repeatable, in order)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "KEY=VALUE environment variable for the program (repeatable)")
	fl.StringArrayVar(&f.files, "file", nil, "LOCAL[:REMOTE] input file copied into the work dir; REMOTE defaults to LOCAL's base name (repeatable)")
	fl.StringArrayVar(&f.outputFiles, "output-file", nil, "glob of work dir files to return as artifacts (repeatable)")
	fl.StringArrayVar(&f.libraries, "lib", nil, "library to install before the run, such as numpy==2.1 (repeatable)")
	fl.StringVar(&f.environment, "environment", "", `environment to run in: an environment's name (enqueue env list) or "image:REF" for an image the operator allows`)
	fl.StringArrayVar(&f.allow, "allow", nil, `HOST:PORT the run may reach through the worker's egress proxy ("*.example.com:443"; repeatable; the operator's --run-allow-hosts caps it)`)
	config.RegisterRunAllowHosts(fl, &f.runAllowHosts, "the workers")
	fl.StringArrayVar(&f.tags, "tag", nil, "KEY=VALUE tag copied into the result (repeatable)")
	fl.StringVar(&f.tenant, "tenant", "", "tenant owning the job; tenants never share a container")
	fl.IntVar(&f.maxRetry, "max-retry", 0, "retries after infrastructure faults, never after the program's own failure (default 3)")
	fl.BoolVarP(&f.wait, "wait", "w", false, "wait for the result, print the program's output and exit with a status mirroring the job's")
	fl.BoolVarP(&f.follow, "follow", "f", false, "like --wait, printing the program's output live, as it runs")
	fl.DurationVar(&f.waitTimeout, "wait-timeout", 0, "with --wait or --follow, give up waiting after this long (exit 75; the job goes on)")
	fl.BoolVar(&f.json, "json", false, "print JSON: the enqueue info, or with --wait the Result")
	fl.StringVar(&f.jobJSON, "job-json", "", `read the whole job from this JSON file ("-": stdin); flags override its fields`)
	cmd.MarkFlagsMutuallyExclusive("stdin", "stdin-file")
	cmd.MarkFlagsMutuallyExclusive("follow", "json")
	return cmd
}

// enqueueInfoJSON is how `run --json` prints a client.EnqueueInfo.
type enqueueInfoJSON struct {
	ID       string      `json:"id"`
	Queue    jobs.Queue  `json:"queue"`
	Existing bool        `json:"existing"`
	Status   jobs.Status `json:"status"`
}

// langList names every language with its aliases: "python (py, python3)".
func langList() string {
	var out []string
	for _, l := range langs.All() {
		s := l.Name
		if len(l.Aliases) > 0 {
			aliases := append([]string(nil), l.Aliases...)
			sort.Strings(aliases)
			s += " (" + strings.Join(aliases, ", ") + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// loadRunOptions reads what the flags and FILE point at (the program,
// --stdin-file, --file, --job-json) into runOptions. This command's stdin
// can feed one of them.
// policy is the client's: its size caps bound what is read.
func (a *app) loadRunOptions(cmd *cobra.Command, args []string, f *runFlags, policy jobs.Policy) (runOptions, error) {
	o := runOptions{
		Lang: f.lang, ID: f.id, Queue: f.queue, Isolation: f.isolation, Tenant: f.tenant,
		Timeout: f.timeout, MemoryMB: f.memoryMB, CPUs: f.cpus, Pids: f.pids, OutputBytes: f.outputBytes,
		DiskMB: f.diskMB, TmpMB: f.tmpMB, Nofile: f.nofile, FileSizeMB: f.fileSizeMB,
		Args: f.args, Env: f.env, Tags: f.tags, OutputFiles: f.outputFiles, Libraries: f.libraries,
		Environment: f.environment, Allow: f.allow,
	}
	if cmd.Flags().Changed("max-retry") {
		n := f.maxRetry
		o.MaxRetry = &n
	}

	stdinUser := "" // what already reads this command's stdin
	open := func(name, what string) (io.ReadCloser, error) {
		if name != "-" {
			r, err := os.Open(name)
			if err != nil {
				return nil, &exitError{code: exitCLI, err: fmt.Errorf("%s: %w", what, err)}
			}
			return r, nil
		}
		if stdinUser != "" {
			return nil, usageError(cmd, fmt.Errorf("%s and %s cannot both read stdin", stdinUser, what))
		}
		stdinUser = what
		return io.NopCloser(a.stdin), nil
	}
	read := func(name, what string, limit int64) ([]byte, error) {
		r, err := open(name, what)
		if err != nil {
			return nil, err
		}
		defer r.Close()
		return readCapped(r, limit, what)
	}

	if f.jobJSON != "" {
		b, err := read(f.jobJSON, "--job-json "+f.jobJSON, maxJobJSONBytes)
		if err != nil {
			return o, err
		}
		j, err := jobs.DecodeJob(b)
		if err != nil {
			return o, &exitError{code: exitRejected, err: fmt.Errorf("--job-json %s: %w", f.jobJSON, err)}
		}
		o.Base = &j
	}

	switch {
	case len(args) == 1:
		o.Source = args[0]
	case o.Base != nil:
		// The program is the job's.
	case !isTerminal(a.stdin):
		o.Source = "-"
	default:
		return o, usageError(cmd, errors.New("no program: give a FILE, or - to read it from stdin"))
	}
	if o.Source != "" {
		what := "program " + o.Source
		if o.Source == "-" {
			what = "program on stdin"
		}
		b, err := read(o.Source, what, policy.MaxCodeBytes)
		if err != nil {
			return o, err
		}
		o.Code = string(b)
	}

	switch {
	case cmd.Flags().Changed("stdin"):
		s := f.stdin
		o.Stdin = &s
	case f.stdinFile != "":
		b, err := read(f.stdinFile, "--stdin-file "+f.stdinFile, policy.MaxStdinBytes)
		if err != nil {
			return o, err
		}
		s := string(b)
		o.Stdin = &s
	}

	if f.files != nil {
		o.Files = make([]jobs.File, 0, len(f.files))
	}
	for _, spec := range f.files {
		local, remote, err := parseFileSpec(spec)
		if err != nil {
			return o, usageError(cmd, err)
		}
		what := "--file " + local
		b, err := read(local, what, policy.MaxInlineFileBytes)
		if err != nil {
			return o, err
		}
		file := jobs.File{Path: remote, ContentB64: b}
		if local != "-" {
			if fi, err := os.Stat(local); err == nil && fi.Mode().Perm()&0o111 != 0 {
				file.Mode = 0o755 // keep it executable
			}
		}
		o.Files = append(o.Files, file)
	}
	return o, nil
}

// readCapped reads r to the end, refusing more than limit bytes. Too much
// is an invalid job (exit 64), reported without reading the rest.
func readCapped(r io.Reader, limit int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, &exitError{code: exitCLI, err: fmt.Errorf("read %s: %w", what, err)}
	}
	if int64(len(b)) > limit {
		return nil, &exitError{code: exitRejected, err: fmt.Errorf("invalid job: %s is over the cap of %d bytes", what, limit)}
	}
	return b, nil
}

// isTerminal reports whether r is a character device, such as a terminal.
// Readers that are not files (tests) are not terminals.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// writeJSON writes v as indented JSON and a newline, without escaping
// HTML characters, so program output in a Result stays readable.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
