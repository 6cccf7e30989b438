package worker

import (
	"time"

	"github.com/sandq/sandq/agent"
	"github.com/sandq/sandq/jobs"
	"github.com/sandq/sandq/langs"
	"github.com/sandq/sandq/sandbox"
)

// Limits are a job's limits in the sandbox's terms: what is fixed when its
// container is created (part of the pool key) and what each step gets.
type Limits struct {
	Container sandbox.ContainerLimits
	// Timeout is the run step's wall-clock limit.
	Timeout time.Duration
	// OutputBytes is kept of each stream of each step.
	OutputBytes int
	// Rlimits are each step's process limits.
	Rlimits agent.Rlimits
	// MemoryBytes is the job's own memory limit (its processes' memory),
	// which the agent enforces within the container's larger one.
	MemoryBytes int64
}

// The agent's own share of a container, on top of what the job may use,
// so that no job can take from it (a job that exhausts its share is
// killed, the agent is not).
const (
	// AgentMemory is the agent's heap and stacks, beside the output it
	// keeps (AgentOutputFactor × output_bytes: head and tail of two
	// streams, and their encoding in the result frame).
	AgentMemory       = 48 * jobs.MiB
	AgentOutputFactor = 5
	// AgentPids covers the agent's threads.
	AgentPids = 32
	// AgentNofile is the least descriptor limit the agent works with
	// (pipes, collection walks); a job asking for fewer gets its own
	// through the agent's launcher.
	AgentNofile = 128
)

// LimitsOf turns normalized job limits (every field set, as
// [jobs.Policy.Normalize] leaves them) into sandbox limits. It is the one
// place that does: the handler plans every job with it, and warm pools are
// started with it (WarmSpec), so a warm container is the one a job asks
// for.
//
// One budget: the container's memory limit is the job's memory, plus the
// sizes of its tmpfs mounts (the work dir, /tmp and /dev/shm: files there
// are memory the kernel charges to the container and does not free when
// the job's processes die), plus the agent's share. The agent kills the
// job when its processes pass the job's memory (an OOM kill); the kernel's
// limit is the backstop, and whatever the job does, the agent keeps its
// share.
func LimitsOf(l jobs.Limits) Limits {
	mem := l.MemoryMB * jobs.MiB
	tmpfs := (l.DiskMB + 2*l.TmpMB) * jobs.MiB
	return Limits{
		Container: sandbox.ContainerLimits{
			MemoryBytes:   mem + tmpfs + AgentMemory + AgentOutputFactor*l.OutputBytes,
			NanoCPUs:      int64(l.CPUs * 1e9),
			Pids:          l.Pids + AgentPids,
			WorkDirBytes:  l.DiskMB * jobs.MiB,
			TmpBytes:      l.TmpMB * jobs.MiB,
			NoFile:        uint64(max(l.Nofile, AgentNofile)),
			FileSizeBytes: uint64(max(l.FileSizeMB, 0) * jobs.MiB),
		},
		Timeout:     time.Duration(l.TimeoutMS) * time.Millisecond,
		OutputBytes: int(l.OutputBytes),
		// Equal to the container's ulimits when the job's nofile is at
		// least the agent's: the agent then starts steps directly, without
		// its launcher.
		Rlimits:     agent.Rlimits{NoFile: uint64(max(l.Nofile, 0)), FileSize: uint64(max(l.FileSizeMB, 0) * jobs.MiB)},
		MemoryBytes: mem,
	}
}

// SpecOf returns the pool key of a normalized job: its language's image
// under imagePrefix, its container limits, tenant and isolation, the
// volume of its installed library set ("" for none) and its network
// policy (a container never serves jobs of two policies).
//
// A job with a network policy runs in a fresh container whatever its
// isolation: the agent's scrub cannot prove clean a network namespace in
// which TCP connections were made (the relay's, on its loopback) and
// discards such a container anyway; fresh, the next container of the
// policy is started ahead instead.
func SpecOf(j jobs.Job, imagePrefix, volume string) sandbox.Spec {
	lang, _ := langs.Lookup(j.Lang)
	mode := sandbox.ModeReuse
	if j.Isolation == jobs.IsolationFresh || j.Network != nil {
		mode = sandbox.ModeFresh
	}
	return sandbox.Spec{
		Image: lang.Image(imagePrefix), Limits: LimitsOf(j.Limits).Container,
		Tenant: j.Tenant, Mode: mode, Volume: volume, Network: j.Network.Key(),
	}
}

// WarmSpec is the pool key of lang's default job under policy: the one a
// job that sets no limits, tenant or isolation runs in. `worker --warm`
// starts these.
func WarmSpec(policy jobs.Policy, lang, imagePrefix string) (sandbox.Spec, bool) {
	if _, ok := langs.Lookup(lang); !ok {
		return sandbox.Spec{}, false
	}
	j := jobs.Job{Lang: lang, Code: "-"}
	langs.Policy(policy).Normalize(&j)
	return SpecOf(j, imagePrefix, ""), true
}
