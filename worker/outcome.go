package worker

import (
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
)

// Status mapping: what the agent reported becomes the job's status. Every
// outcome of the job's own program is a status here, never an error.

// fill sets the final status and output from what the agent reported.
func fill(res *jobs.Result, job jobs.Job, out agent.RunResult) {
	res.FinishedAt = time.Now().UTC()
	if out.FilesError != "" {
		res.Status, res.Reason = jobs.StatusRejected, "input files: "+out.FilesError
		return
	}
	// What the collector left out, and why: whether or not anything was
	// collected (upload adds what it could not store).
	res.DroppedArtifacts = append(res.DroppedArtifacts, out.Dropped...)
	for _, st := range out.Steps {
		if st.Name == "compile" {
			c := &jobs.StepResult{Usage: usage(st)}
			c.ExitCode, c.Signal = exit(st)
			c.Output = output(st)
			res.Compile = c
		}
	}
	last := out.Last()
	if last.Name == "compile" && !last.OK() {
		res.Status, res.Reason = jobs.StatusCompileError, "compilation failed"
		res.ExitCode, res.Signal = exit(last)
		switch {
		case last.TimedOut:
			res.Status, res.Reason = jobs.StatusTimeout, "compilation timed out"
		case last.OOMKilled:
			res.Status, res.Reason = jobs.StatusOOM, "compiler killed: out of memory"
		}
		return
	}
	res.Output = output(last)
	res.Usage = usage(last)
	res.ExitCode, res.Signal = exit(last)
	switch {
	case last.Canceled:
		res.Status, res.Reason = jobs.StatusCanceled, "canceled while running"
	case !last.Started:
		res.Status, res.Reason = jobs.StatusFailed, last.Error
	case last.OOMKilled && last.ExitCode != 0:
		res.Status, res.Reason = jobs.StatusOOM, fmt.Sprintf("killed by the OOM killer (memory limit %d MiB)", job.Limits.MemoryMB)
	case last.TimedOut:
		res.Status, res.Reason = jobs.StatusTimeout, fmt.Sprintf("wall-clock limit of %s exceeded; every process was killed", time.Duration(job.Limits.TimeoutMS)*time.Millisecond)
	case last.Stdout.Truncated || last.Stderr.Truncated:
		res.Status, res.Reason = jobs.StatusOutputLimit, fmt.Sprintf("output exceeded %d bytes per stream; head and tail kept", job.Limits.OutputBytes)
	case last.ExitCode == 0:
		res.Status = jobs.StatusSucceeded
	default:
		res.Status = jobs.StatusFailed
		if last.Signal != 0 {
			res.Reason = "killed by " + res.Signal
		} else {
			res.Reason = fmt.Sprintf("exit status %d", last.ExitCode)
		}
	}
}

// TruncationMarker is put between the head and the tail of a truncated
// stream; %d is the number of bytes left out.
const TruncationMarker = "\n[... sandq: %d bytes omitted ...]\n"

func joinOutput(o agent.Output) []byte {
	if !o.Truncated {
		return o.Head
	}
	omitted := o.Total - int64(len(o.Head)) - int64(len(o.Tail))
	b := append([]byte(nil), o.Head...)
	b = fmt.Appendf(b, TruncationMarker, omitted)
	return append(b, o.Tail...)
}

func output(st agent.StepResult) jobs.Output {
	var o jobs.Output
	o.SetStdout(joinOutput(st.Stdout))
	o.SetStderr(joinOutput(st.Stderr))
	o.StdoutTruncated, o.StdoutTotalBytes = st.Stdout.Truncated, st.Stdout.Total
	o.StderrTruncated, o.StderrTotalBytes = st.Stderr.Truncated, st.Stderr.Total
	return o
}

func usage(st agent.StepResult) jobs.Usage {
	return jobs.Usage{WallMS: st.WallNs / 1e6, CPUMS: st.CPUNs / 1e6, MaxRSSKB: st.MaxRSSKB, Prestarted: st.Prestarted}
}

func exit(st agent.StepResult) (*int, string) {
	if !st.Started {
		return nil, ""
	}
	if st.Signal != 0 {
		return nil, signalName(st.Signal)
	}
	code := st.ExitCode
	return &code, ""
}

func signalName(n int) string {
	s := syscall.Signal(n)
	names := map[syscall.Signal]string{
		syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV", syscall.SIGABRT: "SIGABRT",
		syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
		syscall.SIGFPE: "SIGFPE", syscall.SIGBUS: "SIGBUS", syscall.SIGILL: "SIGILL",
		syscall.SIGPIPE: "SIGPIPE", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP",
	}
	if name, ok := names[s]; ok {
		return name
	}
	return fmt.Sprintf("signal %d (%s)", n, strings.ToLower(s.String()))
}
