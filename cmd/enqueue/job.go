package main

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
)

// runOptions is what `run` builds a job from, once every file it names has
// been read (see loadRunOptions). buildJob turns it into a Job without I/O.
//
// Without Base every field is taken as is. With Base (--job-json), a field
// overrides Base's only when it was given: a non-empty string, a non-zero
// number, a non-nil pointer or slice. Lists (args, files, output files,
// libraries) replace Base's; env and tags are merged key by key, the
// flags' keys winning.
type runOptions struct {
	// Base is the job read with --job-json, or nil.
	Base *jobs.Job

	// Source is the program's path as given, "-" for stdin, or "" when no
	// program was given (Base's code is kept). The language is inferred
	// from its extension when neither Lang nor Base names one.
	Source string
	// Code is the program read from Source.
	Code string

	Lang, ID, Queue, Isolation, Tenant string

	// Timeout is the wall-clock limit; it is rounded up to whole
	// milliseconds. Zero leaves the default.
	Timeout time.Duration
	// MemoryMB, DiskMB, TmpMB and FileSizeMB are in MiB; zero leaves the
	// default, as for the rest of the limits.
	MemoryMB, Pids, OutputBytes, DiskMB, TmpMB, Nofile, FileSizeMB int64
	CPUs                                                           float64

	// Stdin is the program's standard input, nil if not given.
	Stdin *string
	// Args is the program's argv after the language's own; nil if not
	// given.
	Args []string
	// Env and Tags are KEY=VALUE strings, parsed by buildJob.
	Env, Tags []string
	// Files are the input files, already read.
	Files       []jobs.File
	OutputFiles []string
	Libraries   []string
	// Environment names the job's environment ("" leaves it); Allow is
	// its network policy's allow list (nil leaves it).
	Environment string
	Allow       []string
	// MaxRetry is the infrastructure retry budget, nil if not given.
	MaxRetry *int
}

// buildJob builds the job that `run` enqueues from o. Its errors are
// mistakes in the flags (exit status 2); the job itself is validated by
// client.Client.Enqueue.
func buildJob(o runOptions) (jobs.Job, error) {
	var j jobs.Job
	if o.Base != nil {
		j = *o.Base
		j.Env, j.Tags = maps.Clone(j.Env), maps.Clone(j.Tags)
	}
	if o.Base == nil || o.Source != "" {
		j.Code = o.Code
	}
	j.ID = cmp.Or(o.ID, j.ID)
	j.Lang = cmp.Or(o.Lang, j.Lang, inferLang(o.Source))
	j.Queue = cmp.Or(jobs.Queue(o.Queue), j.Queue)
	j.Isolation = cmp.Or(jobs.Isolation(o.Isolation), j.Isolation)
	j.Tenant = cmp.Or(o.Tenant, j.Tenant)

	if o.Timeout < 0 {
		return jobs.Job{}, fmt.Errorf("--timeout %v is negative", o.Timeout)
	}
	if o.Timeout > 0 {
		j.Limits.TimeoutMS = int64((o.Timeout + time.Millisecond - 1) / time.Millisecond)
	}
	l := &j.Limits
	l.MemoryMB = cmp.Or(o.MemoryMB, l.MemoryMB)
	l.CPUs = cmp.Or(o.CPUs, l.CPUs)
	l.Pids = cmp.Or(o.Pids, l.Pids)
	l.OutputBytes = cmp.Or(o.OutputBytes, l.OutputBytes)
	l.DiskMB = cmp.Or(o.DiskMB, l.DiskMB)
	l.TmpMB = cmp.Or(o.TmpMB, l.TmpMB)
	l.Nofile = cmp.Or(o.Nofile, l.Nofile)
	l.FileSizeMB = cmp.Or(o.FileSizeMB, l.FileSizeMB)

	if o.Stdin != nil {
		j.Stdin = *o.Stdin
	}
	if o.Args != nil {
		j.Args = o.Args
	}
	if o.Files != nil {
		j.Files = o.Files
	}
	if o.OutputFiles != nil {
		j.OutputFiles = o.OutputFiles
	}
	if o.Libraries != nil {
		j.Libraries = o.Libraries
	}
	if o.MaxRetry != nil {
		n := *o.MaxRetry
		j.MaxRetry = &n
	}
	j.Environment = cmp.Or(o.Environment, j.Environment)
	if o.Allow != nil {
		j.Network = &jobs.NetworkPolicy{Allow: o.Allow}
	}

	env, err := parseKV("--env", o.Env)
	if err != nil {
		return jobs.Job{}, err
	}
	j.Env = mergeKV(j.Env, env)
	tags, err := parseKV("--tag", o.Tags)
	if err != nil {
		return jobs.Job{}, err
	}
	j.Tags = mergeKV(j.Tags, tags)
	return j, nil
}

// inferLang returns the canonical language whose name or alias is the
// extension of source without its dot ("prog.py" → "python"), or "" if
// there is none, or if source is stdin ("-") or empty.
func inferLang(source string) string {
	if source == "" || source == "-" {
		return ""
	}
	ext := strings.TrimPrefix(filepath.Ext(source), ".")
	if ext == "" {
		return ""
	}
	l, ok := langs.Lookup(ext)
	if !ok {
		return ""
	}
	return l.Name
}

// parseKV parses KEY=VALUE strings given with flag. The value may be empty
// or contain "="; the key may not be empty or repeated. Nil in, nil out.
func parseKV(flag string, kvs []string) (map[string]string, error) {
	if kvs == nil {
		return nil, nil
	}
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, kv)
		case k == "":
			return nil, fmt.Errorf("%s %q: the key is empty", flag, kv)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("%s: key %q is given twice", flag, k)
		}
		m[k] = v
	}
	return m, nil
}

// mergeKV returns base with over's entries set; nil if both are empty.
func mergeKV(base, over map[string]string) map[string]string {
	if len(over) == 0 {
		return base
	}
	if base == nil {
		base = make(map[string]string, len(over))
	}
	maps.Copy(base, over)
	return base
}

// parseFileSpec parses a --file value, LOCAL[:REMOTE], split at the first
// ":". REMOTE, the path in the work dir, defaults to LOCAL's base name.
func parseFileSpec(spec string) (local, remote string, err error) {
	local, remote, hasRemote := strings.Cut(spec, ":")
	switch {
	case local == "":
		return "", "", fmt.Errorf("--file %q: the local path is empty; want LOCAL[:REMOTE]", spec)
	case hasRemote && remote == "":
		return "", "", fmt.Errorf("--file %q: the remote path after ':' is empty; want LOCAL[:REMOTE]", spec)
	case !hasRemote:
		remote = filepath.Base(local)
	}
	return local, remote, nil
}

// fieldFlags names the flag that sets each job field, for messages about
// invalid jobs. Fields not listed are looked up by their first component
// ("files[2].path" → "files", "env.HOME" → "env").
var fieldFlags = map[string]string{
	"id":                  "--id",
	"lang":                "--lang",
	"code":                "FILE",
	"stdin":               "--stdin, --stdin-file",
	"queue":               "--queue",
	"isolation":           "--isolation",
	"tenant":              "--tenant",
	"max_retry":           "--max-retry",
	"limits.timeout_ms":   "--timeout",
	"limits.memory_mb":    "--memory",
	"limits.cpus":         "--cpus",
	"limits.pids":         "--pids",
	"limits.output_bytes": "--output-bytes",
	"limits.disk_mb":      "--disk",
	"limits.tmp_mb":       "--tmp",
	"limits.nofile":       "--nofile",
	"limits.file_size_mb": "--file-size",
	"args":                "--arg",
	"env":                 "--env",
	"files":               "--file",
	"output_files":        "--output-file",
	"libraries":           "--lib",
	"tags":                "--tag",
	"environment":         "--environment",
	"network":             "--allow",
	"network.allow":       "--allow",
}

// describeInvalid rewrites a validation error of job j, built from o, for
// the command line: it names the flag behind the field (unless the job
// came from --job-json) and says how to give a language that could not be
// inferred.
func describeInvalid(ve *jobs.ValidationError, j jobs.Job, o runOptions) error {
	field := ve.Field
	if o.Base == nil && field != "" {
		key := field
		if i := strings.IndexAny(key, "[."); i > 0 && fieldFlags[key] == "" {
			key = key[:i]
		}
		if flag := fieldFlags[key]; flag != "" {
			field += " (" + flag + ")"
		}
	}
	msg := ve.Msg
	if ve.Field == "lang" && j.Lang == "" {
		switch o.Source {
		case "", "-":
			msg += "; pass --lang"
		default:
			msg += fmt.Sprintf("; pass --lang (none could be inferred from %q)", filepath.Base(o.Source))
		}
	}
	if field == "" {
		return errors.New("invalid job: " + msg)
	}
	return fmt.Errorf("invalid job: %s: %s", field, msg)
}
